#pragma once
// The store's two files as the operating system sees them: their identity
// (check_file) and the write-ahead log's space, written ahead of the commits
// that fill it (docs/adr/0069).

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace cq::coord {

struct file_id {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

/// A file's identity, without reading its times: where the kernel keeps
/// multigrain timestamps (Linux 6.13 and later), a file whose times were read
/// gets a fine-grained time at its next write, which dirties its inode, and
/// on ext4 without a journal each fdatasync of the write-ahead log then also
/// writes the inode (a third of a commit's sync, docs/adr/0067).
file_id identify(const std::string& path);

/// The write-ahead log's size SQLite reaches before its automatic checkpoint
/// (1,000 pages of 4 KiB, each frame with its 24-byte header), rounded up.
inline constexpr std::uint64_t wal_reserve_bytes = std::uint64_t{4} << 20;

/// Extends the write-ahead log at `path` with zeros up to `bytes` and syncs
/// it, so that the commits that fill it overwrite blocks the file already
/// has: a commit that grows the file makes its fdatasync also write the
/// inode and the block bitmap, up to three more round trips to the disk.
/// SQLite reads frames only up to the first invalid one, and zeros are
/// never a valid frame. Returns false where the file is missing or cannot
/// be written (zeros written before a failure are as harmless): the log
/// then grows as before.
bool reserve_wal(const std::string& path, std::uint64_t bytes = wal_reserve_bytes);

} // namespace cq::coord
