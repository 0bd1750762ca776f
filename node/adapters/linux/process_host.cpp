// The process host (seams.hpp) of the `linux` platform: workloads started through
// launcher.cpp (cq-shim as their parent), one pidfd per leader, and a
// watcher thread that polls them (ADR 0002's pidfds, kept here by ADR 0020).
//
// Why a thread of its own: a leader's end must be noticed without SIGCHLD
// (delivered to an arbitrary thread of a threaded program; the reason
// Boost's wait_for is unreliable, docs/dependencies.md). The thread polls
// every pidfd and an eventfd that wakes it when the set changes; it does
// bounded work per wake-up and only hands each end to its handler. Standby
// shims (standby_pool.hpp) are started by a second thread, the spawner: a
// start takes a few milliseconds of fork, exec and cgroup work, and a
// leader's end must not wait behind it (docs/adr/0060).
//
// Invariant (seams.hpp contract 2): the mutex `m_` is held while a group
// signal is sent and while a leader is killed and reaped, so no group signal
// can reach a process group whose leader was already reaped (its id could be
// reused); after the reap the leader is forgotten and group signals to it
// do nothing.
#include "node/adapters/adapters.hpp"

#include "cq/node/launcher.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/meminfo.hpp"
#include "cq/node/procscan.hpp"
#include "node/adapters/launcher.hpp"
#include "node/adapters/linux/cgroups.hpp"
#include "node/adapters/linux/procfs.hpp"
#include "node/adapters/linux/standby_pool.hpp"
#include "node/adapters/posix/primitives.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

namespace cq::node {

namespace {

/// Leaders whose end is handled per wake-up of the watcher.
constexpr std::size_t max_ends_per_wake = 64;
/// Processes one when_gone() watches at most (a pidfd each), and all of them
/// together; more, and the caller's timer serves.
constexpr std::size_t max_gone_watch = 64;
constexpr std::size_t max_gone_fds = 1024;

class linux_process_host final : public process_host {
public:
  linux_process_host() {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { loop(); });
    spawner_ = std::thread([this] { spawn_loop(); });
  }

  ~linux_process_host() override { close(); }

  std::optional<mem_group> claim_standby(const memcap_setup& setup, const std::string& allocation,
                                         std::optional<std::uint64_t> cap,
                                         const std::string& shim) override {
    auto s = pool_.claim(setup, allocation, cap, shim);
    want_standbys(); // the spawner starts the next one
    {
      std::lock_guard lock(m_);
      if (!s)
        return std::nullopt;
      if (!closed_) {
        claimed_[s->dir.string()] = *s;
        return mem_group{setup.mode, s->dir};
      }
    }
    // Closing meanwhile: this start goes the old way, in the group as named.
    auto dir = s->dir;
    s->dir.clear();
    standby_pool::discard(*s);
    return mem_group{setup.mode, dir};
  }

  std::optional<leader_id> standby_leader(const mem_group& group) override {
    std::lock_guard lock(m_);
    auto c = claimed_.find(group.dir.string());
    if (c == claimed_.end())
      return std::nullopt;
    return leader_id{c->second.pid, c->second.start_ticks};
  }

  void unclaim(const mem_group& group) override {
    if (auto c = take_claimed(group); c)
      standby_pool::discard(*c);
  }

