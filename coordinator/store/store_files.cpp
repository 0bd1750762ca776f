#include "store/store_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>

namespace cq::coord {

file_id identify(const std::string& path) {
#ifdef STATX_INO
  struct statx stx {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_INO, &stx) != 0)
    return {};
  return {true, makedev(stx.stx_dev_major, stx.stx_dev_minor), stx.stx_ino};
#else
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return {};
  return {true, st.st_dev, st.st_ino};
#endif
}

bool reserve_wal(const std::string& path, std::uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  auto at = ok ? static_cast<std::uint64_t>(st.st_size) : bytes;
  // Zeros written, not fallocate(2): ext4 marks fallocated blocks unwritten,
  // and the first write to each converts it, which dirties the extent tree
  // and brings the inode's write back into that commit's sync.
  static const std::array<char, 64 * 1024> zeros{};
  while (ok && at < bytes) {
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), bytes - at));
    auto w = ::pwrite(fd, zeros.data(), n, static_cast<off_t>(at));
    ok = w > 0;
    at += ok ? static_cast<std::uint64_t>(w) : 0;
  }
  if (ok && static_cast<std::uint64_t>(st.st_size) < bytes)
    ok = ::fdatasync(fd) == 0;
  ::close(fd);
  return ok;
}

} // namespace cq::coord
