// The memory watchdog: one per daemon.
//
//  1. Peak sampling: once per heartbeat interval while allocations run, and
//     at once when one starts. An allocation in a cgroup is sampled by its
//     cgroup's current usage; for the others one process-table scan sums the
//     RSS of each one's process group. The largest sample is its peak
//     (answered to its supervisor at the end), the latest goes to the daemon
//     for the heartbeat (daemon.hpp, invariant 9).
//  2. Cap checks, every [memory] sample_ms for allocations with a RAM cap: a
//     cgroup's OOM-kill counter (v1 kills only the largest process: the rest
//     of the group is killed here, so the job ends "oom" within one period),
//     or in watchdog mode the RSS of the process tree, killed over the cap
//     (invariant 10). Either way the supervisor hears oom once.
#include "node/actors/node_actors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <map>

namespace cq::node {

namespace {

struct watched {
  watch_entry w;
  std::uint64_t peak_bytes = 0; ///< largest sample (cgroup usage, or the group's RSS sum)
  std::uint64_t last_bytes = 0; ///< latest usage (heartbeat telemetry)
  bool oom = false;             ///< the cap was hit: no more checks
};

struct watchdog_state {
  process_host* processes = nullptr;
  host_probes* probes = nullptr;
  daemon_actor daemon;                  ///< gets the usage after every sample
  std::int64_t sample_ms = 150;         ///< cap-check period
  std::int64_t heartbeat_ms = 1000;     ///< peak-sampling period
  std::map<std::string, watched> by_id; ///< by allocation id
  bool check_armed = false;             ///< a check_atom is on its way
  bool sample_armed = false;            ///< a sample_atom is on its way
  static inline const char* name = "cq.node.watchdog";
};

using wd_ptr = watchdog_actor::stateful_pointer<watchdog_state>;

bool needs_checks(const watchdog_state& st) {
  for (auto& [id, e] : st.by_id)
    if (e.w.ram_cap && !e.oom)
      return true;
  return false;
}

/// Right away is a send, not a timer of no delay: that goes through CAF's
/// clock thread, two thread wake-ups for nothing (ADR 0078).
void arm(wd_ptr self, bool right_away = false) {
  auto& st = self->state;
  if (!st.sample_armed && !st.by_id.empty()) {
    st.sample_armed = true;
    if (right_away)
      self->send(self, sample_atom::value);
    else
      self->delayed_send(self, std::chrono::milliseconds(st.heartbeat_ms), sample_atom::value);
  }
  if (!st.check_armed && needs_checks(st)) {
    st.check_armed = true;
    if (right_away)
      self->send(self, check_atom::value);
    else
      self->delayed_send(self, std::chrono::milliseconds(st.sample_ms), check_atom::value);
  }
}

void sample(wd_ptr self) {
  auto& st = self->state;
  // An allocation in a cgroup is measured by its cgroup: its usage now, and
  // at the end the kernel's own peak (supervisor.cpp). Only the others
  // (watchdog mode, or a cgroup whose usage cannot be read) need the process
  // table, whose scan reads every process's stat on the machine.
  std::vector<watched*> scanned;
  std::vector<pid_t> pgids;
  for (auto& [id, e] : st.by_id) {
    if (e.w.group.mode != memcap_mode::watchdog)
      if (auto u = st.probes->current_usage(e.w.group)) {
        e.last_bytes = *u;
        e.peak_bytes = std::max(e.peak_bytes, *u);
        continue;
      }
    scanned.push_back(&e);
    pgids.push_back(e.w.pgid);
  }
  if (!pgids.empty()) {
    auto rss = st.processes->group_rss(pgids);
    for (std::size_t i = 0; i < scanned.size(); ++i) {
      auto r = i < rss.size() ? rss[i] : 0;
      scanned[i]->last_bytes = r;
      scanned[i]->peak_bytes = std::max(scanned[i]->peak_bytes, r);
    }
  }
  std::vector<usage_sample> usage;
  usage.reserve(st.by_id.size());
  for (auto& [id, e] : st.by_id)
    usage.push_back({id, e.last_bytes});
  self->send(st.daemon, usage_atom::value, std::move(usage));
}

void oom_kill(wd_ptr self, watched& e, const std::string& why) {
  auto& st = self->state;
  spdlog::warn("allocation {}: {}; killing it", e.w.allocation, why);
  e.oom = true;
  if (e.w.group.mode == memcap_mode::watchdog)
    st.processes->kill_tree(e.w.pgid);
  else
    st.processes->kill_group(e.w.pgid);
  self->send(e.w.supervisor, oom_atom::value);
}

void check(wd_ptr self) {
  auto& st = self->state;
  std::vector<watched*> trees;
  std::vector<pid_t> pgids;
  for (auto& [id, e] : st.by_id) {
    if (!e.w.ram_cap || e.oom)
      continue;
    if (e.w.group.mode != memcap_mode::watchdog) {
      if (auto kills = st.probes->oom_kills(e.w.group); kills && *kills > 0)
        oom_kill(self, e,
                 fmt::format("memory cap of {} bytes hit (cgroup OOM kill)", *e.w.ram_cap));
      continue;
    }
    trees.push_back(&e);
    pgids.push_back(e.w.pgid);
  }
  if (trees.empty())
    return;
  auto rss = st.processes->tree_rss(pgids);
  for (std::size_t i = 0; i < trees.size() && i < rss.size(); ++i) {
    auto& e = *trees[i];
    e.last_bytes = rss[i];
    e.peak_bytes = std::max(e.peak_bytes, rss[i]);
    if (rss[i] > *e.w.ram_cap)
      oom_kill(
          self, e,
          fmt::format("RSS {} bytes is over its cap of {} bytes (watchdog)", rss[i], *e.w.ram_cap));
  }
}

watchdog_actor::behavior_type watchdog_behavior(wd_ptr self, process_host* processes,
                                                host_probes* probes, daemon_actor daemon,
                                                std::int64_t sample_ms, std::int64_t heartbeat_ms) {
  auto& st = self->state;
  st.processes = processes;
  st.probes = probes;
  st.daemon = std::move(daemon);
  st.sample_ms = std::max<std::int64_t>(1, sample_ms);
  st.heartbeat_ms = std::max<std::int64_t>(1, heartbeat_ms);
  return {
      [=](watch_atom, watch_entry& w) {
        auto id = w.allocation;
        self->state.by_id[id] = watched{std::move(w)};
        arm(self, true);
      },
      [=](unwatch_atom, const std::string& id) -> std::uint64_t {
        auto& st = self->state;
        auto it = st.by_id.find(id);
        if (it == st.by_id.end())
          return 0;
        auto peak = it->second.peak_bytes;
        st.by_id.erase(it);
        return peak;
      },
      [=](timeout_atom, const std::string& id) {
        if (auto it = self->state.by_id.find(id); it != self->state.by_id.end())
          self->send(it->second.w.supervisor, timeout_atom::value);
      },
      [=](check_atom) {
        self->state.check_armed = false;
        check(self);
        arm(self);
      },
      [=](sample_atom) {
        self->state.sample_armed = false;
        if (!self->state.by_id.empty())
          sample(self);
        arm(self);
      },
  };
}

} // namespace

watchdog_actor spawn_watchdog(caf::actor_system& sys, process_host* processes, host_probes* probes,
                              daemon_actor daemon, std::int64_t sample_ms,
                              std::int64_t heartbeat_ms) {
  return sys.spawn(watchdog_behavior, processes, probes, std::move(daemon), sample_ms,
                   heartbeat_ms);
}

} // namespace cq::node
