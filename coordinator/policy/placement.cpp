#include "placement.hpp"
#include "never_fits.hpp"
#include "placement_internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <limits>
#include <span>
#include <unordered_map>

namespace cq::policy {

namespace detail {

std::string gib_available(i64 bytes) {
  return gib(bytes > 0 ? static_cast<u64>(bytes) : 0);
}

bool admits(i64 available, u64 floor, const job_view& j) {
  if (floor == 0 && j.ram_start_min_bytes == 0)
    return true;
  const __int128 avail = available;
  return avail - j.ram_bytes >= floor && avail >= j.ram_start_min_bytes;
}

/// Rule 5's prediction of available RAM at a later time: what is available
/// now plus the caps of the allocations that have ended by then (an ending
/// allocation gives back what it uses and the growth reserved for it), never
/// more than the node's memory. It assumes processes outside cq use no more
/// than they do now and that allocations still running give nothing back.
i64 predicted(i64 raw, const node_view& n) {
  return std::min<i64>(
      raw, static_cast<i64>(std::min<u64>(n.mem_total_bytes, std::numeric_limits<i64>::max())));
}

/// Resources a job needs, checked against a node_state.
struct fit_result {
  bool ok = false;
  std::vector<std::size_t> lanes; ///< lane indexes chosen
  u64 floor = 0;                  ///< combined floor
};

bool fresh(const node_view& n, const cluster_view& c, std::int64_t now) {
  return heartbeat_fresh(n.last_heartbeat_ms, c.heartbeat_fresh_ms, now);
}

bool lane_fits(const node_view& n, std::size_t i, const job_view& j) {
  auto& l = n.lanes[i];
  if (l.held)
    return false;
  if (j.vram_bytes > sub(l.vram_total_bytes, l.vram_outside_bytes))
    return false;
  return true;
}

/// A disabled node takes only the job its diagnostic grant names.
bool takes(const node_view& n, const job_view& j) {
  return maps(n, j) && (n.enabled || n.grant_job == j.id);
}

fit_result fits(const node_state& s, const job_view& j) {
  fit_result r;
  auto& n = *s.view;
  if (!s.eligible || !takes(n, j))
    return r;
  if (j.gpus > 0 && (n.gpu_fault || n.gpu_probe_busy))
    return r;
  if (j.ram_bytes > s.free_ram)
    return r;
  if (j.cpus > s.free_cpus)
    return r;
  if (j.gpus > 0) {
    if (n.vram_cap_bytes && j.vram_bytes > *n.vram_cap_bytes)
      return r;
    for (std::size_t i = 0; i < n.lanes.size() && r.lanes.size() < j.gpus; ++i)
      if (!s.lane_busy[i] && lane_fits(n, i, j))
        r.lanes.push_back(i);
    if (r.lanes.size() < j.gpus)
      return r;
  }
  r.floor = std::max(s.floor, j.ram_floor_bytes);
  if (!admits(s.available, r.floor, j))
    return r;
  r.ok = true;
  return r;
}

void take(node_state& s, const job_view& j, const fit_result& f) {
  s.free_ram = sub(s.free_ram, j.ram_bytes);
  if (s.free_cpus != unlimited)
    s.free_cpus = sub(s.free_cpus, j.cpus);
  s.available -= static_cast<i64>(j.ram_bytes);
  s.floor = std::max(s.floor, j.ram_floor_bytes);
  for (auto i : f.lanes) {
    // Invariant: a lane serves one allocation at a time.
    assert(!s.lane_busy[i]);
    if (s.lane_busy[i])
      std::abort();
    s.lane_busy[i] = true;
    --s.free_lanes;
  }
  ++s.reservations;
}

/// Rule 6: lower is better.
std::pair<u64, u64> score(const node_state& s, const job_view& j) {
  auto lanes_left = s.free_lanes - (j.gpus > 0 ? j.gpus : 0);
  return {lanes_left, sub(s.free_ram, j.ram_bytes)};
}

/// The indexes on `n` of the lanes named `names`, into `out` (cleared first:
/// a pass reuses its buffers).
void lane_indexes(const node_view& n, const std::vector<std::string>& names,
                  std::vector<std::size_t>& out) {
  out.clear();
  // A node's lane names share their length and most of their bytes ("gpu0",
  // "gpu1"): their last bytes tell most apart before a full comparison.
  auto same = [](const std::string& a, const std::string& b) {
    return a.size() == b.size() && (a.empty() || a.back() == b.back()) && a == b;
  };
  for (auto& name : names)
    for (std::size_t l = 0; l < n.lanes.size(); ++l)
      if (same(n.lanes[l].name, name))
        out.push_back(l);
}

std::vector<std::size_t> lane_indexes(const node_view& n, const std::vector<std::string>& names) {
  std::vector<std::size_t> out;
  lane_indexes(n, names, out);
  return out;
}

void prepare(const cluster_view& c, std::int64_t now, prepared& p) {
  p.nodes.resize(c.nodes.size());
  p.by_name.clear();
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    auto& n = c.nodes[i];
    auto& s = p.nodes[i];
    s.view = &n;
    p.by_name.emplace_back(n.name, i);
    s.eligible = n.approved && (n.enabled || !n.grant_job.empty()) && !n.held && !n.down &&
                 n.fenced == 0 && fresh(n, c, now);
    s.free_ram = sub(n.mem_total_bytes, n.ram_reserve_bytes);
    s.free_cpus = n.cpus == 0 ? unlimited : n.cpus;
    s.available =
        static_cast<i64>(std::min<u64>(n.mem_available_bytes, std::numeric_limits<i64>::max()));
    s.floor = n.ram_floor_bytes;
    s.lane_busy.assign(n.lanes.size(), false);
    s.reservations = 0;
    s.free_lanes = n.lanes.size();
    for (std::size_t l = 0; l < n.lanes.size(); ++l)
      if (n.lanes[l].held)
        s.lane_busy[l] = true, --s.free_lanes;
  }
  // Names are unique (a cluster's nodes are keyed by name): the first of
  // equal names would win, as a map's emplace did.
  auto by_first = [](auto& x, auto& y) { return x.first < y.first; };
  if (!std::is_sorted(p.by_name.begin(), p.by_name.end(), by_first)) // the scheduler's are
    std::stable_sort(p.by_name.begin(), p.by_name.end(), by_first);
  p.alloc_node.resize(c.allocations.size());
  p.alloc_lanes.resize(c.allocations.size());
  for (std::size_t k = 0; k < c.allocations.size(); ++k) {
    auto& a = c.allocations[k];
    p.alloc_lanes[k].clear();
    auto at = p.alloc_node[k] = a.node_at < c.nodes.size() && c.nodes[a.node_at].name == a.node
                                    ? std::optional<std::size_t>(a.node_at)
                                    : p.find(a.node);
    if (!at)
      continue;
    auto& s = p.nodes[*at];
    lane_indexes(*s.view, a.lanes, p.alloc_lanes[k]);
    s.free_ram = sub(s.free_ram, a.ram_bytes);
    if (s.free_cpus != unlimited)
      s.free_cpus = sub(s.free_cpus, a.cpus);
    s.available -= static_cast<i64>(sub(a.ram_bytes, a.ram_used_bytes));
    s.floor = std::max(s.floor, a.ram_floor_bytes);
    ++s.reservations;
    for (auto l : p.alloc_lanes[k])
      if (!s.lane_busy[l])
        s.lane_busy[l] = true, --s.free_lanes;
  }
}

prepared prepare(const cluster_view& c, std::int64_t now) {
  prepared p;
  prepare(c, now, p);
  return p;
}

void release_of(const cluster_view& c, const prepared& p, std::size_t k, std::int64_t now,
                release& out) {
  auto& a = c.allocations[k];
  out.at_ms = std::max(a.est_end_ms, now), out.ram = a.ram_bytes, out.cpus = a.cpus;
  out.lanes.assign(p.alloc_lanes[k].begin(), p.alloc_lanes[k].end());
  out.floor = a.ram_floor_bytes;
  out.guess = a.est_default;
}

/// True if `j` could run on the node were nothing else running there (and
/// MemAvailable its whole memory).
bool fits_empty(const node_state& s, const job_view& j) {
  auto& n = *s.view;
  if (!s.eligible || !takes(n, j) || (j.gpus > 0 && (n.gpu_fault || n.gpu_probe_busy)))
    return false;
  if (never_fits(n, j) != never::none)
    return false;
  if (j.gpus == 0)
    return true;
  std::uint64_t usable = 0;
  for (std::size_t i = 0; i < n.lanes.size(); ++i)
    usable += lane_fits(n, i, j) ? 1 : 0;
  return usable >= j.gpus;
}

bool leaves_room(const shadow& sh, const node_view& n, const job_view& reserved,
                 const job_view& j) {
  if (j.ram_bytes > sh.extra_ram || j.cpus > sh.extra_cpus)
    return false;
  auto floor = std::max({sh.floor, reserved.ram_floor_bytes, j.ram_floor_bytes});
  return admits(predicted(sh.available - static_cast<i64>(j.ram_bytes), n), floor, reserved);
}

/// Record that `j`, backfilled within leaves_room(), runs past the reserved time.
void take_extra(shadow& sh, const job_view& j, const std::vector<std::size_t>& lanes) {
  sh.extra_ram -= j.ram_bytes;
  if (sh.extra_cpus != unlimited)
    sh.extra_cpus -= j.cpus;
  sh.available -= static_cast<i64>(j.ram_bytes);
  sh.floor = std::max(sh.floor, j.ram_floor_bytes);
  for (auto l : lanes)
    sh.extra_lane[l] = false;
}

std::optional<shadow> earliest_fit(const node_state& s, const job_view& j,
                                   std::span<const release> releases, std::int64_t now) {
  auto& n = *s.view;
  // Cheap refusals first: a job that never fits here must not cost a copy and
  // a sort. With everything here ended, available RAM is at its highest and
  // the combined floor at its lowest.
  if (!fits_empty(s, j))
    return std::nullopt;
  i64 all_caps = 0;
  for (auto& r : releases)
    all_caps += static_cast<i64>(r.ram);
  if (!admits(predicted(s.available + all_caps, n), std::max(n.ram_floor_bytes, j.ram_floor_bytes),
              j))
    return std::nullopt;
  // The releases by end, as an order of their indexes: sorting indexes makes
  // the same comparisons, so the same order, as sorting copies did.
  thread_local std::vector<std::size_t> order;
  order.resize(releases.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](auto a, auto b) { return releases[a].at_ms < releases[b].at_ms; });
  auto rel = [&](std::size_t k) -> const release& { return releases[order[k]]; };
  // floor_after[k]: the node's floor and the floors of rel(k..) (still running
  // once rel(0..k-1) have ended).
  std::vector<u64> floor_after(order.size() + 1, n.ram_floor_bytes);
  for (std::size_t k = order.size(); k-- > 0;)
    floor_after[k] = std::max(floor_after[k + 1], rel(k).floor);
  u64 ram = s.free_ram, cpus = s.free_cpus;
  i64 avail = s.available;
  auto busy = s.lane_busy;
  bool guessed = false; // a release counted so far ends by a default estimate
  auto check = [&](std::int64_t at, i64 available, u64 floor) -> std::optional<shadow> {
    if (j.ram_bytes > ram || j.cpus > cpus)
      return std::nullopt;
    if (!admits(available, std::max(floor, j.ram_floor_bytes), j))
      return std::nullopt;
    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < n.lanes.size() && chosen.size() < j.gpus; ++i)
      if (!busy[i] && lane_fits(n, i, j))
        chosen.push_back(i);
    if (chosen.size() < j.gpus)
      return std::nullopt;
    shadow sh;
    sh.at_ms = at;
    sh.extra_ram = ram - j.ram_bytes;
    sh.extra_cpus = cpus == unlimited ? unlimited : cpus - j.cpus;
    sh.extra_lane.assign(n.lanes.size(), false);
    for (std::size_t i = 0; i < n.lanes.size(); ++i)
      sh.extra_lane[i] = !busy[i];
    for (auto i : chosen)
      sh.extra_lane[i] = false;
    sh.available = avail;
    sh.floor = floor;
    sh.guessed = guessed;
    return sh;
  };
  // Now, nothing has ended: exactly fits()'s test, so a job refused by rule 4
  // now is not reserved now.
  if (auto sh = check(now, s.available, s.floor))
    return sh;
  for (std::size_t k = 0; k < order.size(); ++k) {
    auto& r = rel(k);
    ram += r.ram;
    if (cpus != unlimited)
      cpus += r.cpus;
    avail += static_cast<i64>(r.ram);
    for (auto i : r.lanes)
      busy[i] = false;
    guessed = guessed || r.guess;
    // Allocations ending at the same moment free their resources together.
    if (k + 1 < order.size() && rel(k + 1).at_ms == r.at_ms)
      continue;
    if (auto sh = check(std::max(r.at_ms, now), predicted(avail, n), floor_after[k + 1]))
      return sh;
  }
  return std::nullopt;
}

