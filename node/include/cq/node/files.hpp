#pragma once
// The node's small file vocabulary: the status type its file operations
// return, the ids that may name files, and text helpers for what they read.
// Nothing here touches the disk: the actors reach it through node_disk
// (seams.hpp), the adapters through node/adapters/files.hpp.

#include "cq/bus/protocol.hpp"

#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace cq::node {

/// Success marker for operations that return no value.
using done = std::monostate;
/// `done` or an error whose message names the file.
using status = bus::result<done>;

/// One whole-file replacement of a group (node_disk::write_atomic_all).
struct file_write {
  std::filesystem::path file;
  std::string data;
  unsigned mode = 0644;
};

/// True if `id` can name a job or allocation on disk: 1 to 128 characters of
/// [A-Za-z0-9_-]. Such an id never contains a path separator and is never "."
/// or "..", so `dir / id` always stays inside `dir`.
bool is_valid_id(std::string_view id);

/// `s` without leading and trailing blanks (space, tab, CR, LF).
std::string_view trim(std::string_view s);

/// The next space-separated token of `s`, which is advanced past it; empty at the end.
std::string_view next_token(std::string_view& s);
/// The next line of `s` (without its newline), which is advanced past it.
std::string_view next_line(std::string_view& s);

/// Parses all of `tok` (trailing newlines allowed) as a number.
template <class T>
bool parse_num(std::string_view tok, T& out) {
  while (!tok.empty() && tok.back() == '\n')
    tok.remove_suffix(1);
  auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), out);
  return ec == std::errc{} && p == tok.data() + tok.size() && !tok.empty();
}

} // namespace cq::node
