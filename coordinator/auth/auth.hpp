#pragma once
// Tokens, invite codes and roles. Tokens are 256 random bits from libsodium,
// shown once and stored only as their BLAKE2b hash (they are high-entropy, so
// a fast hash is enough: there is nothing to brute-force).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cq::coord {

/// SPEC section 6. The order is the column order of the permission table.
enum class role { owner, operator_, submitter, node };
inline constexpr std::size_t role_count = 4;

std::string_view to_string(role r);
std::optional<role> parse_role(std::string_view s);

/// An authenticated caller.
struct identity {
  std::string name;
  role who = role::node;
  std::int64_t created_ms = 0; ///< when its token was made (kept when it is revoked)
};

/// A fresh token "cq_" + 64 hex digits (256 bits). Calls sodium_init() once.
std::string new_token();
/// A fresh invite code "cqi_" + 32 hex digits (128 bits).
std::string new_invite_code();
/// Hex BLAKE2b-256 of a token or code: the only form that is stored.
std::string hash_secret(std::string_view secret);
/// Hex BLAKE2b-256 of any bytes (argument digests).
inline std::string digest_of(std::string_view bytes) {
  return hash_secret(bytes);
}
/// A digest_of's 32 bytes, as memory keeps one.
using digest_bytes = std::array<unsigned char, 32>;
/// The bytes of a digest_of's hex form; nullopt for anything else.
std::optional<digest_bytes> digest_from_hex(std::string_view hex);
/// The hex form of a digest's bytes (as digest_of returns it).
std::string digest_hex(const digest_bytes& d);
/// True for the 8-4-4-4-12 hex form of a UUID (`lowercase`: no A-F), as
/// client job ids and operation ids must be.
bool is_uuid(std::string_view s, bool lowercase = false);
/// A random UUID (version 4), used for job ids: a job is named by the
/// shortest prefix that tells it apart, so ids differ from their first digit.
std::string new_uuid();
/// A time-ordered UUID (version 7, RFC 9562: the Unix time in milliseconds,
/// then 74 random bits), used for allocation ids: the store's allocations are
/// keyed by it, and new keys then land at the index's end (docs/adr/0046).
/// `unix_ms` is the wall clock's.
std::string new_uuid_v7(std::int64_t unix_ms);
/// A random 64-bit order id (never 0): a reply to an order cannot be guessed.
std::uint64_t new_order_id();

} // namespace cq::coord
