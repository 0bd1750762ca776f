// The supervisor of one allocation, from its launch to the end of its
// cleanup (systemd's service.c is the model: one explicit state, and every
// timeout a timer of its own).
//
//   running --stop order, timeout, GPU stop--> stopping_term --grace over--> stopping_kill
//   any of those --leader ended--> cleaning --scans empty or deadline--> done
//
// Invariants (daemon.hpp numbers them for the whole node):
//  1. The first stop decides the reason: a stop already in progress keeps its
//     reason; a later one can only bring its kill deadline closer.
//  2. Cleanup starts only when the leader has ended and its group got SIGKILL
//     (the process host, seams.hpp contract 2), and the exit is handed to the
//     daemon only when cleanup has ended, confirmed or not (invariant 3).
//  3. Nothing is signalled once the leader is reaped except through the
//     process host's checked scans.
//  4. The node's own reason to stop a workload (timeout, oom, vram_cap,
//     fault) is recorded in control/stop-reason before the stop, and a
//     supervisor of a re-adopted allocation starts from it: the exit keeps
//     its reason across a daemon restart (found by cq-sim's outcome oracle,
//     seed 10184 with 300 jobs: a timeout ended as signal 15).
#include "node/actors/node_actors.hpp"
#include "node/policy/exit_reason.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace cq::node {

namespace {

/// After a job's timeout or a GPU stop: SIGTERM to its group, SIGKILL this much later.
constexpr std::int64_t term_kill_after_ms = 10'000;

enum class phase {
  running,       ///< the workload runs
  stopping_term, ///< SIGTERM sent; SIGKILL when the grace period ends
  stopping_kill, ///< SIGKILL sent; waiting for the leader's end
  cleaning,      ///< the leader ended; scanning until nothing of it remains
  done,          ///< the exit went to the daemon
};

std::string_view to_string(phase p) {
  switch (p) {
  case phase::running:
    return "running";
  case phase::stopping_term:
    return "stopping (TERM)";
  case phase::stopping_kill:
    return "stopping (KILL)";
  case phase::cleaning:
    return "cleaning";
  case phase::done:
    return "done";
  }
  return "?";
}

struct supervisor_state {
  supervisor_deps deps;                       ///< the host, the daemon, the watchdog
  supervised a;                               ///< the allocation
  phase ph = phase::running;                  ///< where it is
  bool oom = false;                           ///< the watchdog killed it over its cap
  bool timed_out = false;                     ///< stopped by its timeout
  bus::reason gpu_reason = bus::reason::none; ///< fault|vram_cap when the GPU side stopped it
  std::string gpu_detail;                     ///< what the GPU side said (for the kill line)
  std::optional<std::int64_t> kill_at_ms;     ///< when the grace period ends (actor clock)
  std::uint64_t kill_gen = 0;                 ///< generation of the latest kill timer
  // ---- cleanup ----
  alloc_end end;                ///< the exit, filled when the leader ended
  bool by_group = true;         ///< members of the process group count
  std::int64_t deadline_ms = 0; ///< then whatever remains makes a hold
  int empty_scans = 0;          ///< consecutive empty scans (2 = done)
  std::string remaining;        ///< what the last non-empty scan found
  std::string group_error;      ///< why the last removal of its cgroup failed
  std::uint64_t scan_gen = 0;   ///< generation of the latest scheduled scan
  int event_scans = 0;          ///< rescans asked of when_gone so far
  static inline const char* name = "cq.node.supervisor";
};

using sup_ptr = supervisor_actor::stateful_pointer<supervisor_state>;

/// Invariant 4: the node's own reason to stop the workload is durable before
/// the stop, so that a daemon restarted before the exit is reported still
/// reports it (else a timeout would end as a plain signal 15).
void record_own_stop(sup_ptr self, bus::reason why) {
  auto& st = self->state;
  auto file = st.deps.alloc_root / st.a.allocation / "control" / "stop-reason";
  if (auto w = st.deps.disk->write_atomic(file, fmt::format("{}\n", to_string(why))); !w)
    spdlog::error("allocation {}: cannot record why it is stopped: {}", st.a.allocation,
                  w.error().message);
}

std::int64_t now_of(sup_ptr self) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             self->clock().now().time_since_epoch())
      .count();
}

