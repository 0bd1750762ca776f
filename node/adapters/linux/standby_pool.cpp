#include "node/adapters/linux/standby_pool.hpp"

#include "node/adapters/clock.hpp"
#include "node/adapters/launcher.hpp"
#include "node/adapters/linux/cgroups.hpp"
#include "node/adapters/linux/procfs.hpp"

#include "cq/node/files.hpp"
#include "cq/node/standby_wire.hpp"

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

#include <algorithm>
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

std::size_t standby_pool::waiting() {
  std::lock_guard lock(m_);
  return ready_.size();
}

std::int64_t standby_pool::quiet_ms() {
  static const std::int64_t ms = [] {
    const char* v = std::getenv("CQ_STANDBY_QUIET_MS");
    std::int64_t n = 0;
    if (!v || !parse_num(std::string_view(v), n) || n < 0)
      return std::int64_t{100};
    // At most a standby's age: the spell also holds off the spawner's
    // replacement of stale ones.
    return std::min<std::int64_t>(n, max_age_ms);
  }();
  return ms;
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
  // Forked by the zygote, else started as the launcher starts a shim (its
  // own group, default signals, nothing else open), with its group's procs
  // file and its socket.
  bus::result<pid_t> spawned = bus::error_info{errc::internal, "no zygote"};
  if (auto forked = fork_standby(procs, pair[1]))
    spawned = *forked;
  else
    spawned = spawn_shim(
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

std::optional<pid_t> standby_pool::fork_standby(int procs, int sock) {
#if !CQ_STANDBY_SHIMS
  (void)procs, (void)sock;
  return std::nullopt;
#else
  std::lock_guard lock(zygote_m_);
  if (zygote_failures_ >= 3)
    return std::nullopt;
  auto failed = [&](const std::string& why) -> std::optional<pid_t> {
    spdlog::warn("the standby zygote cannot serve ({}); {}", why,
                 ++zygote_failures_ >= 3 ? "standbys are spawned one by one from now on"
                                         : "it is started again for the next standby");
    end_zygote();
    return std::nullopt;
  };
  if (zygote_pid_ < 0) {
    int pair[2] = {-1, -1};
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0 || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      if (null_fd >= 0)
        ::close(null_fd);
      return failed(std::strerror(errno));
    }
    constexpr int sock_in_zygote = 3;
    auto spawned = spawn_shim(shim_, {"--standby-zygote", std::to_string(sock_in_zygote)}, {},
                              null_fd, null_fd, "/", {{pair[1], sock_in_zygote}});
    ::close(null_fd);
    ::close(pair[1]);
    zygote_sock_ = pair[0];
    if (!spawned)
      return failed(spawned.error().message);
    zygote_pid_ = *spawned;
    zygote_pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, zygote_pid_, 0));
    // An answer slower than this is a zygote that no longer serves.
    timeval tv{5, 0};
    ::setsockopt(zygote_sock_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(zygote_sock_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  standby_wire::zygote_request req;
  int fds[standby_wire::zygote_fds] = {procs, sock};
  req.put_fds(fds, standby_wire::zygote_fds);
  ssize_t n;
  do
    n = ::sendmsg(zygote_sock_, &req.msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    return failed(n < 0 ? std::strerror(errno) : "short request");
  std::int32_t answer = 0;
  do
    n = ::recv(zygote_sock_, &answer, sizeof answer, MSG_WAITALL);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof answer))
    return failed(n < 0 ? std::strerror(errno) : "it ended");
  if (answer <= 0)
    return failed(fmt::format("its fork failed: {}", std::strerror(-answer)));
  zygote_failures_ = 0;
  return static_cast<pid_t>(answer);
#endif
}

/// REQUIRES: zygote_m_ held.
void standby_pool::end_zygote() {
  if (zygote_sock_ >= 0)
    ::close(zygote_sock_); // it ends at its socket's end; the kill makes sure
  zygote_sock_ = -1;
  if (zygote_pid_ > 0) {
    ::kill(zygote_pid_, SIGKILL);
    if (zygote_pidfd_ >= 0) {
      siginfo_t si{};
      while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(zygote_pidfd_), &si,
                      WEXITED) < 0 &&
             errno == EINTR) {
      }
    } else {
      while (::waitpid(zygote_pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  if (zygote_pidfd_ >= 0)
    ::close(zygote_pidfd_);
  zygote_pidfd_ = -1;
  zygote_pid_ = -1;
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
  std::lock_guard lock(zygote_m_);
  end_zygote();
}

} // namespace cq::node