  bus::result<leader_id> launch(const launch_request& in, const mem_group& group) override {
    if (auto c = take_claimed(group); c)
      return hand_over(in, *c);
    auto req = in;
    int procs_fd = -1;
    if (!group.dir.empty()) {
      procs_fd = open_procs_file(group);
      if (procs_fd < 0)
        return bus::error_info{errc::internal,
                               fmt::format("cannot open {}/cgroup.procs: {}", group.dir.string(),
                                           std::strerror(errno))};
    }
    req.cgroup_procs_fd = procs_fd;
    // cgroup v2: the shim is born in the group (ADR 0050); the procs file
    // stays for a kernel that cannot. Only into an empty group: until its
    // exec the child shares this daemon's memory, and a group-wide OOM kill
    // (memory.oom.group) of another member then would reach the daemon too.
    int dir_fd = -1;
    if (group.mode == memcap_mode::cgroup_v2 && !group.dir.empty())
      if (auto members = group_pids(group); members && members->empty())
        dir_fd = open_group_dir(group);
    req.cgroup_dir_fd = dir_fd;
    auto child = node::launch(req);
    if (dir_fd >= 0)
      ::close(dir_fd);
    if (procs_fd >= 0)
      ::close(procs_fd);
    if (!child)
      return child.error();
    leader_id id{child->pid, 0};
    // The leader is our unreaped child: its pid cannot be reused yet.
    if (auto p = read_process(child->pid))
      id.start_ticks = p->start_ticks;
    std::lock_guard lock(m_);
    leaders_[child->pid] = leader{child->pidfd, true, {}};
    return id;
  }

