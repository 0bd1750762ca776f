#include "placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <limits>
#include <unordered_map>

namespace cq::policy {

std::optional<level> parse_level(std::string_view s) {
  if (s == "high")
    return level::high;
  if (s == "medium")
    return level::medium;
  if (s == "low")
    return level::low;
  return std::nullopt;
}

bool heartbeat_fresh(std::int64_t last_heartbeat_ms, std::int64_t fresh_ms, std::int64_t now_ms) {
  return last_heartbeat_ms > 0 && now_ms - last_heartbeat_ms <= fresh_ms;
}

std::string_view to_string(level l) {
  switch (l) {
  case level::high:
    return "high";
  case level::medium:
    return "medium";
  case level::low:
    return "low";
  }
  return "medium";
}

namespace {

using u64 = std::uint64_t;
constexpr u64 unlimited = std::numeric_limits<u64>::max();

u64 sub(u64 a, u64 b) {
  return a > b ? a - b : 0;
}

std::string gib(u64 bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
}

/// The mutable state of one node during a pass.
struct node_state {
  const node_view* view = nullptr;
  bool eligible = false;     ///< rule 2, GPU fault aside
  u64 free_ram = 0;          ///< allocatable minus caps of live and planned allocations
  u64 free_cpus = unlimited; ///< likewise (unlimited when the node does not account CPUs)
  u64 available = 0;         ///< MemAvailable minus pending growth and planned caps
  u64 floor = 0;             ///< max of node floor and floors of live/planned allocations
  std::vector<bool> lane_busy;
  std::size_t reservations = 0; ///< live + planned allocations (for explanations)
  std::size_t free_lanes = 0;
};

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

fit_result fits(const node_state& s, const job_view& j) {
  fit_result r;
  auto& n = *s.view;
  if (!s.eligible)
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
  if (r.floor > 0 || j.ram_start_min_bytes > 0) {
    if (s.available < j.ram_bytes || s.available - j.ram_bytes < r.floor)
      return r;
    if (s.available < j.ram_start_min_bytes)
      return r;
  }
  r.ok = true;
  return r;
}

void take(node_state& s, const job_view& j, const fit_result& f) {
  s.free_ram = sub(s.free_ram, j.ram_bytes);
  if (s.free_cpus != unlimited)
    s.free_cpus = sub(s.free_cpus, j.cpus);
  s.available = sub(s.available, j.ram_bytes);
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

struct prepared {
  std::vector<node_state> nodes;
  std::unordered_map<std::string, std::size_t> index;
};

prepared prepare(const cluster_view& c, std::int64_t now) {
  prepared p;
  p.nodes.resize(c.nodes.size());
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    auto& n = c.nodes[i];
    auto& s = p.nodes[i];
    s.view = &n;
    p.index.emplace(n.name, i);
    s.eligible = n.approved && n.enabled && !n.held && fresh(n, c, now);
    s.free_ram = sub(n.mem_total_bytes, n.ram_reserve_bytes);
    s.free_cpus = n.cpus == 0 ? unlimited : n.cpus;
    s.available = n.mem_available_bytes;
    s.floor = n.ram_floor_bytes;
    s.lane_busy.assign(n.lanes.size(), false);
    s.free_lanes = n.lanes.size();
    for (std::size_t l = 0; l < n.lanes.size(); ++l)
      if (n.lanes[l].held)
        s.lane_busy[l] = true, --s.free_lanes;
  }
  for (auto& a : c.allocations) {
    auto it = p.index.find(a.node);
    if (it == p.index.end())
      continue;
    auto& s = p.nodes[it->second];
    s.free_ram = sub(s.free_ram, a.ram_bytes);
    if (s.free_cpus != unlimited)
      s.free_cpus = sub(s.free_cpus, a.cpus);
    s.available = sub(s.available, sub(a.ram_bytes, a.ram_used_bytes));
    s.floor = std::max(s.floor, a.ram_floor_bytes);
    ++s.reservations;
    for (auto& name : a.lanes)
      for (std::size_t l = 0; l < s.view->lanes.size(); ++l)
        if (s.view->lanes[l].name == name && !s.lane_busy[l])
          s.lane_busy[l] = true, --s.free_lanes;
  }
  return p;
}

/// An allocation as seen by the reservation search: what it frees and when.
struct release {
  std::int64_t at_ms;
  u64 ram, cpus;
  std::vector<std::size_t> lanes;
};

/// Earliest time `j` fits on node `s` if the given allocations end by their
/// estimates (cap accounting only: MemAvailable cannot be predicted). Returns
/// the time and the resources left over at that time beyond what `j` needs.
struct shadow {
  std::int64_t at_ms = 0;
  u64 extra_ram = 0, extra_cpus = 0;
  std::vector<bool> extra_lane; ///< lanes free at at_ms that j does not take
};

/// True if `j` could run on the node were nothing else running there.
bool fits_empty(const node_state& s, const job_view& j) {
  auto& n = *s.view;
  if (!s.eligible || (j.gpus > 0 && (n.gpu_fault || n.gpu_probe_busy)))
    return false;
  if (j.ram_bytes > sub(n.mem_total_bytes, n.ram_reserve_bytes))
    return false;
  if (n.cpus != 0 && j.cpus > n.cpus)
    return false;
  if (j.gpus == 0)
    return true;
  if (n.vram_cap_bytes && j.vram_bytes > *n.vram_cap_bytes)
    return false;
  std::uint64_t usable = 0;
  for (std::size_t i = 0; i < n.lanes.size(); ++i)
    usable += lane_fits(n, i, j) ? 1 : 0;
  return usable >= j.gpus;
}

std::optional<shadow> earliest_fit(const node_state& s, const job_view& j,
                                   const std::vector<release>& releases, std::int64_t now) {
  auto& n = *s.view;
  // Cheap refusal first: a job that never fits here must not cost a copy and a sort.
  if (!fits_empty(s, j))
    return std::nullopt;
  auto rel = releases;
  std::sort(rel.begin(), rel.end(), [](auto& a, auto& b) { return a.at_ms < b.at_ms; });
  u64 ram = s.free_ram, cpus = s.free_cpus;
  auto busy = s.lane_busy;
  auto check = [&](std::int64_t at) -> std::optional<shadow> {
    if (j.ram_bytes > ram || j.cpus > cpus)
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
    return sh;
  };
  if (auto sh = check(now))
    return sh;
  for (std::size_t k = 0; k < rel.size(); ++k) {
    auto& r = rel[k];
    ram += r.ram;
    if (cpus != unlimited)
      cpus += r.cpus;
    for (auto i : r.lanes)
      busy[i] = false;
    // Allocations ending at the same moment free their resources together.
    if (k + 1 < rel.size() && rel[k + 1].at_ms == r.at_ms)
      continue;
    if (auto sh = check(std::max(r.at_ms, now)))
      return sh;
  }
  return std::nullopt;
}

std::vector<std::size_t> lane_indexes(const node_view& n, const std::vector<std::string>& names) {
  std::vector<std::size_t> out;
  for (auto& name : names)
    for (std::size_t l = 0; l < n.lanes.size(); ++l)
      if (n.lanes[l].name == name)
        out.push_back(l);
  return out;
}

} // namespace

plan place(const cluster_view& c, const std::vector<job_view>& queue, std::int64_t now) {
  plan out;
  auto p = prepare(c, now);
  auto& nodes = p.nodes;
  // Per node, what the reservation search may release: live allocations and
  // starts planned in this pass.
  std::vector<std::vector<release>> releases(nodes.size());
  for (auto& a : c.allocations)
    if (auto it = p.index.find(a.node); it != p.index.end())
      releases[it->second].push_back({std::max(a.est_end_ms, now), a.ram_bytes, a.cpus,
                                      lane_indexes(*nodes[it->second].view, a.lanes)});

  // Upper bounds over eligible nodes, to skip hopeless jobs without a scan.
  u64 max_ram = 0, max_lanes = 0;
  auto refresh_bounds = [&] {
    max_ram = 0, max_lanes = 0;
    for (auto& s : nodes)
      if (s.eligible)
        max_ram = std::max(max_ram, s.free_ram), max_lanes = std::max<u64>(max_lanes, s.free_lanes);
  };
  refresh_bounds();

  std::optional<std::size_t> res_node;
  shadow res;
  bool blocked_seen = false;
  // Shapes that fit no node even when empty: a job at least as large in every
  // dimension cannot fit either, so its reservation search is skipped.
  std::vector<const job_view*> hopeless;
  auto dominates = [](const job_view& a, const job_view& b) {
    return a.ram_bytes >= b.ram_bytes && a.cpus >= b.cpus && a.gpus >= b.gpus &&
           (b.gpus == 0 || a.vram_bytes >= b.vram_bytes);
  };

  for (auto& j : queue) {
    std::optional<std::size_t> pinned;
    if (j.pinned_node) {
      auto it = p.index.find(*j.pinned_node);
      if (it == p.index.end())
        continue;
      pinned = it->second;
    }
    std::optional<std::size_t> best;
    fit_result best_fit;
    std::pair<u64, u64> best_score{};
    bool best_uses_extra = false;
    if (j.ram_bytes <= max_ram && j.gpus <= max_lanes) {
      auto consider = [&](std::size_t i) {
        auto f = fits(nodes[i], j);
        if (!f.ok)
          return;
        bool uses_extra = false;
        if (res_node && *res_node == i && now + j.est_ms > res.at_ms) {
          // Rule 5: a start that outlives the reservation may only use what
          // the reserved job will not need then.
          if (j.ram_bytes > res.extra_ram || j.cpus > res.extra_cpus)
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
      else
        for (std::size_t i = 0; i < nodes.size(); ++i)
          consider(i);
    }
    if (best) {
      auto& s = nodes[*best];
      take(s, j, best_fit);
      if (best_uses_extra) {
        res.extra_ram -= j.ram_bytes;
        if (res.extra_cpus != unlimited)
          res.extra_cpus -= j.cpus;
        for (auto l : best_fit.lanes)
          res.extra_lane[l] = false;
      }
      start st{j.id, s.view->name, {}, best_fit.floor};
      for (auto l : best_fit.lanes)
        st.lanes.push_back(s.view->lanes[l].name);
      releases[*best].push_back({now + j.est_ms, j.ram_bytes, j.cpus, best_fit.lanes});
      out.starts.push_back(std::move(st));
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
        for (auto& a : c.allocations) {
          if (a.node != nodes[i].view->name)
            continue;
          if (a.stopping)
            stop_in_flight = true;
          if (a.checkpoint && !a.stopping && a.priority > j.priority) {
            victims.push_back({now, a.ram_bytes, a.cpus, lane_indexes(*nodes[i].view, a.lanes)});
            who.push_back(&a);
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
          trial.available += victims[k].ram;
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
    if (!res_node && !pinned &&
        std::none_of(hopeless.begin(), hopeless.end(), [&](auto* h) { return dominates(j, *h); })) {
      // Rule 5: the first unpinned blocked job reserves the earliest slot.
      std::optional<std::size_t> at;
      shadow best_sh;
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        auto sh = earliest_fit(nodes[i], j, releases[i], now);
        if (sh && (!at || sh->at_ms < best_sh.at_ms))
          at = i, best_sh = std::move(*sh);
      }
      if (at) {
        res_node = at;
        res = std::move(best_sh);
        out.reserved = reservation{j.id, nodes[*at].view->name, res.at_ms};
      } else if (hopeless.size() < 16) {
        hopeless.push_back(&j);
      }
    }
  }
  return out;
}

std::vector<std::string> explain(const cluster_view& c, const job_view& j,
                                 const std::optional<reservation>& reserved,
                                 const std::optional<job_view>& reserved_job, std::int64_t now) {
  std::vector<std::string> out;
  auto p = prepare(c, now);
  // What the reserved job leaves over on its node at its reserved time.
  std::optional<shadow> res_shadow;
  if (reserved && reserved_job && reserved_job->id != j.id)
    if (auto it = p.index.find(reserved->node); it != p.index.end()) {
      std::vector<release> rel;
      for (auto& a : c.allocations)
        if (a.node == reserved->node)
          rel.push_back({std::max(a.est_end_ms, now), a.ram_bytes, a.cpus,
                         lane_indexes(*p.nodes[it->second].view, a.lanes)});
      res_shadow = earliest_fit(p.nodes[it->second], *reserved_job, rel, now);
    }
  bool fits_somewhere = false;
  for (auto& s : p.nodes) {
    auto& n = *s.view;
    if (j.pinned_node && *j.pinned_node != n.name)
      continue;
    std::string why;
    if (!n.approved)
      why = "not approved";
    else if (!n.enabled)
      why = "disabled";
    else if (n.held)
      why = "in a hold until a person releases it";
    else if (n.last_heartbeat_ms == 0)
      why = "no heartbeat yet";
    else if (!fresh(n, c, now))
      why = fmt::format("no heartbeat for {}s", (now - n.last_heartbeat_ms) / 1000);
    else if (j.gpus > 0 && n.gpu_fault)
      why = "GPU fault latched; no GPU jobs until the Owner clears it";
    else if (j.gpus > 0 && n.gpu_probe_busy)
      why = "a GPU lock probe is held by a process outside cq; no GPU jobs";
    else if (j.ram_bytes > s.free_ram)
      why = fmt::format("needs {} RAM, {} allocatable after {} reservation{}", gib(j.ram_bytes),
                        gib(s.free_ram), s.reservations, s.reservations == 1 ? "" : "s");
    else if (j.cpus > s.free_cpus)
      why = fmt::format("needs {} CPUs, {} free", j.cpus, s.free_cpus);
    else if (j.gpus > 0 && n.vram_cap_bytes && j.vram_bytes > *n.vram_cap_bytes)
      why = fmt::format("needs {} VRAM per GPU, over the node's VRAM cap of {}", gib(j.vram_bytes),
                        gib(*n.vram_cap_bytes));
    else if (j.gpus > 0) {
      std::size_t usable = 0;
      for (std::size_t l = 0; l < n.lanes.size(); ++l)
        if (!s.lane_busy[l] && lane_fits(n, l, j))
          ++usable;
      if (usable < j.gpus)
        why = fmt::format("needs {} GPU lane{} with {} VRAM free, {} of {} usable", j.gpus,
                          j.gpus == 1 ? "" : "s", gib(j.vram_bytes), usable, n.lanes.size());
    }
    if (why.empty()) {
      auto floor = std::max(s.floor, j.ram_floor_bytes);
      if (floor > 0 || j.ram_start_min_bytes > 0) {
        if (s.available < j.ram_bytes || s.available - j.ram_bytes < floor)
          why = fmt::format("RAM floor: {} available after reservations, needs {} cap + {} floor",
                            gib(s.available), gib(j.ram_bytes), gib(floor));
        else if (s.available < j.ram_start_min_bytes)
          why = fmt::format("start minimum: needs {} available, {} after reservations",
                            gib(j.ram_start_min_bytes), gib(s.available));
      }
    }
    auto within_extra = [&] {
      if (!res_shadow || j.ram_bytes > res_shadow->extra_ram || j.cpus > res_shadow->extra_cpus)
        return false;
      std::uint64_t lanes = 0;
      for (std::size_t l = 0; l < n.lanes.size(); ++l)
        lanes += (!s.lane_busy[l] && res_shadow->extra_lane[l] && lane_fits(n, l, j)) ? 1 : 0;
      return lanes >= j.gpus;
    };
    if (why.empty() && reserved && reserved->node == n.name && reserved->job != j.id &&
        now + j.est_ms > reserved->at_ms && !within_extra())
      why = fmt::format("would delay job {}'s reservation in {}s", reserved->job,
                        (reserved->at_ms - now) / 1000);
    if (!why.empty())
      out.push_back(fmt::format("{}: {}", n.name, why));
    else
      fits_somewhere = true;
  }
  if (fits_somewhere)
    return {};
  if (j.pinned_node && out.empty() && !p.index.count(*j.pinned_node))
    out.push_back(fmt::format("{}: no such node", *j.pinned_node));
  if (c.nodes.empty())
    out.push_back("no nodes have joined");
  if (!out.empty() && reserved && reserved->job == j.id)
    out.insert(out.begin(), fmt::format("holds the reservation on {} in {}s", reserved->node,
                                        std::max<std::int64_t>(0, reserved->at_ms - now) / 1000));
  return out;
}

} // namespace cq::policy
