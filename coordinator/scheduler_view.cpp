// What a placement pass reads of the scheduler's state (scheduler_state.hpp):
// each node's view, kept as its statuses arrive, the live allocations and
// ghosts as of the pass, and whether a node's status is news that may let a
// job start (ADR 0039, 0063). The invariants are scheduler_actor.cpp's.
#include "scheduler_state.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace cq::coord::sched {

namespace {

/// The element `n` of `out` to overwrite (appended when `out` is that short):
/// rebuilding a vector in place keeps its elements' buffers.
template <class T>
T& slot(std::vector<T>& out, std::size_t n) {
  if (n == out.size())
    out.emplace_back();
  return out[n];
}

/// What a pass sees of node `n` (invariant 6).
policy::node_view node_view_of(const scheduler_state& st, const node_status& n) {
  auto v = policy::capacity_of(n.info);
  v.name = n.name;
  v.approved = n.approved;
  if (auto g = st.grants.find(n.name); g != st.grants.end())
    v.grant_job = g->second;
  v.last_heartbeat_ms = n.last_heartbeat_ms;
  v.gpu_fault = n.info.fault.has_value() || n.gpu_blocked;
  if (st.ctx->cfg.defects.ignore_fault_latch)
    v.gpu_fault = false;
  v.gpu_probe_busy = !n.info.busy_probes.empty();
  v.down = n.down;
  v.fenced = n.fenced;
  return v;
}

/// Whether node view `next` differs from `kept` in more than what a node's
/// telemetry moves at every heartbeat: its time, the memory available and
/// each lane's VRAM used outside cq (more_room weighs those).
bool differs_beyond_figures(const policy::node_view& kept, policy::node_view next) {
  next.last_heartbeat_ms = kept.last_heartbeat_ms;
  next.mem_available_bytes = kept.mem_available_bytes;
  if (next.lanes.size() == kept.lanes.size())
    for (std::size_t i = 0; i < next.lanes.size(); ++i)
      next.lanes[i].vram_outside_bytes = kept.lanes[i].vram_outside_bytes;
  return !(kept == next);
}

} // namespace

/// The latest lease boundary of `a` at `now` (0 before the first one).
std::int64_t last_boundary(const alloc_entry& a, std::int64_t now) {
  if (a.started_ms == 0 || a.lease_ms <= 0 || now < a.started_ms + a.lease_ms)
    return 0;
  return a.started_ms + (now - a.started_ms) / a.lease_ms * a.lease_ms;
}

/// Invariant 3: at a boundary no pass has considered yet, within the window.
bool at_boundary(const scheduler_state& st, const alloc_entry& a, std::int64_t now) {
  auto b = last_boundary(a, now);
  if (b == 0 || now - b > st.ctx->cfg.lease_window_ms)
    return false;
  auto c = st.considered.find(a.job);
  return c == st.considered.end() || c->second < b;
}

/// Invariant 6 after node `name` changed: its view replaced in place, or
/// every view rebuilt when the node is new (positions follow `nodes`).
/// Returns whether the view changed in more than its figures
/// (differs_beyond_figures).
bool refresh_node_view(scheduler_state& st, const std::string& name) {
  auto it = st.nodes.find(name);
  if (it == st.nodes.end())
    return false;
  auto& views = st.view.nodes;
  if (views.size() == st.nodes.size()) {
    auto at = it->second.view_at;
    if (at < views.size() && views[at].name == name) {
      auto next = node_view_of(st, it->second);
      bool changed = differs_beyond_figures(views[at], next);
      views[at] = std::move(next);
      return changed;
    }
  }
  views.clear();
  for (auto& [n, status] : st.nodes) {
    status.view_at = views.size();
    views.push_back(node_view_of(st, status));
  }
  return true;
}

