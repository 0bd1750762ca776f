#pragma once
// Text for people: how wide a string shows on a terminal, words wrapped to
// a width (the CLI's tables and notes, every program's --help), and what
// makes a name.
#include <string>
#include <string_view>
#include <vector>

namespace cq {

/// Columns `s` takes on a terminal, counted as code points (valid UTF-8 is
/// assumed; wide CJK characters count as one).
std::size_t display_width(std::string_view s);

/// `s` cut to at most `max_bytes` at a character's start, with "..." at
/// the end when it was cut (so a cut UTF-8 text stays UTF-8).
std::string cut_utf8(std::string_view s, std::size_t max_bytes);

/// A name of a job, a node or an identity: 1 to 64 letters, digits, '.',
/// '-' or '_' (checked alike by the CLI and the coordinator).
bool valid_name(std::string_view s);
/// Whether `c` may be in a name (valid_name).
bool is_name_char(char c);

/// `text` broken at blanks into lines of at most `width` columns (a word
/// longer than that gets a line of its own). Always at least one line.
std::vector<std::string> wrap_words(const std::string& text, std::size_t width);

} // namespace cq