  bool adopt(const leader_id& l) override {
    auto proc = read_process(l.pid);
    bool same = proc && l.start_ticks != 0 && proc->start_ticks == l.start_ticks &&
                proc->state != 'Z' && proc->state != 'X';
    if (!same)
      return false;
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, l.pid, 0));
    if (fd < 0)
      return false;
    std::lock_guard lock(m_);
    leaders_[l.pid] = leader{fd, false, {}};
    return true;
  }

  std::optional<leader_id> find_leader(const std::string& marker) override {
    return find_marked_leader_settled([&](bool* changing) {
      return find_marked_leader(scan_processes(), node::environ_has, marker, changing);
    });
  }

  std::string boot_id() override { return platform::boot_id(); }

  void watch(pid_t pid, std::function<void(child_exit)> on_exit) override {
    std::lock_guard lock(m_);
    auto it = leaders_.find(pid);
    if (it == leaders_.end() || closed_)
      return;
    it->second.on_exit = std::move(on_exit);
    wake_locked();
  }

  void terminate_group(pid_t pgid) override { signal_group(pgid, SIGTERM); }
  void kill_group(pid_t pgid) override { signal_group(pgid, SIGKILL); }

  void kill_tree(pid_t pgid) override {
    // The tree first: once the group dies, its escaped children are
    // reparented and no longer reachable through it.
    auto procs = scan_processes();
    std::vector<const proc_entry*> members;
    tree_rss_bytes(procs, pgid, &members);
    signal_group(pgid, SIGKILL);
    for (auto* p : members)
      if (p->pgrp != pgid)
        signal_same_process(p->pid, p->start_ticks, SIGKILL);
  }

  std::vector<std::uint64_t> group_rss(const std::vector<pid_t>& pgids) override {
    std::vector<node::group_rss> groups;
    for (auto g : pgids)
      groups.push_back({g, 0});
    sample_group_rss(groups);
    std::vector<std::uint64_t> out;
    for (auto& g : groups)
      out.push_back(g.rss_bytes);
    return out;
  }

  std::vector<std::uint64_t> tree_rss(const std::vector<pid_t>& pgids) override {
    auto procs = scan_processes();
    std::vector<std::uint64_t> out;
    for (auto g : pgids)
      out.push_back(tree_rss_bytes(procs, g));
    return out;
  }

  /// Every process of the allocation's cgroup, and the rest by scan_for_cleanup.
  status write_terminal(const std::filesystem::path& fifo, std::string_view frames) override {
    return write_terminal_fifo(fifo, frames);
  }

  scan_result cleanup_scan(const scan_request& req) override {
    // Every process in the allocation's cgroup is the allocation's, whatever
    // its session, process group or environment (SPEC section 10).
    std::vector<pid_t> members;
    auto pids = group_pids(req.group);
    if (pids)
      members = std::move(*pids);
    std::vector<proc_entry> procs;
    if (req.members_only && pids && !req.group.dir.empty()) {
      // The confirming scan: the cgroup's members only (every descendant of
      // one lands there), without listing /proc again.
      for (auto pid : members)
        if (auto p = read_process(pid))
          procs.push_back(*p);
    } else {
      // scan_for_cleanup looks only at members and at processes no older
      // than the leader: the others are not read at all.
      procs = scan_processes_since(req.leader.start_ticks, members);
    }
    std::vector<leader_id> killed;
    auto out = scan_for_cleanup(req, procs, std::move(members), node::environ_has,
                                [&killed](const proc_entry& p) {
                                  // Listed even when the kill finds it gone
                                  // (when_gone answers for it at once).
                                  killed.push_back({p.pid, p.start_ticks});
                                  return signal_same_process(p.pid, p.start_ticks, SIGKILL);
                                });
    out.killed = std::move(killed);
    return out;
  }

  bool when_gone(const std::vector<leader_id>& procs, std::function<void()> on_gone) override {
    {
      // A process that never ends (uninterruptible sleep) keeps its pidfd
      // here until close(): the watches are bounded in all.
      std::lock_guard lock(m_);
      if (procs.size() > max_gone_watch || gone_fds_ + procs.size() > max_gone_fds)
        return false; // the caller's timer serves
    }
    gone_watch w;
    w.on_gone = std::move(on_gone);
    for (auto& p : procs) {
      int fd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
      if (fd < 0) {
        if (errno == ESRCH)
          continue; // gone (reaped) already
        for (int f : w.pidfds)
          ::close(f);
        return false;
      }
      // Opened after the pid could have been reused: another process if its
      // start time differs (the scan's has ended). Unreadable, the pidfd
      // decides (an ended one, zombie or not, reads ready at once).
      if (auto now = read_process(p.pid); now && now->start_ticks != p.start_ticks) {
        ::close(fd);
        continue;
      }
      w.pidfds.push_back(fd);
    }
    if (w.pidfds.empty()) {
      w.on_gone();
      return true;
    }
    std::lock_guard lock(m_);
    if (closed_) {
      for (int f : w.pidfds)
        ::close(f);
      return false;
    }
    gone_fds_ += w.pidfds.size();
    gone_.push_back(std::move(w));
    wake_locked();
    return true;
  }

  void close() override {
    {
      std::lock_guard lock(m_);
      if (closed_)
        return;
      closed_ = true;
      wake_locked();
    }
    {
      std::lock_guard lock(spawn_m_);
      spawn_closed_ = true;
    }
    spawn_cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
    if (spawner_.joinable())
      spawner_.join(); // after a standby start in flight (one fork or spawn)
    // Standbys not claimed end here; a claimed one is left to the start in
    // flight that claimed it (it ends with this process if none uses it).
    pool_.close();
    std::lock_guard lock(m_);
    for (auto& [pid, l] : leaders_)
      ::close(l.pidfd);
    leaders_.clear();
    for (auto& w : gone_)
      for (int fd : w.pidfds)
        ::close(fd);
    gone_.clear(); // their handlers are never called: the daemon is stopping
    gone_fds_ = 0;
    if (wake_fd_ >= 0)
      ::close(wake_fd_);
    wake_fd_ = -1;
  }

