#pragma once
// For the launcher's tests: what a daemon may have that a workload must not
// inherit (cq/node/launcher.hpp's contract), set up in this process and
// undone by restore() or at the end of the scope.

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace cq::test {

/// SIGINT ignored, SIGUSR2 blocked in this thread, and a descriptor
/// without close-on-exec (`leak`, -1 if it could not be opened).
struct daemon_leftovers {
  struct sigaction old_int {};
  sigset_t old_mask{};
  int leak = -1;
  bool active = true;
  daemon_leftovers() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGINT, &ign, &old_int);
    sigset_t usr2;
    ::sigemptyset(&usr2);
    ::sigaddset(&usr2, SIGUSR2);
    ::pthread_sigmask(SIG_BLOCK, &usr2, &old_mask);
    leak = ::open("/dev/null", O_RDONLY);
  }
  void restore() {
    if (!active)
      return;
    active = false;
    ::sigaction(SIGINT, &old_int, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    if (leak >= 0)
      ::close(leak);
  }
  ~daemon_leftovers() { restore(); }
  daemon_leftovers(const daemon_leftovers&) = delete;
  daemon_leftovers& operator=(const daemon_leftovers&) = delete;
};

} // namespace cq::test
