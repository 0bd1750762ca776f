#include "cq/cli/escape.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <iterator>

namespace cq::cli {

namespace {

/// Length of the valid UTF-8 sequence at the start of `s` (1..4), or 0 if the
/// bytes there are not one (RFC 3629: no overlong forms, no surrogates, at
/// most U+10FFFF). REQUIRES: `s` is not empty and s[0] >= 0x80.
std::size_t utf8_sequence_length(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xc0) == 0x80; };
  unsigned char c = b(0);
  if (c >= 0xc2 && c <= 0xdf)
    return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2))
      return 0;
    if (c == 0xe0 && b(1) < 0xa0) // overlong
      return 0;
    if (c == 0xed && b(1) >= 0xa0) // UTF-16 surrogates
      return 0;
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3))
      return 0;
    if (c == 0xf0 && b(1) < 0x90) // overlong
      return 0;
    if (c == 0xf4 && b(1) >= 0x90) // above U+10FFFF
      return 0;
    return 4;
  }
  return 0; // continuation byte, 0xc0/0xc1 (overlong) or 0xf5..0xff
}

void append_hex(std::string& out, unsigned char c) {
  fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
}

} // namespace

bool printable_ascii(std::string_view s) {
  // Eight bytes at a time: a byte below 0x20 borrows when 0x20 is taken from
  // it; one of 0x7f or above has its high bit set, or sets it once 1 is
  // added. (A borrow or carry into the next byte comes only from a byte that
  // is outside the range already.)
  constexpr std::uint64_t ones = 0x0101010101010101ull;
  constexpr std::uint64_t high = 0x8080808080808080ull;
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t x;
    std::memcpy(&x, s.data() + i, 8);
    if ((((x - ones * 0x20) & ~x) | x | (x + ones)) & high)
      return false;
  }
  for (; i < s.size(); ++i) {
    auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f)
      return false;
  }
  return true;
}

std::string escape_control(std::string_view s) {
  if (printable_ascii(s))
    return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case 0x1b:
        out += "\\e";
        break;
      default:
        append_hex(out, c);
      }
      ++i;
      continue;
    }
    auto n = utf8_sequence_length(s.substr(i));
    // U+0080..U+009F are C2 80..C2 9F.
    bool c1 = n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0;
    if (n == 0 || c1) {
      // Escape one byte only: the next one may start a valid sequence.
      append_hex(out, c);
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

} // namespace cq::cli