/// What cq-shim wrote when the workload ended (see node/shim.cpp).
struct shim_status {
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::uint64_t maxrss_bytes = 0;
};

std::optional<shim_status> read_shim_status(node_disk& disk, const std::filesystem::path& file) {
  auto text = disk.read(file, 256);
  if (!text)
    return std::nullopt;
  std::istringstream in(*text);
  std::string kind;
  std::int64_t value = 0;
  std::uint64_t maxrss_kb = 0;
  if (!(in >> kind >> value >> maxrss_kb))
    return std::nullopt;
  shim_status st;
  if (kind == "exited")
    st.exit_code = value;
  else if (kind == "signaled")
    st.signal = value;
  else
    return std::nullopt;
  st.maxrss_bytes = maxrss_kb * 1024;
  return st;
}

/// Brings the kill deadline to `at` (if sooner) with a fresh timer.
void kill_by(sup_ptr self, std::int64_t at) {
  auto& st = self->state;
  if (st.kill_at_ms && *st.kill_at_ms <= at)
    return;
  st.kill_at_ms = at;
  auto delay = std::max<std::int64_t>(0, at - now_of(self));
  self->delayed_send(self, std::chrono::milliseconds(delay), kill_atom::value, ++st.kill_gen);
}

/// SIGTERM now, SIGKILL at `kill_at` (invariant 1: only the first stop terms).
void begin_stop(sup_ptr self, std::int64_t kill_at) {
  auto& st = self->state;
  if (st.ph == phase::running) {
    st.ph = phase::stopping_term;
    st.deps.processes->terminate_group(st.a.leader.pid);
  }
  if (st.ph == phase::stopping_term)
    kill_by(self, kill_at);
}

bool stoppable(const supervisor_state& st) {
  return st.ph == phase::running || st.ph == phase::stopping_term || st.ph == phase::stopping_kill;
}

void finish_cleanup(sup_ptr self, bool unconfirmed);

/// Event-driven rescans per cleanup at most: then the timer alone (a job
/// whose processes keep forking must not make its cleanup scan back to back).
constexpr int max_event_scans = 8;

/// The next scan, with generation `gen`, as soon as every process of `killed`
/// has ended (process_host::when_gone). The scan's poll_ms timer carries the
/// same generation: whichever comes first scans, the other is stale. A host
/// that cannot watch, or a process that never ends, leaves it to the timer.
void rescan_when_gone(sup_ptr self, const std::vector<leader_id>& killed, std::uint64_t gen) {
  auto& st = self->state;
  if (killed.empty() || st.event_scans >= max_event_scans)
    return;
  ++st.event_scans;
  caf::weak_actor_ptr weak = self->ctrl();
  st.deps.processes->when_gone(killed, [weak, gen] {
    if (auto strong = weak.lock())
      caf::anon_send(caf::actor_cast<supervisor_actor>(strong), scan_atom::value, gen);
  });
}