std::unordered_map<std::string, u64> group_counts(const cluster_view& c) {
  std::unordered_map<std::string, u64> n;
  for (auto& a : c.allocations)
    if (!a.group.empty())
      ++n[a.group];
  return n;
}

} // namespace detail

using namespace detail;

plan place(const cluster_view& c, const std::vector<job_view>& queue, std::int64_t now) {
  std::vector<const job_view*> jobs;
  jobs.reserve(queue.size());
  for (auto& j : queue)
    jobs.push_back(&j);
  return place(c, queue_ref(jobs), now);
}

plan place(const cluster_view& c, queue_ref queue, std::int64_t now) {
  plan out;
  // One per thread: place() does not call itself, and each call resets it.
  thread_local prepared p;
  prepare(c, now, p);
  auto& nodes = p.nodes;
  // Per node, what the reservation search may release: live allocations and
  // starts planned in this pass, the first releases_n[i] of releases[i]. Kept
  // per thread, as `p`: a pass overwrites them in place, and allocates
  // nothing once the cluster has stopped growing.
  thread_local std::vector<std::vector<release>> releases;
  thread_local std::vector<std::size_t> releases_n;
  releases.resize(nodes.size());
  releases_n.assign(nodes.size(), 0);
  auto next_release = [&](std::size_t i) -> release& {
    if (releases_n[i] == releases[i].size())
      releases[i].emplace_back();
    return releases[i][releases_n[i]++];
  };
  // Per node, its live allocations (rule 7 looks at one node's at a time).
  thread_local std::vector<std::vector<const allocation_view*>> on_node;
  on_node.resize(nodes.size());
  for (auto& v : on_node)
    v.clear();
  for (std::size_t k = 0; k < c.allocations.size(); ++k)
    if (auto at = p.alloc_node[k]) {
      release_of(c, p, k, now, next_release(*at));
      on_node[*at].push_back(&c.allocations[k]);
    }

  // Upper bounds over eligible nodes (free RAM, lanes and CPUs), to skip
  // hopeless jobs without a scan (a queue waiting for CPUs on full nodes
  // costs one comparison a job, not a fit test per node), and the eligible
  // nodes with a free lane, in order: the only ones a GPU job can fit on (a
  // queue waiting for lanes costs a scan of those alone).
  u64 max_ram = 0, max_lanes = 0, max_cpus = 0;
  std::vector<std::size_t> with_lanes;
  auto refresh_bounds = [&] {
    max_ram = 0, max_lanes = 0, max_cpus = 0;
    with_lanes.clear();
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (auto& s = nodes[i]; s.eligible) {
        max_ram = std::max(max_ram, s.free_ram), max_lanes = std::max<u64>(max_lanes, s.free_lanes);
        max_cpus = std::max(max_cpus, s.free_cpus); // `unlimited` where CPUs are not counted
        if (s.free_lanes > 0)
          with_lanes.push_back(i);
      }
  };
  refresh_bounds();

  std::optional<std::size_t> res_node;
  shadow res;
  const job_view* res_job = nullptr;
  bool blocked_seen = false;
  // Shapes that found no reservation on any node: none fits them even once
  // everything running there has ended (what a node has then does not change
  // during the pass). A job at least as large in every dimension rule 3 and
  // rule 4 test (floor and start minimum included) finds none either, so its
  // reservation search is skipped.
  std::vector<const job_view*> hopeless;
  auto dominates = [](const job_view& a, const job_view& b) {
    return a.ram_bytes >= b.ram_bytes && a.cpus >= b.cpus && a.gpus >= b.gpus &&
           (b.gpus == 0 || a.vram_bytes >= b.vram_bytes) &&
           a.ram_floor_bytes >= b.ram_floor_bytes && a.ram_start_min_bytes >= b.ram_start_min_bytes;
  };

  // An array's tasks: how many hold allocations (and start in this pass).
  auto in_group = group_counts(c);

  for (const auto* queued : queue) {
    auto& j = *queued;
    // An array at its limit waits for one of its own tasks: it neither
    // blocks the queue nor reserves.
    if (j.group_limit && in_group[j.group] >= j.group_limit)
      continue;
    const bool within_bounds = j.ram_bytes <= max_ram && j.gpus <= max_lanes && j.cpus <= max_cpus;
    // A job pinned to a node not in the cluster is skipped (it neither
    // blocks nor reserves). The node is looked up only where its index can
    // matter: for a fit test, or for the first blocked job's preemption
    // search. Any other pinned job that cannot fit goes on to the
    // reservation test alone, which no pinned job passes, found or not.
    std::optional<std::size_t> pinned;
    if (j.pinned_node && (within_bounds || !blocked_seen)) {
      pinned = p.find(*j.pinned_node);
      if (!pinned)
        continue;
    }
    std::optional<std::size_t> best;
    fit_result best_fit;
    std::pair<u64, u64> best_score{};
    bool best_uses_extra = false;
    if (within_bounds) {
      auto consider = [&](std::size_t i) {
        // fits() tests these too; tested here first, a full node costs two
        // comparisons instead of a fit test (most nodes of a busy cluster).
        if (j.ram_bytes > nodes[i].free_ram || j.cpus > nodes[i].free_cpus)
          return;
        auto f = fits(nodes[i], j);
        if (!f.ok)
          return;
        bool uses_extra = false;
        if (res_node && *res_node == i && now + j.est_ms > res.at_ms) {
          // Rule 5: a start that outlives the reservation may only use what
          // the reserved job will not need then, RAM admission included.
          if (!leaves_room(res, *nodes[i].view, *res_job, j))
            return;
          std::vector<std::size_t> chosen;
          for (std::size_t l = 0; l < nodes[i].view->lanes.size() && chosen.size() < j.gpus; ++l)
            if (!nodes[i].lane_busy[l] && res.extra_lane[l] && lane_fits(*nodes[i].view, l, j))
              chosen.push_back(l);
          if (chosen.size() < j.gpus)
            return;
          f.lanes = std::move(chosen);
          uses_extra = true;
        }
        auto sc = score(nodes[i], j);
        if (!best || sc < best_score)
          best = i, best_fit = std::move(f), best_score = sc, best_uses_extra = uses_extra;
      };
      if (pinned)
        consider(*pinned);
      else if (j.gpus > 0)
        for (auto i : with_lanes)
          consider(i);
      else
        for (std::size_t i = 0, n = nodes.size(); i < n; ++i)
          consider(i);
    }
    if (best) {
      auto& s = nodes[*best];
      take(s, j, best_fit);
      if (best_uses_extra)
        take_extra(res, j, best_fit.lanes);
      start st{j.id, s.view->name, {}, best_fit.floor};
      for (auto l : best_fit.lanes)
        st.lanes.push_back(s.view->lanes[l].name);
      auto& r = next_release(*best);
      r.at_ms = now + j.est_ms, r.ram = j.ram_bytes, r.cpus = j.cpus, r.floor = j.ram_floor_bytes;
      r.guess = j.est_default;
      r.lanes.assign(best_fit.lanes.begin(), best_fit.lanes.end());
      out.starts.push_back(std::move(st));
      if (!j.group.empty())
        ++in_group[j.group];
      refresh_bounds();
      continue;
    }
    // The job cannot start now.
    if (!blocked_seen) {
      blocked_seen = true;
      // Rule 7: ask a strictly lower, checkpointable allocation to yield.
      std::optional<preemption> pick;
      for (std::size_t i = 0; i < nodes.size() && !pick; ++i) {
        if (pinned && *pinned != i)
          continue;
        bool stop_in_flight = false;
        std::vector<release> victims;
        std::vector<const allocation_view*> who;
        for (auto* a : on_node[i]) {
          if (a->stopping)
            stop_in_flight = true;
          if (a->checkpoint && !a->stopping && a->at_lease_boundary && a->priority > j.priority) {
            victims.push_back({now, a->ram_bytes, a->cpus, lane_indexes(*nodes[i].view, a->lanes)});
            who.push_back(a);
          }
        }
        if (stop_in_flight || victims.empty())
          continue;
        // Lowest level first: the cheapest victim that (with the ones before it) makes room.
        std::vector<std::size_t> order(who.size());
        for (std::size_t k = 0; k < order.size(); ++k)
          order[k] = k;
        std::stable_sort(order.begin(), order.end(),
                         [&](auto x, auto y) { return who[x]->priority > who[y]->priority; });
        auto trial = nodes[i];
        for (auto k : order) {
          trial.free_ram += victims[k].ram;
          if (trial.free_cpus != unlimited)
            trial.free_cpus += victims[k].cpus;
          trial.available += static_cast<i64>(victims[k].ram);
          for (auto l : victims[k].lanes)
            if (trial.lane_busy[l])
              trial.lane_busy[l] = false, ++trial.free_lanes;
          if (fits(trial, j).ok) {
            pick = preemption{who[order.front()]->job, nodes[i].view->name, j.id};
            break;
          }
        }
      }
      out.preempt = pick;
    }
    if (!res_node && !j.pinned_node &&
        std::none_of(hopeless.begin(), hopeless.end(), [&](auto* h) { return dominates(j, *h); })) {
      // Rule 5: the first unpinned blocked job reserves the earliest slot.
      std::optional<std::size_t> at;
      shadow best_sh;
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        auto sh = earliest_fit(nodes[i], j, {releases[i].data(), releases_n[i]}, now);
        if (sh && (!at || sh->at_ms < best_sh.at_ms))
          at = i, best_sh = std::move(*sh);
      }
      if (at) {
        res_node = at;
        res = std::move(best_sh);
        res_job = &j;
        out.reserved = reservation{j.id, nodes[*at].view->name, res.at_ms, res.guessed};
      } else if (hopeless.size() < 16) {
        hopeless.push_back(&j);
      }
    }
  }
  return out;
}

} // namespace cq::policy
