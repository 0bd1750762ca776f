#pragma once
// The real disk, for the adapters and cq-node's startup (the actors write
// through node_disk, seams.hpp, which node/adapters/disk.cpp implements over
// these). None of them throws; failures come back as messages that name the
// file.
//
// Invariants:
//  1. A file written by write_file_atomic() is either absent, its old content,
//     or its complete new content, even across a crash or power loss.
//  2. Every descriptor opened here is close-on-exec, so no workload inherits it.

#include "cq/node/files.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

class sync_crew;

/// Writes `data` to `file` atomically and durably: writes `file.tmp`, fsyncs
/// it, renames it over `file` and fsyncs the directory. The file gets `mode`
/// (minus the umask) when it is created. Not for actors (see above).
status write_file_atomic(const std::filesystem::path& file, std::string_view data,
                         unsigned mode = 0644);

/// write_file_atomic for each of `writes`, grouped: every temporary file is
/// written before the first is synced, every rename done before the first
/// directory is synced, and each directory synced once. On a journaling file
/// system the first sync of each stage commits the others' changes with it,
/// so a group costs about two journal commits where one by one it costs two
/// per file. Each result is that file's alone, as write_file_atomic's would
/// be (a file whose directory sync failed is replaced but reported failed);
/// all that succeeded are durable when it returns. A large group is written
/// in parts of 64 (so many descriptors at most), and a file named twice is
/// written in order, in separate parts. With a `crew`, each stage's fsyncs
/// are issued side by side (ADR 0077). Not for actors.
std::vector<status> write_files_atomic(const std::vector<file_write>& writes,
                                       sync_crew* crew = nullptr);

/// Creates `file`, which must not exist, with `data`, and fsyncs it and its
/// directory: durable when it returns, in one journal commit on a
/// journaling file system (write_file_atomic's rename needs a second). A
/// crash before it returns may leave the file missing, empty or partial.
/// Not for actors.
status write_file_once(const std::filesystem::path& file, std::string_view data,
                       unsigned mode = 0644);

/// Creates `file`, which must not exist, with `data`, without a sync (a
/// failed write removes it): durable once sync_file(file) and then a sync
/// of its directory returned, which a group of records pays once per file
/// and once per directory (ADR 0068). Not for actors.
status write_file_new(const std::filesystem::path& file, std::string_view data,
                      unsigned mode = 0644);

/// fsyncs `file`'s content. Not for actors.
status sync_file(const std::filesystem::path& file);

/// Replaces `file`'s content with `data` in place (created with `mode` if
/// missing). Not fsynced, not atomic. Not for actors.
status replace_file(const std::filesystem::path& file, std::string_view data, unsigned mode = 0644);

/// Appends `text` to `file` (created with mode 0640 if missing). Not fsynced.
/// Not for actors.
status append_to_file(const std::filesystem::path& file, std::string_view text);

/// Creates `dir` and its missing parents; each directory it made is
/// appended to `created` (when given), parents first. Not for actors.
status make_dirs(const std::filesystem::path& dir,
                 std::vector<std::filesystem::path>* created = nullptr);

/// Reads at most about `max` bytes of a small file (a /proc or cgroup file, a
/// status record); nullopt when it cannot be opened.
std::optional<std::string> read_file_bounded(const std::filesystem::path& file,
                                             std::size_t max = 1 << 20);

} // namespace cq::node