/// One cleanup scan (daemon.hpp, invariant 3): two consecutive empty scans
/// and the cgroup's removal end it; at the deadline whatever remains makes a
/// hold. The confirming scan follows the first at once: it catches a process
/// forked while the first read /proc (at a pid it had passed), and waiting
/// longer adds nothing, since the kernel refuses to remove a cgroup while any
/// process is in it. With a cgroup the confirming scan reads only the
/// cgroup's members: a process forked by one of the allocation's lands in its
/// cgroup, so listing /proc again (every process on the machine) finds
/// nothing more. While processes remain (killed, still dying) or the kernel
/// refuses, the scans repeat every poll_ms, each a full one, and once more as
/// soon as every process a scan killed has ended (rescan_when_gone).
void cleanup_step(sup_ptr self) {
  auto& st = self->state;
  if (st.ph != phase::cleaning)
    return;
  auto now = now_of(self);
  scan_request req{st.a.allocation, st.a.leader, st.by_group, st.a.group};
  req.members_only = st.empty_scans == 1 && !st.a.group.dir.empty();
  auto scan = st.deps.processes->cleanup_scan(req);
  if (scan.count == 0 && st.empty_scans == 0 && now < st.deadline_ms) {
    st.empty_scans = 1;
    self->send(self, scan_atom::value, ++st.scan_gen);
    return;
  }
  if (scan.count == 0) {
    if (++st.empty_scans >= 2) {
      // Gone from every scan; the cgroup goes too (the kernel may need a
      // moment after the last exit: tried again until the deadline).
      auto removed = st.deps.probes->remove_group(st.a.group);
      if (removed) {
        st.a.group.dir.clear();
        finish_cleanup(self, false);
        return;
      }
      st.group_error = removed.error().message;
      if (now >= st.deadline_ms) {
        finish_cleanup(self, false);
        return;
      }
    }
  } else {
    st.empty_scans = 0;
    st.remaining = scan.found;
  }
  if (now >= st.deadline_ms) {
    finish_cleanup(self, scan.count != 0);
    return;
  }
  auto gen = ++st.scan_gen;
  // Only when every process found was a target: a suspect (never signalled)
  // ends when it ends, and the timer looks for it.
  if (scan.count != 0 && scan.killed.size() == scan.count)
    rescan_when_gone(self, scan.killed, gen);
  self->delayed_send(self, std::chrono::milliseconds(st.deps.cleanup.poll_ms), scan_atom::value,
                     gen);
}

/// The leader ended: works out the exit (cq-shim's status file, else the
/// leader's own wait status), then cleans up.
void begin_cleanup(sup_ptr self, const child_exit& e, std::uint64_t sampled_peak) {
  auto& st = self->state;
  auto now = now_of(self);
  st.ph = phase::cleaning;
  auto& end = st.end;
  end.allocation = st.a.allocation;
  end.job = st.a.job;
  end.attempt = st.a.attempt;
  end.lanes = st.a.lanes;
  auto dir = st.deps.alloc_root / st.a.allocation;
  auto peak = std::max(sampled_peak, e.maxrss_bytes);
  bool lost = false;
  if (auto status = read_shim_status(*st.deps.disk, dir / "status")) {
    end.exit_code = status->exit_code;
    end.signal = status->signal;
    peak = std::max(peak, status->maxrss_bytes);
  } else if (e.reaped && (e.exit_code || e.signal)) {
    end.exit_code = e.exit_code;
    end.signal = e.signal;
  } else {
    end.detail = "the workload ended while cq-node was not running and left no exit status";
    lost = true;
  }
  if (st.a.group.mode != memcap_mode::watchdog) {
    // The memory cgroup's own peak is what its cap counts, so it is the
    // peak: the workload's RSS (ru_maxrss, the samples) also counts shared
    // pages charged to others (a library's, another's page cache) and read
    // above the cap (68.9 MiB under --ram 64M).
    if (auto p = st.deps.probes->peak_usage(st.a.group); p && *p > 0) // 0: never charged, unread
      peak = *p;
    if (auto k = st.deps.probes->oom_kills(st.a.group); k && *k > 0)
      st.oom = true;
  }
  end.wall_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - st.a.started_ms));
  end.reason = exit_reason({st.oom, end.exit_code, st.a.yield_ordered, st.timed_out,
                            st.a.stop_requested, st.gpu_reason, lost});
  end.peak_ram_bytes = peak > 0 ? std::optional<std::uint64_t>(peak) : std::nullopt;
  // Every kill leaves its line in the job's output (after the workload's
  // own last words: its group is dead by now).
  kill_facts kf{end.reason,
                st.a.group.mode == memcap_mode::watchdog,
                st.a.ram_cap,
                end.peak_ram_bytes,
                st.a.timeout_at_ms
                    ? std::optional<std::int64_t>(*st.a.timeout_at_ms - st.a.started_ms)
                    : std::nullopt,
                end.wall_ms,
                term_kill_after_ms,
                st.a.yield_ordered,
                st.gpu_detail};
  if (auto line = kill_line(kf))
    if (auto ap = st.deps.disk->append(dir / "output.log", *line); !ap)
      spdlog::warn("allocation {}: cannot write the kill line to its output: {}", st.a.allocation,
                   ap.error().message);
  st.deadline_ms = now + static_cast<std::int64_t>(st.deps.cleanup.max_wait_ms);
  cleanup_step(self);
}

