#include "node/adapters/gpu_lock.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace cq::node {

gpu_lock::gpu_lock(std::vector<std::string> paths) : paths_(std::move(paths)) {}

gpu_lock::~gpu_lock() {
  if (fd_ >= 0)
    ::close(fd_); // closing the last descriptor releases the flock
}

status gpu_lock::acquire(std::chrono::milliseconds wait) {
  if (paths_.empty() || fd_ >= 0) {
    ++holders_;
    return done{};
  }
  const auto& path = paths_.front();
  // The lock file is shared by every GPU user of the machine, hence 0666
  // (minus the umask); an existing file keeps its owner's mode.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0 && (errno == EACCES || errno == EROFS))
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY); // flock needs no write access
  if (fd < 0)
    return bus::error_info{
        errc::internal, fmt::format("cannot open the GPU lock {}: {}", path, std::strerror(errno))};
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
      break;
    int err = errno;
    if (err == EINTR)
      continue;
    if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      if (err == EWOULDBLOCK)
        return bus::error_info{errc::unavailable,
                               fmt::format("the GPU lock {} is held by another process (waited "
                                           "{} ms)",
                                           path, wait.count())};
      return bus::error_info{errc::internal,
                             fmt::format("cannot lock {}: {}", path, std::strerror(err))};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  fd_ = fd;
  holders_ = 1;
  return done{};
}

void gpu_lock::release() {
  if (holders_ == 0)
    return;
  if (--holders_ == 0 && fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

bus::string_list gpu_lock::busy_probes() const {
  bus::string_list busy;
  for (std::size_t i = 1; i < paths_.size(); ++i)
    if (paths_[i] != paths_.front() && probe_is_busy(paths_[i]))
      busy.push_back(paths_[i]);
  return busy;
}

bool probe_is_busy(const std::string& path) {
  // O_RDONLY and no O_CREAT: a probe is someone else's file; looking must not create it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return false;
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  bool busy = rc != 0 && errno == EWOULDBLOCK;
  if (rc == 0)
    ::flock(fd, LOCK_UN);
  ::close(fd);
  return busy;
}

} // namespace cq::node
