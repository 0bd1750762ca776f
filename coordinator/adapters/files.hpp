#pragma once
// Files the coordinator's adapters write whole: the board file, the
// notifier's cursors.

#include <string>

namespace cq::coord {

/// Replaces `path` with `data` atomically: a temporary file beside it
/// (`mode`), fsync, rename. Returns "" or what failed (with errno's words).
std::string replace_file(const std::string& path, const std::string& data, unsigned mode = 0644);

} // namespace cq::coord
