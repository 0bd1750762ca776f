#pragma once
// Text for people: how wide a string shows on a terminal, and words
// wrapped to a width (the CLI's tables and notes, every program's --help).
#include <string>
#include <string_view>
#include <vector>

namespace cq {

/// Columns `s` takes on a terminal, counted as code points (valid UTF-8 is
/// assumed; wide CJK characters count as one).
std::size_t display_width(std::string_view s);

/// `text` broken at blanks into lines of at most `width` columns (a word
/// longer than that gets a line of its own). Always at least one line.
std::vector<std::string> wrap_words(const std::string& text, std::size_t width);

} // namespace cq
