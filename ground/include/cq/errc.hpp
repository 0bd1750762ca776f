#pragma once
// The one error enum of cq. Every error a caller can see carries one of these
// codes; the numbers are stable (they travel on the wire and scripts match on
// the names). The CLI's exit code follows from the code (SPEC section 7):
// 1 internal/unreachable (retryable), 2 invalid input, 3 not found,
// 4 permission denied, 5 conflict.
//
// This header has no dependencies so that the CAF-free parts (codec, CLI) can
// use it. Actors carry an errc inside bus::error_info (actors/system.hpp), not
// as a CAF error category.

#include <cstdint>
#include <string_view>

namespace cq {

enum class errc : std::uint8_t {
  /// A bug or an unexpected failure inside cq (a database error, say).
  internal = 1,
  /// The coordinator (or a node) could not be reached or did not answer in time.
  unavailable = 2,
  /// The frame is not a well-formed cq message (bad msgpack, wrong types, too deep).
  malformed = 10,
  /// A field has a value outside its allowed range or format; the message names the field.
  invalid_argument = 11,
  /// The op is not one this peer knows.
  unknown_op = 12,
  /// The protocol version is not one this peer speaks.
  unsupported_version = 13,
  /// The frame or a field is larger than its limit.
  too_large = 14,
  /// The named job, node, allocation or invite does not exist.
  not_found = 20,
  /// The token is missing or unknown.
  unauthenticated = 30,
  /// The identity is known but its role does not allow the call.
  permission_denied = 31,
  /// The call conflicts with the current state (e.g. cancelling a finished job).
  invalid_state = 40,
  /// A name or id is already taken by something else (a node name that joined;
  /// a node identity another daemon's connection speaks for right now).
  already_exists = 41,
  /// A client job id was reused with a different spec.
  job_conflict = 42,
  /// An operation id was reused with other arguments (SPEC section 9).
  operation_conflict = 43,
};

/// Stable snake_case name of a code, as printed by the CLI and sent on the wire.
constexpr std::string_view to_string(errc e) {
  switch (e) {
  case errc::internal:
    return "internal";
  case errc::unavailable:
    return "unavailable";
  case errc::malformed:
    return "malformed";
  case errc::invalid_argument:
    return "invalid_argument";
  case errc::unknown_op:
    return "unknown_op";
  case errc::unsupported_version:
    return "unsupported_version";
  case errc::too_large:
    return "too_large";
  case errc::not_found:
    return "not_found";
  case errc::unauthenticated:
    return "unauthenticated";
  case errc::permission_denied:
    return "permission_denied";
  case errc::invalid_state:
    return "invalid_state";
  case errc::already_exists:
    return "already_exists";
  case errc::job_conflict:
    return "job_conflict";
  case errc::operation_conflict:
    return "operation_conflict";
  }
  return "internal";
}

/// True for the numbers that name an errc value (used when decoding the wire).
constexpr bool is_errc(std::uint64_t v) {
  switch (v) {
  case 1:
  case 2:
  case 10:
  case 11:
  case 12:
  case 13:
  case 14:
  case 20:
  case 30:
  case 31:
  case 40:
  case 41:
  case 42:
  case 43:
    return true;
  default:
    return false;
  }
}

/// The CLI exit code for an error (SPEC section 7).
constexpr int exit_code(errc e) {
  auto v = static_cast<int>(e);
  if (v < 10)
    return 1;
  if (v < 20)
    return 2;
  if (v < 30)
    return 3;
  if (v < 40)
    return 4;
  return 5;
}

} // namespace cq
