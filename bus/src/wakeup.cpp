#include "cq/bus/wakeup.hpp"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/eventfd.h>
#endif

#include <cstdint>

namespace cq::bus {

bool cloexec_pipe(int fds[2]) {
#if defined(__linux__)
  return ::pipe2(fds, O_CLOEXEC) == 0;
#else
  if (::pipe(fds) != 0)
    return false;
  ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  return true;
#endif
}

wakeup::wakeup() {
#if defined(__linux__)
  read_fd_ = write_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
#else
  int fds[2];
  if (!cloexec_pipe(fds))
    return;
  for (int fd : fds)
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  read_fd_ = fds[0];
  write_fd_ = fds[1];
#endif
}

wakeup::~wakeup() {
  if (read_fd_ >= 0)
    ::close(read_fd_);
  if (write_fd_ >= 0 && write_fd_ != read_fd_)
    ::close(write_fd_);
}

void wakeup::notify() const noexcept {
  // An eventfd takes 8 bytes; a full pipe already wakes its reader.
  std::uint64_t one = 1;
  if (write_fd_ >= 0)
    (void)!::write(write_fd_, &one, write_fd_ == read_fd_ ? sizeof one : 1);
}

void wakeup::drain() const noexcept {
  char buf[64];
  if (read_fd_ < 0)
    return;
  while (::read(read_fd_, buf, sizeof buf) > 0 && write_fd_ != read_fd_) {
  }
}

} // namespace cq::bus
