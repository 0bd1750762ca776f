// The process host (seams.hpp) of the `posix` platform: what Mac nodes run,
// and what Linux runs with cq-node --platform posix so that CI tests that
// path. No pidfds, no cgroups, no /proc here: children are started by
// launcher.cpp without a pidfd, their ends learnt by SIGCHLD and waitid, and
// the process table read through posix/primitives.hpp.
//
// SIGCHLD: main() blocks it before any thread starts (block_child_signal),
// so only the watcher thread, which unblocks it, ever runs its handler; the
// handler only wakes the watcher (bus::wakeup, async-signal-safe). The
// watcher also wakes on a timer: adopted leaders (not our children, so no
// SIGCHLD) are polled by start time, and a missed signal is never a lost end.
//
// Invariants:
//  1. (seams.hpp contract 2) A child's end is seen with waitid(WNOWAIT), its
//     group gets SIGKILL while the leader is still an unreaped zombie (its
//     group id cannot be reused yet), and only then is it reaped; all of
//     that under `m_`, which every group signal also takes.
//  2. Without pidfds, seams.hpp contract 3 is weaker: a single process is
//     signalled after its start time was checked, and a pid reused between
//     the check and the kill() would be hit. The window is one system call;
//     docs/install.md says so. An adopted leader's group is signalled only
//     after the same check of the leader.
#include "node/adapters/adapters.hpp"
#include "node/adapters/posix/primitives.hpp"

#include "cq/bus/wakeup.hpp"
#include "cq/node/launcher.hpp"
#include "node/adapters/launcher.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace cq::node {

namespace {

/// Leaders whose end is handled per wake-up of the watcher.
constexpr std::size_t max_ends_per_wake = 64;
/// How often adopted leaders are looked at, and the longest sleep otherwise.
constexpr int adopted_poll_ms = 100;
constexpr int idle_poll_ms = 1000;

/// The wake-ups the SIGCHLD handler notifies: one slot per live
/// posix_process_host. A slot's wakeup is made the first time the slot is
/// claimed and never destroyed, so a handler that loaded it just before its
/// host closed still writes to the descriptor it meant (a later host that
/// claims the slot drains what it finds).
constexpr std::size_t watcher_slots = 8;
std::array<std::atomic<bool>, watcher_slots> slot_taken{};
std::array<std::atomic<const bus::wakeup*>, watcher_slots> slot_wakeup{};

extern "C" void on_sigchld(int) {
  int saved = errno;
  for (auto& w : slot_wakeup)
    if (auto* p = w.load())
      p->notify();
  errno = saved;
}

/// Claims a free slot; nullptr when all are taken (that host then polls).
const bus::wakeup* claim_slot(std::size_t& index) {
  for (std::size_t i = 0; i < watcher_slots; ++i) {
    bool free = false;
    if (!slot_taken[i].compare_exchange_strong(free, true))
      continue;
    index = i;
    auto* w = slot_wakeup[i].load();
    if (!w) {
      w = new bus::wakeup; // never freed (see above)
      slot_wakeup[i].store(w);
    }
    w->drain();
    return w;
  }
  return nullptr;
}

/// Sends `sig` to `p.pid` if it is still the process that started at
/// `p.start_ticks` (invariant 2).
bool signal_checked(const proc_entry& p, int sig) {
  auto now = platform::process(p.pid);
  if (!now || now->start_ticks != p.start_ticks || now->state == 'Z')
    return false;
  return ::kill(p.pid, sig) == 0;
}

std::uint64_t page_bytes() {
  static const auto page = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
  return page;
}

class posix_process_host final : public process_host {
public:
  posix_process_host() {
    wake_ = claim_slot(slot_);
    if (!wake_) {
      spdlog::warn("too many process watchers for SIGCHLD: this one polls");
      own_wake_ = std::make_unique<bus::wakeup>();
      wake_ = own_wake_.get();
    }
    struct sigaction sa {};
    sa.sa_handler = on_sigchld;
    ::sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, nullptr);
    thread_ = std::thread([this] { loop(); });
  }

  ~posix_process_host() override { close(); }