/// Ends the cleanup: a hold if processes (or the cgroup) remain, then the
/// exit goes to the daemon, which records and reports it.
void finish_cleanup(sup_ptr self, bool unconfirmed) {
  auto& st = self->state;
  auto& end = st.end;
  // A cgroup that cannot be removed still holds something of the allocation
  // that no scan saw: a hold, never a success (SPEC section 10).
  bool group_left = false;
  if (!st.a.group.dir.empty()) {
    if (auto r = st.deps.probes->remove_group(st.a.group); r)
      st.a.group.dir.clear();
    else
      group_left = true, st.group_error = r.error().message;
  }
  auto& id = st.a.allocation;
  if (unconfirmed || group_left) {
    end.hold_reason = unconfirmed ? fmt::format("cleanup of allocation {} could not confirm these "
                                                "processes gone after {} ms: {}",
                                                id, st.deps.cleanup.max_wait_ms, st.remaining)
                                  : fmt::format("cleanup of allocation {}: its cgroup could not be "
                                                "removed after {} ms ({})",
                                                id, st.deps.cleanup.max_wait_ms, st.group_error);
    end.group_dir = st.a.group.dir.string();
    if (!end.detail.empty())
      end.detail += "; ";
    end.detail += end.hold_reason;
  }
  spdlog::info("allocation {} (job {}): exited{}{}{} after {} ms", id, end.job,
               end.exit_code ? fmt::format(" with code {}", *end.exit_code) : "",
               end.signal ? fmt::format(" on signal {}", *end.signal) : "",
               end.reason == bus::reason::none ? "" : fmt::format(" ({})", to_string(end.reason)),
               end.wall_ms);
  st.ph = phase::done;
  self->send(st.deps.daemon, finished_atom::value, std::move(end));
  self->quit();
}

