// Unit tests of escape_control() (cq/cli/escape.hpp): what human output makes
// of control characters and of bytes that are not UTF-8.
#include "cq/cli/escape.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

using cq::cli::display_width;
using cq::cli::escape_control;

namespace {

struct escape_case {
  std::string_view what;
  std::string input;
  std::string expected;
};

/// True if `s` has no C0 control byte and no DEL.
bool free_of_controls(std::string_view s) {
  for (char c : s) {
    auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f)
      return false;
  }
  return true;
}

} // namespace

TEST_CASE("escape_control makes every control byte visible and keeps the rest") {
  using namespace std::string_literals;
  const escape_case cases[] = {
      {"empty", "", ""},
      {"plain ASCII", "train-7.b_x", "train-7.b_x"},
      {"printable punctuation and blanks", "a b ~!'\"$\\", "a b ~!'\"$\\"},
      {"newline", "a\nb", "a\\nb"},
      {"tab", "a\tb", "a\\tb"},
      {"carriage return", "a\rb", "a\\rb"},
      {"escape sequence", "\x1b[31mred\x1b[0m", "\\e[31mred\\e[0m"},
      {"window title (OSC ... BEL)", "\x1b]0;pwned\x07", "\\e]0;pwned\\x07"},
      {"NUL", "a\0b"s, "a\\x00b"},
      {"other C0 controls", "\x01\x08\x0b\x0c\x1f", "\\x01\\x08\\x0b\\x0c\\x1f"},
      {"DEL", "a\x7f", "a\\x7f"},
      {"valid two-byte UTF-8", "caf\xc3\xa9", "caf\xc3\xa9"},
      {"valid three-byte UTF-8", "\xe2\x82\xac 5", "\xe2\x82\xac 5"},
      {"valid four-byte UTF-8", "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
      {"C1 control CSI as UTF-8",
       "\xc2\x9b"
       "31m",
       "\\xc2\\x9b31m"},
      {"first character after C1", "\xc2\xa0", "\xc2\xa0"},
      {"raw 8-bit CSI byte",
       "\x9b"
       "31m",
       "\\x9b31m"},
      {"stray continuation byte", "a\x80z", "a\\x80z"},
      {"truncated sequence at the end", "a\xe2\x82", "a\\xe2\\x82"},
      {"truncated sequence before ASCII", "\xe2\x82z", "\\xe2\\x82z"},
      {"overlong slash", "\xc0\xaf", "\\xc0\\xaf"},
      {"overlong three-byte", "\xe0\x80\xaf", "\\xe0\\x80\\xaf"},
      {"UTF-16 surrogate", "\xed\xa0\x80", "\\xed\\xa0\\x80"},
      {"above U+10FFFF", "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},
      {"invalid lead bytes", "\xf5\xff", "\\xf5\\xff"},
      {"bad byte then valid sequence", "\xff\xc3\xa9", "\\xff\xc3\xa9"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto out = escape_control(c.input);
    CHECK(out == c.expected);
    CHECK(free_of_controls(out));
    // Escaping is idempotent: text escaped where it was built can be escaped
    // again where it is printed.
    CHECK(escape_control(out) == out);
  }
}

TEST_CASE("every single byte escapes to printable text") {
  for (int b = 0; b < 256; ++b) {
    CAPTURE(b);
    std::string one(1, static_cast<char>(b));
    auto out = escape_control(one);
    CHECK(free_of_controls(out));
    if (b >= 0x20 && b < 0x7f)
      CHECK(out == one);
    else
      CHECK(out.front() == '\\');
  }
}

TEST_CASE("display width counts code points, not bytes") {
  CHECK(display_width("") == 0);
  CHECK(display_width("abc") == 3);
  CHECK(display_width("caf\xc3\xa9") == 4);
  CHECK(display_width("\xf0\x9f\x98\x80!") == 2);
  CHECK(display_width(escape_control("a\nb")) == 4);
}

TEST_CASE("printable ASCII is told apart from every other byte at every position") {
  using cq::cli::printable_ascii;
  CHECK(printable_ascii(""));
  CHECK(printable_ascii("a81c0d3b-5e2f-4a6b-8c9d-0e1f2a3b4c5d #1 in high ~ !"));
  // Each byte value at each position of strings of 1 to 19 bytes: the eight
  // at a time words, their boundaries and the tail.
  for (std::size_t len = 1; len < 20; ++len)
    for (std::size_t at = 0; at < len; ++at)
      for (int b = 0; b < 256; ++b) {
        std::string s(len, 'x');
        s[at] = static_cast<char>(b);
        bool want = b >= 0x20 && b < 0x7f;
        if (printable_ascii(s) != want) {
          INFO("length " << len << ", byte " << b << " at " << at);
          CHECK(printable_ascii(s) == want);
        }
      }
}
