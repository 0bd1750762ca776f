// files.hpp's plain helpers (ids, parsing). This file is part of the
// actors' library, which reaches the disk through node_disk (seams.hpp); the
// real disk's operations are node/adapters/files.cpp's.
#include "cq/node/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace cq::node {

bool is_valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128)
    return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok)
      return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && blank(s.back()))
    s.remove_suffix(1);
  return s;
}

std::string_view next_line(std::string_view& s) {
  auto eol = s.find('\n');
  auto line = s.substr(0, eol);
  s = eol == std::string_view::npos ? std::string_view{} : s.substr(eol + 1);
  return line;
}

std::string_view next_token(std::string_view& s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  auto end = s.find(' ');
  auto tok = s.substr(0, end);
  s = end == std::string_view::npos ? std::string_view{} : s.substr(end);
  return tok;
}

} // namespace cq::node
