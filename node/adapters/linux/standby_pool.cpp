#include "node/adapters/linux/standby_pool.hpp"

#include "node/adapters/clock.hpp"
#include "node/adapters/launcher.hpp"
#include "node/adapters/linux/cgroups.hpp"
#include "node/adapters/linux/procfs.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

// The standby's spawn needs posix_spawn's closefrom and chdir actions
// (glibc 2.34), as the launcher's does (launcher.cpp); without them no
// standby is made and every start goes the old way.
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
#define CQ_STANDBY_SHIMS 1
#endif
#endif
#if !defined(CQ_STANDBY_SHIMS)
#define CQ_STANDBY_SHIMS 0
#endif

namespace cq::node {

namespace {

/// Whether the standby has ended (its pidfd reads ready).
bool ended(const standby& s) {
  pollfd p{s.pidfd, POLLIN, 0};
  return s.pidfd < 0 || ::poll(&p, 1, 0) != 0;
}

/// The standby's descriptors for its group's procs file and its socket
/// (shim_standby.cpp's PROCS_FD and SOCKET_FD).
constexpr int procs_fd_in_child = 3;
constexpr int sock_in_child = 4;

void reap(standby& s) {
  if (s.pidfd >= 0) {
    siginfo_t si{};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(s.pidfd), &si, WEXITED) < 0 &&
           errno == EINTR) {
    }
    ::close(s.pidfd);
    s.pidfd = -1;
  }
}

} // namespace

void standby_pool::discard(standby& s) {
  if (s.pid > 0)
    ::kill(s.pid, SIGKILL);
  reap(s);
  if (s.sock >= 0)
    ::close(s.sock);
  s.sock = -1;
  if (!s.dir.empty())
    ::rmdir(s.dir.c_str()); // empty once its one process is reaped
}

std::optional<standby> standby_pool::claim(const memcap_setup& setup, const std::string& allocation,
                                           std::optional<std::uint64_t> cap,
                                           const std::string& shim) {
  // cgroup v1 only: a v2 directory cannot be renamed (CLONE_INTO_CGROUP
  // would serve there instead). Groups are named for their daemon so that a
  // later start removes what a dead one left.
  // CQ_STANDBY_SHIMS=0 in cq-node's environment turns them off (to compare).
  static const bool off = [] {
    const char* v = std::getenv("CQ_STANDBY_SHIMS");
    return v && std::string_view(v) == "0";
  }();
  if (!CQ_STANDBY_SHIMS || off || setup.mode != memcap_mode::cgroup_v1 || setup.owner.empty() ||
      shim.empty())
    return std::nullopt;
  std::unique_lock lock(m_);
  if (closed_)
    return std::nullopt;
  if (!enabled_) {
    enabled_ = true;
    setup_ = setup;
    shim_ = shim;
    return std::nullopt; // the first start makes none wait: the pool fills behind it
  }
  while (!ready_.empty()) {
    auto& front = ready_.front();
    // Not to be used: it ends here (the pool's lock is not held meanwhile).
    auto drop_front = [&] {
      auto bad = ready_.front();
      ready_.pop_front();
      lock.unlock();
      discard(bad);
      lock.lock();
    };
    if (ended(front)) { // killed (the OOM killer, a person)
      drop_front();
      continue;
    }
    if (!front.ready) {
      char c = 0;
      auto n = ::recv(front.sock, &c, 1, MSG_DONTWAIT);
      if (n < 0 && errno == EAGAIN)
        return std::nullopt;    // still joining its group: this start goes without
      if (n != 1 || c != 'R') { // it could not join its group, or is gone
        drop_front();
        continue;
      }
      front.ready = true;
    }
    auto s = front;
    ready_.pop_front();
    lock.unlock();
    auto named = setup.parent / group_name(setup, allocation);
    if (::rename(s.dir.c_str(), named.c_str()) != 0) {
      spdlog::warn("cannot rename standby group {} to {}: {}", s.dir.string(), named.string(),
                   std::strerror(errno));
      discard(s);
      return std::nullopt;
    }
    s.dir = named;
    if (cap)
      if (auto w = write_limits(setup, s.dir, *cap); !w) {
        spdlog::warn("standby group {}: {}", s.dir.string(), w.error().message);
        discard(s);
        return std::nullopt;
      }
    return s;
  }
  return std::nullopt;
}