/// The pass's view: the nodes as kept (invariant 6), the live allocations
/// and ghosts as of `now`. Each allocation's own fields (its job, node,
/// resources and lanes) are copied only when `allocs` or `ghosts` changed
/// since the last view: iterating the same maps unchanged visits them in the
/// same order. What the nodes' heartbeats, the asks and the time move is
/// refreshed every time.
const policy::cluster_view& cluster_of(scheduler_state& st, std::int64_t now) {
  auto& c = st.view;
  c.heartbeat_fresh_ms = st.ctx->cfg.heartbeat_fresh_ms;
  bool copy = std::exchange(st.allocs_changed, false) ||
              c.allocations.size() != st.allocs.size() + st.ghosts.size();
  auto& defects = st.ctx->cfg.defects;
  // Every field of each view is assigned: the views are overwritten in place.
  std::size_t n = 0;
  for (auto& [job, a] : st.allocs) {
    auto& v = slot(c.allocations, n++);
    if (copy) {
      static_cast<job_resources&>(v) = a.resources;
      v.ram_floor_bytes = a.floor_bytes;
      v.job = job;
      v.node = a.node;
      v.priority = static_cast<policy::level>(a.level);
      v.checkpoint = a.checkpoint;
      v.stopping = a.stopping;
      v.lanes = a.lanes;
      v.est_end_ms = a.est_end_ms;
      if (defects.forget_lanes)
        v.lanes.clear();
      if (defects.forget_ram)
        v.ram_bytes = v.ram_floor_bytes = 0;
    }
    auto& node = slot(st.view_nodes, n - 1);
    if (copy || !node) {
      auto i = st.node_named.find(a.node);
      node = i == st.node_named.end() ? nullptr : i->second;
    }
    // Pending growth = cap - what the allocation uses now (0 use when unknown:
    // then it may still grow to its whole cap).
    v.ram_used_bytes = 0;
    v.node_at = static_cast<std::size_t>(-1);
    if (node) {
      v.node_at = node->view_at;
      for (auto& u : node->usage)
        if (u.allocation == a.allocation)
          v.ram_used_bytes = std::min(u.ram_bytes, v.ram_bytes);
    }
    // The time test first: most allocations are not at a boundary, and the
    // ask's lookup hashes a 36-character id.
    v.at_lease_boundary = at_boundary(st, a, now) && !st.asked.count(job);
  }
  for (auto& [id, g] : st.ghosts) {
    auto& a = g.first;
    auto& v = slot(c.allocations, n++);
    if (copy) {
      static_cast<job_resources&>(v) = a.resources;
      v.ram_floor_bytes = a.floor_bytes;
      v.job = a.job;
      v.node = a.node;
      v.priority = static_cast<policy::level>(a.level);
      v.checkpoint = false;
      v.stopping = true; // its stop is in flight: it ends, and nothing preempts beside it
      v.lanes = a.lanes;
      v.est_end_ms = a.est_end_ms;
    }
    v.ram_used_bytes = 0;
    v.node_at = static_cast<std::size_t>(-1);
    v.at_lease_boundary = false;
  }
  c.allocations.resize(n);
  return c;
}

/// Whether status `next` of a known node can change what a pass decides
/// beyond its view (refresh_node_view says that): the allocations it lists
/// use of, or a heartbeat that makes a node fresh again. (A heartbeat that
/// only keeps a fresh node fresh cannot: every pass since the last one saw
/// it fresh.) A new node always can. What the figures of its use do,
/// more_room says.
bool changes_placement(const scheduler_state& st, const node_status& kept, const node_status& next,
                       std::int64_t now) {
  if (kept.name.empty() || kept.usage.size() != next.usage.size())
    return true;
  for (std::size_t i = 0; i < kept.usage.size(); ++i)
    if (kept.usage[i].allocation != next.usage[i].allocation)
      return true;
  return !policy::heartbeat_fresh(kept.last_heartbeat_ms, st.ctx->cfg.heartbeat_fresh_ms, now);
}

/// Whether status `next` of a known node leaves more room for a start than
/// `kept`, its previous one, in the figures its telemetry moves (ADR 0063):
/// the memory place() counts as free (the available less each allocation's
/// growth to come, cap minus use), or a lane's VRAM left by processes
/// outside cq. Every status with more room runs a pass, so one with no more
/// than the status before it has no more than the last pass saw.
bool more_room(const scheduler_state& st, const node_status& kept, const node_status& next) {
  auto i64 = [](std::uint64_t v) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX / 4));
  };
  auto delta = i64(next.info.mem_available_bytes) - i64(kept.info.mem_available_bytes);
  for (auto& [job, a] : st.allocs) {
    if (a.node != next.name)
      continue;
    auto cap = a.resources.ram_bytes;
    auto use = [&](const node_status& s) {
      for (auto& u : s.usage)
        if (u.allocation == a.allocation)
          return i64(std::min(u.ram_bytes, cap));
      return std::int64_t{0};
    };
    delta += use(next) - use(kept);
  }
  if (delta > 0)
    return true;
  auto& was = kept.info.lanes;
  auto& now = next.info.lanes;
  if (was.size() != now.size())
    return true;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (now[i].vram_outside_bytes < was[i].vram_outside_bytes)
      return true;
  return false;
}

} // namespace cq::coord::sched