private:
  std::optional<standby> take_claimed(const mem_group& group) {
    std::lock_guard lock(m_);
    auto it = claimed_.find(group.dir.string());
    if (it == claimed_.end())
      return std::nullopt;
    auto s = it->second;
    claimed_.erase(it);
    return s;
  }

  /// launch() through a claimed standby: it runs cq-shim with the job's
  /// arguments in place (same pid, group and cgroup; ADR 0058).
  bus::result<leader_id> hand_over(const launch_request& in, standby s) {
    auto req = in;
    req.cgroup_procs_fd = -1; // it is in the group already
    req.standby_sock = s.sock;
    auto handed = node::launch(req);
    ::close(s.sock);
    s.sock = -1;
    if (!handed) {
      // Whatever it may have started (a shim that came too late) goes with
      // it: its process group, and every process in its group. The caller
      // removes the group once it is empty.
      ::killpg(s.pid, SIGKILL);
      if (auto pids = group_pids(mem_group{memcap_mode::cgroup_v1, s.dir}))
        for (auto pid : *pids)
          ::kill(pid, SIGKILL);
      s.dir.clear();
      standby_pool::discard(s);
      return handed.error();
    }
    std::lock_guard lock(m_);
    leaders_[s.pid] = leader{s.pidfd, true, {}};
    return leader_id{s.pid, s.start_ticks};
  }

  /// when_gone(): the processes not yet ended (one pidfd each, owned) and
  /// what to call once none is left.
  struct gone_watch {
    std::vector<int> pidfds;
    std::function<void()> on_gone;
  };

  struct leader {
    int pidfd = -1;                          ///< owned; readable once the leader ended
    bool ours = false;                       ///< our child (reaped here), not re-adopted
    std::function<void(child_exit)> on_exit; ///< set by watch(); polled only then
  };

  /// Asks the spawner to top the pool up (after a claim).
  void want_standbys() {
    {
      std::lock_guard lock(spawn_m_);
      spawn_wanted_ = true;
    }
    spawn_cv_.notify_one();
  }

  /// The spawner: tops the pool up after claims, and every 30 s replaces
  /// standbys gone stale. Nothing else waits for it. A claim that took the
  /// last standby has the pool topped up at once (the next start would go
  /// without); while one still waits, the top-up waits until no claim came
  /// for standby_pool::quiet_ms (ADR 0076). A standby's start holds every
  /// cgroup directory operation for a grace period, and a job that ends
  /// meanwhile (`cq run -- true`) had its exit report wait for its group's
  /// removal behind it: 6-22 ms.
  void spawn_loop() {
    std::unique_lock lock(spawn_m_);
    auto quiet = std::chrono::milliseconds(standby_pool::quiet_ms());
    while (!spawn_closed_) {
      bool woken = spawn_cv_.wait_for(lock, std::chrono::seconds(30),
                                      [this] { return spawn_wanted_ || spawn_closed_; });
      while (woken && spawn_wanted_ && !spawn_closed_) {
        spawn_wanted_ = false;
        lock.unlock();
        bool left = pool_.waiting() > 0;
        lock.lock();
        if (!left ||
            !spawn_cv_.wait_for(lock, quiet, [this] { return spawn_wanted_ || spawn_closed_; }))
          break; // none left, or quiet: top up now
      }
      if (spawn_closed_)
        return;
      spawn_wanted_ = false;
      lock.unlock();
      if (woken)
        pool_.top_up(); // none while the pool is off
      else if (pool_.enabled())
        pool_.refresh();
      lock.lock();
    }
  }

  /// REQUIRES: m_ held (close() closes the eventfd only under it).
  void wake_locked() {
    std::uint64_t one = 1;
    if (wake_fd_ >= 0)
      (void)!::write(wake_fd_, &one, sizeof one);
  }

  void signal_group(pid_t pgid, int sig) {
    std::lock_guard lock(m_);
    if (pgid > 0 && leaders_.count(pgid))
      ::killpg(pgid, sig);
  }

  /// Kills the group, then reaps the leader (our child) under the mutex.
  child_exit end_of(pid_t pid, const leader& l) {
    child_exit e;
    if (!l.ours)
      return e; // not our child: only cq-shim's status file knows how it ended
    ::killpg(pid, SIGKILL);
    siginfo_t si{};
    struct rusage ru {};
    long rc;
    do {
      // The raw syscall, for its rusage argument (glibc's waitid has none).
      rc = ::syscall(SYS_waitid, P_PIDFD, l.pidfd, &si, WEXITED, &ru);
    } while (rc < 0 && errno == EINTR);
    if (rc != 0) {
      spdlog::error("cannot reap pid {}: {}", pid, std::strerror(errno));
      return e;
    }
    e.reaped = true;
    if (si.si_code == CLD_EXITED)
      e.exit_code = si.si_status;
    else if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
      e.signal = si.si_status;
    else
      e.reaped = false;
    if (ru.ru_maxrss > 0)
      e.maxrss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024; // kB on Linux
    return e;
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<pid_t> pids;
    for (;;) {
      fds.clear();
      pids.clear();
      {
        std::lock_guard lock(m_);
        if (closed_)
          return;
        fds.push_back({wake_fd_, POLLIN, 0});
        for (auto& [pid, l] : leaders_)
          if (l.on_exit) {
            fds.push_back({l.pidfd, POLLIN, 0});
            pids.push_back(pid);
          }
        for (auto& w : gone_)
          for (int fd : w.pidfds)
            fds.push_back({fd, POLLIN, 0});
      }
      int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        spdlog::critical("the process watcher cannot poll: {}", std::strerror(errno));
        return;
      }
      if (fds[0].revents & POLLIN) {
        std::uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
      }
      std::size_t handled = 0;
      for (std::size_t i = 0; i < pids.size() && handled < max_ends_per_wake; ++i) {
        if (!(fds[i + 1].revents & (POLLIN | POLLERR | POLLHUP)))
          continue;
        std::function<void(child_exit)> handler;
        child_exit e;
        {
          std::lock_guard lock(m_);
          auto it = leaders_.find(pids[i]);
          if (it == leaders_.end() || closed_)
            continue;
          e = end_of(pids[i], it->second);
          ::close(it->second.pidfd);
          handler = std::move(it->second.on_exit);
          leaders_.erase(it);
        }
        ++handled;
        handler(e);
      }
      // when_gone(): a pidfd that reads ready is a process that ended; a
      // watch with none left is answered (its pidfds follow the leaders' in
      // `fds`, in the order of gone_, which only this thread shortens).
      std::vector<std::function<void()>> answered;
      {
        std::lock_guard lock(m_);
        if (closed_)
          return;
        std::size_t at = 1 + pids.size();
        for (auto w = gone_.begin(); w != gone_.end() && at < fds.size();) {
          auto& ids = w->pidfds;
          std::vector<int> left;
          for (std::size_t k = 0; k < ids.size(); ++k, ++at) {
            bool polled = at < fds.size() && fds[at].fd == ids[k];
            if (polled && (fds[at].revents & (POLLIN | POLLERR | POLLHUP))) {
              ::close(ids[k]);
              --gone_fds_;
            } else
              left.push_back(ids[k]);
          }
          ids = std::move(left);
          if (ids.empty()) {
            answered.push_back(std::move(w->on_gone));
            w = gone_.erase(w);
          } else {
            ++w;
          }
        }
      }
      for (auto& f : answered)
        f();
    }
  }

  standby_pool pool_;                      ///< thread-safe on its own
  std::mutex m_;                           ///< guards everything below
  std::map<std::string, standby> claimed_; ///< by group dir, until launch() takes it
  std::map<pid_t, leader> leaders_;        ///< by pid (== process group id)
  std::list<gone_watch> gone_;             ///< when_gone() watches, oldest first
  std::size_t gone_fds_ = 0;               ///< pidfds held by gone_
  bool closed_ = false;                    ///< close() was called
  int wake_fd_ = -1;                       ///< wakes the watcher when the set changes
  std::thread thread_;                     ///< the watcher
  std::mutex spawn_m_;                     ///< guards the spawner's two flags
  std::condition_variable spawn_cv_;
  bool spawn_wanted_ = false; ///< a claim took a standby
  bool spawn_closed_ = false; ///< close() was called
  std::thread spawner_;       ///< starts standbys (spawn_loop)
};

} // namespace

std::unique_ptr<process_host> make_linux_process_host() {
  return std::make_unique<linux_process_host>();
}

} // namespace cq::node