void standby_pool::top_up() {
  for (;;) {
    {
      std::lock_guard lock(m_);
      if (!enabled_ || closed_ || ready_.size() >= size)
        return;
    }
    auto s = start_one();
    if (!s)
      return;
    std::lock_guard lock(m_);
    if (closed_) {
      discard(*s);
      return;
    }
    ready_.push_back(*s);
  }
}

bool standby_pool::enabled() {
  std::lock_guard lock(m_);
  return enabled_ && !closed_;
}

void standby_pool::refresh() {
  std::deque<standby> stale;
  {
    std::lock_guard lock(m_);
    auto now = mono_ms();
    while (!ready_.empty() && now - ready_.front().started_ms > max_age_ms) {
      stale.push_back(ready_.front());
      ready_.pop_front();
    }
  }
  for (auto& s : stale)
    discard(s);
  top_up();
}

std::optional<standby> standby_pool::start_one() {
#if !CQ_STANDBY_SHIMS
  return std::nullopt;
#else
  standby s;
  s.started_ms = mono_ms();
  // A name of its own: one left by an earlier run is not reused.
  for (int tries = 0;; ++tries) {
    s.dir = setup_.parent / fmt::format("cq-{}-standby-{}", setup_.owner, next_++);
    if (::mkdir(s.dir.c_str(), 0755) == 0)
      break;
    if (errno != EEXIST || tries > 100) {
      spdlog::warn("cannot make standby group {}: {}", s.dir.string(), std::strerror(errno));
      return std::nullopt;
    }
  }
  int procs = ::open((s.dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  int pair[2] = {-1, -1};
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (procs < 0 || null_fd < 0 || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    spdlog::warn("cannot prepare a standby cq-shim: {}", std::strerror(errno));
    for (int fd : {procs, null_fd, pair[0], pair[1]})
      if (fd >= 0)
        ::close(fd);
    ::rmdir(s.dir.c_str());
    return std::nullopt;
  }
  // Started as the launcher starts a shim (its own group, default signals,
  // nothing else open), with its group's procs file and its socket.
  auto spawned = spawn_shim(
      shim_, {"--standby", std::to_string(procs_fd_in_child), std::to_string(sock_in_child)}, {},
      null_fd, null_fd, "/", {{procs, procs_fd_in_child}, {pair[1], sock_in_child}});
  ::close(procs);
  ::close(null_fd);
  ::close(pair[1]);
  s.sock = pair[0];
  if (!spawned) {
    spdlog::warn("cannot start a standby cq-shim: {}", spawned.error().message);
    ::close(s.sock);
    ::rmdir(s.dir.c_str());
    return std::nullopt;
  }
  auto pid = *spawned;
  s.pid = pid;
  s.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  auto proc = read_process(pid); // our child, not reaped: its pid is still its own
  if (proc)
    s.start_ticks = proc->start_ticks;
  if (s.pidfd < 0 || !proc) {
    if (s.pidfd >= 0)
      ::close(s.pidfd);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    ::close(s.sock);
    ::rmdir(s.dir.c_str());
    return std::nullopt;
  }
  // A request bigger than the socket's buffer is not sent forever to a
  // standby that stopped reading.
  timeval tv{5, 0};
  ::setsockopt(s.sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return s;
#endif
}

void standby_pool::close() {
  std::deque<standby> left;
  {
    std::lock_guard lock(m_);
    closed_ = true;
    left.swap(ready_);
  }
  for (auto& s : left)
    discard(s);
}

} // namespace cq::node