  bus::result<leader_id> launch(const launch_request& in, const mem_group& group) override {
    if (!group.dir.empty())
      return bus::error_info{errc::internal, "the posix platform has no memory cgroups"};
    auto req = in;
    req.pidfd = false;
    auto child = node::launch(req);
    if (!child)
      return child.error();
    leader_id id{child->pid, 0};
    // The leader is our unreaped child: its pid cannot be reused yet.
    if (auto p = platform::process(child->pid))
      id.start_ticks = p->start_ticks;
    std::lock_guard lock(m_);
    leaders_[child->pid] = leader{true, id.start_ticks, {}};
    return id;
  }

  bool adopt(const leader_id& l) override {
    auto proc = platform::process(l.pid);
    bool same = proc && l.start_ticks != 0 && proc->start_ticks == l.start_ticks &&
                proc->state != 'Z' && proc->state != 'X';
    if (!same)
      return false;
    std::lock_guard lock(m_);
    leaders_[l.pid] = leader{false, l.start_ticks, {}};
    return true;
  }

  std::optional<leader_id> find_leader(const std::string& marker) override {
    return find_marked_leader_settled([&](bool* changing) {
      return find_marked_leader(platform::processes(), platform::environ_has, marker, changing);
    });
  }

  std::string boot_id() override { return platform::boot_id(); }

  void watch(pid_t pid, std::function<void(child_exit)> on_exit) override {
    std::lock_guard lock(m_);
    auto it = leaders_.find(pid);
    if (it == leaders_.end() || closed_)
      return;
    it->second.on_exit = std::move(on_exit);
    wake_->notify();
  }

  void terminate_group(pid_t pgid) override { signal_group(pgid, SIGTERM); }
  void kill_group(pid_t pgid) override { signal_group(pgid, SIGKILL); }

  void kill_tree(pid_t pgid) override {
    // The tree first: once the group dies, its escaped children are
    // reparented and no longer reachable through it.
    auto procs = platform::processes();
    std::vector<const proc_entry*> members;
    tree_rss_bytes(procs, pgid, &members);
    signal_group(pgid, SIGKILL);
    for (auto* p : members)
      if (p->pgrp != pgid)
        signal_checked(*p, SIGKILL);
  }

  std::vector<std::uint64_t> group_rss(const std::vector<pid_t>& pgids) override {
    std::vector<std::uint64_t> out(pgids.size(), 0);
    for (auto& p : platform::processes())
      for (std::size_t i = 0; i < pgids.size(); ++i)
        if (p.pgrp == pgids[i])
          out[i] += p.rss_pages * page_bytes();
    return out;
  }

  std::vector<std::uint64_t> tree_rss(const std::vector<pid_t>& pgids) override {
    auto procs = platform::processes();
    std::vector<std::uint64_t> out;
    for (auto g : pgids)
      out.push_back(tree_rss_bytes(procs, g));
    return out;
  }

  status write_terminal(const std::filesystem::path& fifo, std::string_view frames) override {
    return write_terminal_fifo(fifo, frames);
  }

  scan_result cleanup_scan(const scan_request& req) override {
    return scan_for_cleanup(req, platform::processes(), {}, platform::environ_has,
                            [](const proc_entry& p) { return signal_checked(p, SIGKILL); });
  }

  void close() override {
    {
      std::lock_guard lock(m_);
      if (closed_)
        return;
      closed_ = true;
      wake_->notify();
    }
    if (thread_.joinable())
      thread_.join();
    if (!own_wake_)
      slot_taken[slot_].store(false);
    std::lock_guard lock(m_);
    leaders_.clear();
  }

private:
  struct leader {
    bool ours = false;                       ///< our child (reaped here), not re-adopted
    std::uint64_t start = 0;                 ///< its start time, for the checks
    std::function<void(child_exit)> on_exit; ///< set by watch(); looked at only then
  };

  /// REQUIRES: m_ held. Whether `pid` (a leader) is still the same, live process.
  bool same_leader_locked(pid_t pid, const leader& l) {
    if (l.ours)
      return true; // an unreaped child: its pid stays ours until we reap it
    auto p = platform::process(pid);
    return p && p->start_ticks == l.start && p->state != 'Z' && p->state != 'X';
  }

  void signal_group(pid_t pgid, int sig) {
    std::lock_guard lock(m_);
    auto it = pgid > 0 ? leaders_.find(pgid) : leaders_.end();
    if (it != leaders_.end() && same_leader_locked(pgid, it->second))
      ::killpg(pgid, sig);
  }