supervisor_actor::behavior_type supervisor_behavior(sup_ptr self, supervisor_deps deps,
                                                    supervised a) {
  auto& st = self->state;
  st.deps = std::move(deps);
  st.a = std::move(a);
  auto& s = st.a;
  // Invariant 4: the reason recorded before a restart.
  if (s.own_stop == bus::reason::timeout)
    st.timed_out = true;
  else if (s.own_stop == bus::reason::oom)
    st.oom = true;
  else if (s.own_stop == bus::reason::fault || s.own_stop == bus::reason::vram_cap)
    st.gpu_reason = s.own_stop;
  if (s.ended_while_down) {
    st.by_group = false;
    begin_cleanup(self, child_exit{}, 0);
  } else {
    auto handle = caf::actor_cast<supervisor_actor>(self);
    st.deps.processes->watch(
        s.leader.pid, [handle](child_exit e) { caf::anon_send(handle, exited_atom::value, e); });
    self->send(st.deps.watchdog, watch_atom::value,
               watch_entry{s.allocation, s.leader.pid, s.ram_cap, s.group, handle});
    if (s.timeout_at_ms) {
      // Through the watchdog, which outlives this actor: a delayed message
      // to itself would hold it until the timeout (up to a year), long after
      // a job that ended sooner (docs/adr/0070).
      auto delay = std::max<std::int64_t>(0, *s.timeout_at_ms - now_of(self));
      caf::delayed_anon_send(st.deps.watchdog, std::chrono::milliseconds(delay),
                             timeout_atom::value, s.allocation);
    }
    if (s.stop_requested) {
      // Re-adopted while stopping: the TERM was sent before the restart.
      st.ph = phase::stopping_term;
      kill_by(self, s.kill_at_ms.value_or(now_of(self)));
    }
  }
  return {
      [=](stop_atom, std::int64_t kill_at) {
        auto& st = self->state;
        if (!stoppable(st))
          return; // ended: nothing to stop
        if (!st.a.stop_requested && st.ph == phase::running)
          spdlog::info("allocation {}: stopping (SIGTERM to group {}, SIGKILL after {} ms)",
                       st.a.allocation, st.a.leader.pid,
                       std::max<std::int64_t>(0, kill_at - now_of(self)));
        st.a.stop_requested = true;
        begin_stop(self, kill_at);
      },
      [=](yield_atom) { self->state.a.yield_ordered = true; },
      [=](exited_atom, const child_exit& e) {
        auto& st = self->state;
        if (!stoppable(st))
          return;
        spdlog::debug("allocation {}: its leader ended while {}", st.a.allocation,
                      to_string(st.ph));
        st.ph = phase::cleaning;
        self->request(st.deps.watchdog, caf::infinite, unwatch_atom::value, st.a.allocation)
            .then([=](std::uint64_t peak) { begin_cleanup(self, e, peak); },
                  [=](caf::error&) { begin_cleanup(self, e, 0); });
      },
      [=](oom_atom) {
        if (!self->state.oom)
          record_own_stop(self, bus::reason::oom);
        self->state.oom = true;
      },
      [=](gpu_stop_atom, bus::reason reason, const std::string& detail) {
        auto& st = self->state;
        if (st.ph != phase::running || st.a.stop_requested || st.timed_out)
          return; // a stop already in progress keeps its own reason
        spdlog::warn("allocation {}: {}; stopping ({}: SIGTERM to group {}, SIGKILL after {} ms)",
                     st.a.allocation, detail, to_string(reason), st.a.leader.pid,
                     term_kill_after_ms);
        record_own_stop(self, reason);
        st.gpu_reason = reason;
        st.gpu_detail = detail;
        st.a.stop_requested = true; // no later timeout or stop order replaces the reason
        begin_stop(self, now_of(self) + term_kill_after_ms);
      },
      [=](timeout_atom) {
        auto& st = self->state;
        if (st.ph != phase::running || st.a.stop_requested)
          return; // a stop in progress keeps its own reason and deadline
        auto now = now_of(self);
        spdlog::warn("allocation {}: timeout reached after {} ms; stopping (SIGTERM to group {}, "
                     "SIGKILL after {} ms)",
                     st.a.allocation, now - st.a.started_ms, st.a.leader.pid, term_kill_after_ms);
        record_own_stop(self, bus::reason::timeout);
        st.timed_out = true;
        begin_stop(self, now + term_kill_after_ms);
      },
      [=](kill_atom, std::uint64_t gen) {
        auto& st = self->state;
        if (gen != st.kill_gen || st.ph != phase::stopping_term)
          return;
        spdlog::warn("allocation {}: grace period over, killing process group {}", st.a.allocation,
                     st.a.leader.pid);
        st.ph = phase::stopping_kill;
        st.deps.processes->kill_group(st.a.leader.pid);
      },
      [=](scan_atom, std::uint64_t gen) {
        if (gen == self->state.scan_gen)
          cleanup_step(self);
      },
  };
}

} // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys, supervisor_deps deps, supervised s) {
  return sys.spawn(supervisor_behavior, std::move(deps), std::move(s));
}

} // namespace cq::node
