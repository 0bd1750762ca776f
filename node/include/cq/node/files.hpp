#pragma once
// Small file-system helpers of the node daemon. None of them throws; failures
// come back as messages that name the file.
//
// Invariants:
//  1. A file written by write_file_atomic() is either absent, its old content,
//     or its complete new content, even across a crash or power loss.
//  2. Every descriptor opened here is close-on-exec, so no workload inherits it.

#include "cq/bus/protocol.hpp"

#include <filesystem>
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

/// Writes `data` to `file` atomically and durably: writes `file.tmp`, fsyncs it,
/// renames it over `file` and fsyncs the directory. The file gets `mode`
/// (minus the umask) when it is created.
status write_file_atomic(const std::filesystem::path& file, std::string_view data,
                         unsigned mode = 0644);

/// Appends `text` to `file` (created with mode 0640 if missing). Not fsynced.
status append_to_file(const std::filesystem::path& file, std::string_view text);

/// Creates `dir` and its missing parents.
status make_dirs(const std::filesystem::path& dir);

} // namespace cq::node