  enum class state { running, ended, gone };

  /// REQUIRES: m_ held. Whether the leader `pid` runs, has ended (our child:
  /// a zombie not yet reaped), or is gone (reaped by someone else: its group
  /// id may already be reused, so nothing may be signalled).
  state state_locked(pid_t pid, const leader& l) {
    if (!l.ours)
      return same_leader_locked(pid, l) ? state::running : state::gone;
    siginfo_t si{};
    si.si_pid = 0;
    int rc;
    do {
      rc = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
      return errno == ECHILD ? state::gone : state::running;
    return si.si_pid == pid ? state::ended : state::running;
  }

  /// REQUIRES: m_ held. Our child that ended: kills its group while the
  /// leader is still a zombie, then reaps it. Anything else: no signal.
  child_exit end_of(pid_t pid, const leader& l, state st) {
    child_exit e;
    if (!l.ours || st != state::ended)
      return e; // not our child: only cq-shim's status file knows how it ended
    ::killpg(pid, SIGKILL);
    int status = 0;
    struct rusage ru {};
    pid_t rc;
    do {
      rc = ::wait4(pid, &status, 0, &ru);
    } while (rc < 0 && errno == EINTR);
    if (rc != pid) {
      spdlog::error("cannot reap pid {}: {}", pid, std::strerror(errno));
      return e;
    }
    e.reaped = true;
    if (WIFEXITED(status))
      e.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      e.signal = WTERMSIG(status);
    else
      e.reaped = false;
    if (ru.ru_maxrss > 0) {
#if defined(__APPLE__)
      e.maxrss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss); // bytes on macOS
#else
      e.maxrss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024; // kB on Linux
#endif
    }
    return e;
  }

  void loop() {
    // The one thread that takes SIGCHLD (main blocked it for the others).
    sigset_t chld;
    ::sigemptyset(&chld);
    ::sigaddset(&chld, SIGCHLD);
    ::pthread_sigmask(SIG_UNBLOCK, &chld, nullptr);
    for (;;) {
      bool adopted = false;
      {
        std::lock_guard lock(m_);
        if (closed_)
          break;
        for (auto& [pid, l] : leaders_)
          adopted = adopted || (l.on_exit && !l.ours);
      }
      pollfd p{wake_->fd(), POLLIN, 0};
      int n = ::poll(&p, 1, adopted || own_wake_ ? adopted_poll_ms : idle_poll_ms);
      if (n < 0 && errno != EINTR) {
        spdlog::critical("the process watcher cannot poll: {}", std::strerror(errno));
        break;
      }
      wake_->drain();
      for (std::size_t handled = 0; handled < max_ends_per_wake; ++handled) {
        std::function<void(child_exit)> handler;
        child_exit e;
        {
          std::lock_guard lock(m_);
          if (closed_)
            break;
          auto it = leaders_.begin();
          auto st = state::running;
          for (; it != leaders_.end(); ++it)
            if (it->second.on_exit && (st = state_locked(it->first, it->second)) != state::running)
              break;
          if (it == leaders_.end())
            break;
          e = end_of(it->first, it->second, st);
          handler = std::move(it->second.on_exit);
          leaders_.erase(it);
        }
        handler(e);
        if (handled + 1 == max_ends_per_wake)
          wake_->notify(); // more may have ended: look again at once
      }
    }
    ::pthread_sigmask(SIG_BLOCK, &chld, nullptr);
  }

  std::mutex m_;                          ///< guards leaders_ and closed_
  std::map<pid_t, leader> leaders_;       ///< by pid (== process group id)
  bool closed_ = false;                   ///< close() was called
  const bus::wakeup* wake_ = nullptr;     ///< SIGCHLD, watch() and close() wake the watcher
  std::size_t slot_ = 0;                  ///< which slot wake_ is (unless own_wake_)
  std::unique_ptr<bus::wakeup> own_wake_; ///< no slot was free: polled on the timer
  std::thread thread_;                    ///< the watcher
};

} // namespace

std::unique_ptr<process_host> make_posix_process_host() {
  return std::make_unique<posix_process_host>();
}

void block_child_signal() {
  sigset_t chld;
  ::sigemptyset(&chld);
  ::sigaddset(&chld, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &chld, nullptr);
}

} // namespace cq::node
