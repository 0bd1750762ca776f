#include "auth.hpp"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <stdexcept>

namespace cq::coord {
namespace {

void init_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok)
    throw std::runtime_error("libsodium failed to initialise");
}

std::string to_hex(const unsigned char* p, std::size_t n) {
  std::string out(n * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), p, n);
  out.pop_back();
  return out;
}

std::string random_hex(std::size_t bytes) {
  init_sodium();
  std::array<unsigned char, 64> buf{};
  randombytes_buf(buf.data(), bytes);
  return to_hex(buf.data(), bytes);
}

} // namespace

std::optional<digest_bytes> digest_from_hex(std::string_view hex) {
  digest_bytes d{};
  std::size_t len = 0;
  const char* end = nullptr;
  if (hex.size() != d.size() * 2 ||
      sodium_hex2bin(d.data(), d.size(), hex.data(), hex.size(), nullptr, &len, &end) != 0 ||
      len != d.size() || end != hex.data() + hex.size())
    return std::nullopt;
  return d;
}

std::string digest_hex(const digest_bytes& d) {
  return to_hex(d.data(), d.size());
}

std::string_view to_string(role r) {
  switch (r) {
  case role::owner:
    return "owner";
  case role::operator_:
    return "operator";
  case role::submitter:
    return "submitter";
  case role::node:
    return "node";
  }
  return "node";
}

std::optional<role> parse_role(std::string_view s) {
  if (s == "owner")
    return role::owner;
  if (s == "operator")
    return role::operator_;
  if (s == "submitter")
    return role::submitter;
  if (s == "node")
    return role::node;
  return std::nullopt;
}

std::string new_token() {
  return "cq_" + random_hex(32);
}
std::string new_invite_code() {
  return "cqi_" + random_hex(16);
}

std::string hash_secret(std::string_view secret) {
  init_sodium();
  std::array<unsigned char, crypto_generichash_BYTES> h{};
  crypto_generichash(h.data(), h.size(), reinterpret_cast<const unsigned char*>(secret.data()),
                     secret.size(), nullptr, 0);
  return to_hex(h.data(), h.size());
}

std::uint64_t new_order_id() {
  init_sodium();
  std::uint64_t id = 0;
  while (id == 0)
    randombytes_buf(&id, sizeof id);
  return id;
}

bool is_uuid(std::string_view s, bool lowercase) {
  if (s.size() != 36)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !std::isxdigit(c) || (lowercase && std::isupper(c)))
      return false;
  }
  return true;
}

namespace {
/// 16 random bytes with `version` and RFC 9562's variant, optionally the
/// first six being `unix_ms` (big-endian), in the 8-4-4-4-12 form.
std::string make_uuid(unsigned version, std::optional<std::int64_t> unix_ms) {
  init_sodium();
  std::array<unsigned char, 16> b{};
  randombytes_buf(b.data(), b.size());
  if (unix_ms) {
    auto t = static_cast<std::uint64_t>(std::max<std::int64_t>(*unix_ms, 0));
    for (int i = 5; i >= 0; --i, t >>= 8)
      b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(t & 0xff);
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | (version << 4));
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  auto h = to_hex(b.data(), b.size());
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}
} // namespace

std::string new_uuid() {
  return make_uuid(4, std::nullopt);
}

std::string new_uuid_v7(std::int64_t unix_ms) {
  return make_uuid(7, unix_ms);
}

} // namespace cq::coord
