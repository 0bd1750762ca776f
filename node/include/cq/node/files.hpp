#pragma once
// Small file-system helpers of the node daemon. None of them throws; failures
// come back as messages that name the file.
//
// The writers (write_file_atomic, append_to_file, make_dirs) touch the real
// disk and are defined in node/adapters/files.cpp, in cq_node_lib: the
// actors' library (cq_node_actors) does not link them, so actor code cannot
// call them (it writes through node_disk, seams.hpp; cq-sim's disk is
// simulated). The adapters and cq-node's startup use them.
//
// Invariants:
//  1. A file written by write_file_atomic() is either absent, its old content,
//     or its complete new content, even across a crash or power loss.
//  2. Every descriptor opened here is close-on-exec, so no workload inherits it.

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

/// True if `id` can name a job or allocation on disk: 1 to 128 characters of
/// [A-Za-z0-9_-]. Such an id never contains a path separator and is never "."
/// or "..", so `dir / id` always stays inside `dir`.
bool is_valid_id(std::string_view id);

/// Writes `data` to `file` atomically and durably: writes `file.tmp`, fsyncs
/// it, renames it over `file` and fsyncs the directory. The file gets `mode`
/// (minus the umask) when it is created. Not for actors (see above).
status write_file_atomic(const std::filesystem::path& file, std::string_view data,
                         unsigned mode = 0644);

/// Appends `text` to `file` (created with mode 0640 if missing). Not fsynced.
/// Not for actors.
status append_to_file(const std::filesystem::path& file, std::string_view text);

/// Creates `dir` and its missing parents. Not for actors.
status make_dirs(const std::filesystem::path& dir);

/// Reads at most about `max` bytes of a small file (a /proc or cgroup file, a
/// status record); nullopt when it cannot be opened. Not for actors: the
/// adapters' and load_gpu_config's (node/src/files.cpp says why it is defined
/// in the actors' library).
std::optional<std::string> read_file_bounded(const std::filesystem::path& file,
                                             std::size_t max = 1 << 20);

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
