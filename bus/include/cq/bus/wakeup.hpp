#pragma once
// A descriptor that a poll() can wait on, made readable from any thread or a
// signal handler: an eventfd on Linux, a non-blocking pipe elsewhere (macOS
// has no eventfd). The gateway's and the node link's socket threads, cq-node's
// stop signal and the node's process watchers wake through it.

namespace cq::bus {

/// pipe() with both ends close-on-exec: pipe2(O_CLOEXEC) on Linux, pipe()
/// and fcntl elsewhere (macOS has no pipe2; a child forked in between would
/// inherit the ends, which the node's launcher closes in its children anyway).
/// False with errno set on failure.
bool cloexec_pipe(int fds[2]);

class wakeup {
public:
  /// Opens the descriptor(s), close-on-exec and non-blocking; valid() says
  /// whether that worked.
  wakeup();
  ~wakeup();
  wakeup(const wakeup&) = delete;
  wakeup& operator=(const wakeup&) = delete;

  bool valid() const { return read_fd_ >= 0; }
  /// The descriptor to poll for POLLIN.
  int fd() const { return read_fd_; }
  /// Makes fd() readable. Async-signal-safe (one write()).
  void notify() const noexcept;
  /// Consumes every notification so far (fd() is no longer readable).
  void drain() const noexcept;

private:
  int read_fd_ = -1;
  int write_fd_ = -1; ///< == read_fd_ for an eventfd
};

} // namespace cq::bus
