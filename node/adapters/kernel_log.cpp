// The kernel log follower (fault_latch.hpp): /dev/kmsg's records, or a
// regular file's lines, read without blocking.
#include "cq/node/fault_latch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace cq::node {

// ---- kernel_log_follower ------------------------------------------------------

kernel_log_follower::~kernel_log_follower() {
  if (fd_ >= 0)
    ::close(fd_);
}

status kernel_log_follower::open() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  partial_.clear();
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return bus::error_info{errc::internal,
                           fmt::format("cannot open {}: {}", path_.string(), std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return bus::error_info{errc::internal,
                           fmt::format("cannot stat {}: {}", path_.string(), std::strerror(err))};
  }
  is_device_ = S_ISCHR(st.st_mode);
  if (!is_device_ && !S_ISREG(st.st_mode)) {
    ::close(fd);
    return bus::error_info{
        errc::invalid_argument,
        fmt::format("{} is neither /dev/kmsg nor a regular file", path_.string())};
  }
  // /dev/kmsg: SEEK_END skips the records already in the ring buffer. A regular
  // file: old lines were there before this node started; only new ones count.
  auto end = ::lseek(fd, 0, SEEK_END);
  if (end < 0 && !is_device_) {
    int err = errno;
    ::close(fd);
    return bus::error_info{errc::internal,
                           fmt::format("cannot seek {}: {}", path_.string(), std::strerror(err))};
  }
  offset_ = is_device_ ? 0 : static_cast<std::uint64_t>(end);
  fd_ = fd;
  return done{};
}

std::vector<std::string> kernel_log_follower::read_lines(std::size_t max_bytes) {
  std::vector<std::string> lines;
  if (fd_ < 0)
    return lines;
  char buf[8192];
  std::size_t total = 0;
  if (is_device_) {
    // One record per read(); EAGAIN when none is left; EPIPE when records were
    // overwritten before we read them (the next read goes on with the oldest left).
    while (total < max_bytes) {
      auto n = ::read(fd_, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR || errno == EPIPE)
          continue;
        break;
      }
      if (n == 0)
        break;
      total += static_cast<std::size_t>(n);
      lines.emplace_back(kmsg_record_text(std::string_view(buf, static_cast<std::size_t>(n))));
    }
    return lines;
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < offset_) {
    offset_ = 0; // truncated or replaced in place: follow from its new start
    partial_.clear();
  }
  while (total < max_bytes) {
    auto n = ::pread(fd_, buf, sizeof buf, static_cast<off_t>(offset_));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    offset_ += static_cast<std::uint64_t>(n);
    total += static_cast<std::size_t>(n);
    std::string_view chunk(buf, static_cast<std::size_t>(n));
    for (;;) {
      auto nl = chunk.find('\n');
      if (nl == std::string_view::npos) {
        // Bounded: a "line" longer than 64 KiB is not a kernel message; drop it.
        if (partial_.size() + chunk.size() <= 64 * 1024)
          partial_.append(chunk);
        else
          partial_.clear();
        break;
      }
      partial_.append(chunk.substr(0, nl));
      lines.push_back(std::move(partial_));
      partial_.clear();
      chunk.remove_prefix(nl + 1);
    }
  }
  return lines;
}

} // namespace cq::node
