#pragma once
// Who may call what (SPEC section 6): the one table the api enforces, the
// docs print (docs/operations.md, checked by a unit test) and the role matrix
// test walks cell by cell. No CAF, no wire code here.

#include "auth/auth.hpp"

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace cq::coord {

/// What a role may do with an operation.
enum class reach : std::uint8_t {
  none, ///< refused (permission_denied)
  own,  ///< only on jobs the caller submitted (the operation names one job)
  any,  ///< on anything
};

struct permission {
  std::string_view op; ///< the wire op (bus/protocol.hpp)
  bool mutating;       ///< audited, allowed or refused (SPEC section 6)
  bool anonymous;      ///< needs no token (a node joining with its invite code)
  /// By role: owner, operator, submitter, node (the order of enum role).
  std::array<reach, role_count> by_role;
  std::string_view what; ///< one line for the docs
};

/// Every operation of the protocol, once.
std::span<const permission> permissions();
/// The row for `op`, or nullptr (a test checks every op has one).
const permission* permission_of(std::string_view op);
/// The table as Markdown, as docs/operations.md shows it.
std::string permissions_markdown();

} // namespace cq::coord
