#include "cq/bus/output_pattern.hpp"

#include <fmt/format.h>

namespace cq::bus {

std::string output_pattern_problem(std::string_view pattern) {
  if (pattern.empty())
    return "is empty";
  if (pattern.size() > output_pattern_max)
    return fmt::format("is longer than {} bytes", output_pattern_max);
  if (pattern.front() != '/')
    return "is not an absolute path";
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\0' || c == '\n')
      return "holds a NUL byte or a newline";
    if (c != '%')
      continue;
    if (i + 1 == pattern.size())
      return "ends with a lone %: write %% for a percent sign";
    char p = pattern[++i];
    if (p != 'j' && p != 'a' && p != 'x' && p != 'n' && p != '%')
      return fmt::format("has %{}: the placeholders are %j (job id), %a (array index), %x (name), "
                         "%n (node) and %% (a percent sign)",
                         p);
  }
  if (pattern.back() == '/')
    return "names a directory: give a file name, e.g. DIR/%x-%j.out";
  return {};
}

std::string expand_output(std::string_view pattern, const output_values& v) {
  std::string out;
  out.reserve(pattern.size() + 64);
  auto put = [&](std::string_view value) {
    for (char c : value)
      out += c == '/' ? '_' : c;
  };
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    switch (pattern[++i]) {
    case 'j':
      put(v.job);
      break;
    case 'a':
      put(v.array_index);
      break;
    case 'x':
      put(v.name);
      break;
    case 'n':
      put(v.node);
      break;
    case '%':
      out += '%';
      break;
    default:
      out += '%';
      out += pattern[i];
    }
  }
  return out;
}

} // namespace cq::bus
