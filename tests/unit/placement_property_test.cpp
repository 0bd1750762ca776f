// Property test of the placement policy: seeded random clusters and queues,
// every plan checked against the invariants of coordinator/policy/placement.hpp
// and against a slow reference written from the header's rules.
// A failure prints its seed; CQ_PLACEMENT_SEED=N reruns one seed alone,
// CQ_PLACEMENT_SEEDS=N runs N seeds, CQ_PLACEMENT_STATS=1 prints coverage.
#include "policy/placement.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace cq::policy;

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

constexpr u64 GiB = 1ull << 30;
constexpr u64 grain = 256ull << 20; // sizes are multiples of 256 MiB
constexpr i64 now = 1'700'000'000'000;
constexpr i64 minute = 60'000;
constexpr i64 hour = 60 * minute;
constexpr i64 never = std::numeric_limits<i64>::max();

struct rng {
  std::mt19937_64 g;
  explicit rng(u64 seed) : g(seed) {}
  i64 between(i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(g); } // inclusive
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(between(0, i64(v.size()) - 1))];
  }
  u64 size_gib(double lo, double hi) { // in grains
    auto g0 = static_cast<i64>(lo * GiB / grain), g1 = static_cast<i64>(hi * GiB / grain);
    return static_cast<u64>(between(std::max<i64>(g0, 1), std::max<i64>(g1, 1))) * grain;
  }
};

struct scenario {
  cluster_view cluster;
  std::vector<job_view> queue;
  bool clean = false; ///< no floors, no start minimums, no overrun allocations
};

scenario generate(u64 seed) {
  rng r(seed);
  scenario s;
  s.clean = r.chance(0.35);
  auto& c = s.cluster;
  c.heartbeat_fresh_ms = 5000;
  const int n_nodes = static_cast<int>(r.between(1, 8));
  for (int i = 0; i < n_nodes; ++i) {
    node_view n;
    n.name = "n" + std::to_string(i);
    n.approved = r.chance(0.9);
    n.enabled = r.chance(0.95);
    n.held = r.chance(0.05);
    n.gpu_fault = r.chance(0.07);
    double hb = std::uniform_real_distribution<double>(0, 1)(r.g);
    n.last_heartbeat_ms = hb < 0.9    ? now - r.between(0, 4000)
                          : hb < 0.97 ? now - r.between(6000, 600'000)
                                      : 0;
    n.mem_total_bytes = r.pick<u64>({16, 32, 64, 128, 256}) * GiB;
    n.ram_reserve_bytes = r.chance(0.5) ? r.size_gib(0, 8) : 0;
    n.ram_floor_bytes = (!s.clean && r.chance(0.3)) ? r.size_gib(1, 8) : 0;
    n.cpus = r.chance(0.3) ? 0 : r.pick<u64>({8, 16, 32, 64});
    int lanes = r.chance(0.4) ? 0 : static_cast<int>(r.between(1, 4));
    u64 lane_vram = r.pick<u64>({24, 48, 80}) * GiB;
    bool mixed = r.chance(0.2);
    for (int l = 0; l < lanes; ++l) {
      lane ln;
      ln.name = "gpu" + std::to_string(l);
      ln.vram_total_bytes = mixed ? r.pick<u64>({24, 48, 80}) * GiB : lane_vram;
      ln.vram_outside_bytes =
          r.chance(0.3) ? static_cast<u64>(r.between(0, i64(ln.vram_total_bytes / grain))) * grain
                        : 0;
      ln.held = r.chance(0.1);
      n.lanes.push_back(ln);
    }
    if (r.chance(0.15))
      n.vram_cap_bytes = r.pick<u64>({16, 32, 40}) * GiB;
    c.nodes.push_back(n);
  }
  // Live allocations, consistent with their nodes: RAM and CPUs within
  // allocatable, lanes not held and not shared.
  int alloc_no = 0;
  for (auto& n : c.nodes) {
    u64 allocatable = n.mem_total_bytes - n.ram_reserve_bytes;
    u64 ram_used = 0, cpus_used = 0, used_by_procs = 0;
    std::vector<bool> lane_used(n.lanes.size(), false);
    int tries = static_cast<int>(r.between(0, 4));
    for (int t = 0; t < tries; ++t) {
      allocation_view a;
      a.job = "a" + std::to_string(alloc_no++);
      a.node = n.name;
      u64 left = allocatable - ram_used;
      if (left < grain)
        break;
      a.ram_bytes = r.size_gib(
          0.25, std::min<double>(double(left) / GiB, double(allocatable) / GiB * 0.6 + 0.25));
      if (a.ram_bytes > left)
        a.ram_bytes = left;
      a.ram_used_bytes = static_cast<u64>(r.between(0, i64(a.ram_bytes / grain))) * grain;
      a.ram_floor_bytes = (!s.clean && r.chance(0.2)) ? r.size_gib(1, 6) : 0;
      if (n.cpus > 0) {
        u64 cl = n.cpus - cpus_used;
        a.cpus = cl == 0 ? 0 : static_cast<u64>(r.between(0, i64(std::min<u64>(cl, 16))));
      } else {
        a.cpus = static_cast<u64>(r.between(0, 8));
      }
      for (size_t l = 0; l < n.lanes.size(); ++l)
        if (!n.lanes[l].held && !lane_used[l] && r.chance(0.45)) {
          lane_used[l] = true;
          a.lanes.push_back(n.lanes[l].name);
        }
      if (!a.lanes.empty())
        a.vram_bytes = r.size_gib(1, 20);
      a.priority = static_cast<level>(r.between(0, 2));
      a.checkpoint = r.chance(0.5);
      a.stopping = r.chance(0.1);
      a.at_lease_boundary = r.chance(0.7);
      a.est_end_ms = s.clean ? now + r.between(1, 6 * hour) : now + r.between(-hour / 2, 6 * hour);
      ram_used += a.ram_bytes;
      cpus_used += a.cpus;
      used_by_procs += a.ram_used_bytes;
      c.allocations.push_back(a);
    }
    // MemAvailable: somewhere below what the processes leave.
    u64 max_avail = n.mem_total_bytes > used_by_procs ? n.mem_total_bytes - used_by_procs : 0;
    n.mem_available_bytes =
        static_cast<u64>(r.between(i64(max_avail / 4 / grain), i64(max_avail / grain))) * grain;
  }
  // The queue, in serving order: by level, then position.
  const int n_jobs = static_cast<int>(r.between(0, 40));
  for (int i = 0; i < n_jobs; ++i) {
    job_view j;
    j.id = "j" + std::to_string(i);
    j.priority = static_cast<level>(r.between(0, 2));
    double big = std::uniform_real_distribution<double>(0, 1)(r.g);
    j.ram_bytes = big < 0.6   ? r.size_gib(0.25, 16)
                  : big < 0.9 ? r.size_gib(8, 64)
                              : r.size_gib(32, 300);
    if (r.chance(0.3)) {
      j.gpus = static_cast<u64>(r.between(1, 3));
      j.vram_bytes = r.size_gib(1, 80);
    }
    j.cpus = r.chance(0.5) ? 0 : static_cast<u64>(r.between(1, 16));
    if (!s.clean) {
      // Mostly modest; sometimes more than some node (or any) can ever have.
      if (r.chance(0.2))
        j.ram_floor_bytes = r.chance(0.75) ? r.size_gib(1, 8) : r.size_gib(8, 300);
      if (r.chance(0.1))
        j.ram_start_min_bytes = r.chance(0.75) ? r.size_gib(4, 64) : r.size_gib(64, 300);
    }
    j.est_ms = r.between(minute, 6 * hour);
    if (r.chance(0.15))
      j.pinned_node = r.chance(0.05) ? std::string("ghost") : r.pick(c.nodes).name;
    s.queue.push_back(j);
  }
  std::stable_sort(s.queue.begin(), s.queue.end(),
                   [](const job_view& a, const job_view& b) { return a.priority < b.priority; });
  return s;
}

std::string gib(u64 b) {
  std::ostringstream o;
  o << double(b) / GiB << "G";
  return o.str();
}

std::string describe(const scenario& s) {
  std::ostringstream o;
  o << "clean=" << s.clean << "\n";
  for (const auto& n : s.cluster.nodes) {
    o << "node " << n.name << " appr=" << n.approved << " en=" << n.enabled << " held=" << n.held
      << " fault=" << n.gpu_fault
      << " hb=" << (n.last_heartbeat_ms ? now - n.last_heartbeat_ms : -1)
      << " total=" << gib(n.mem_total_bytes) << " avail=" << gib(n.mem_available_bytes)
      << " reserve=" << gib(n.ram_reserve_bytes) << " floor=" << gib(n.ram_floor_bytes)
      << " cpus=" << n.cpus
      << " cap=" << (n.vram_cap_bytes ? gib(*n.vram_cap_bytes) : std::string("-")) << " lanes=[";
    for (const auto& l : n.lanes)
      o << l.name << ":" << gib(l.vram_total_bytes) << "/" << gib(l.vram_outside_bytes)
        << (l.held ? "H" : "") << " ";
    o << "]\n";
  }
  for (const auto& a : s.cluster.allocations) {
    o << "alloc " << a.job << "@" << a.node << " lvl=" << int(a.priority)
      << " ckpt=" << a.checkpoint << " stop=" << a.stopping << " ram=" << gib(a.ram_bytes)
      << " used=" << gib(a.ram_used_bytes) << " floor=" << gib(a.ram_floor_bytes)
      << " cpus=" << a.cpus << " end=+" << (a.est_end_ms - now) / 1000 << "s lanes=[";
    for (const auto& l : a.lanes)
      o << l << " ";
    o << "]\n";
  }
  for (const auto& j : s.queue) {
    o << "job " << j.id << " lvl=" << int(j.priority) << " ram=" << gib(j.ram_bytes)
      << " gpus=" << j.gpus << " vram=" << gib(j.vram_bytes) << " cpus=" << j.cpus
      << " floor=" << gib(j.ram_floor_bytes) << " min=" << gib(j.ram_start_min_bytes)
      << " est=" << j.est_ms / 1000 << "s"
      << (j.pinned_node ? " pin=" + *j.pinned_node : std::string()) << "\n";
  }
  return o.str();
}

std::string describe(const plan& p) {
  std::ostringstream o;
  for (const auto& s : p.starts) {
    o << "start " << s.job << "@" << s.node << " floor=" << gib(s.ram_floor_bytes) << " lanes=[";
    for (const auto& l : s.lanes)
      o << l << " ";
    o << "]\n";
  }
  if (p.reserved)
    o << "reserved " << p.reserved->job << "@" << p.reserved->node << " at=+"
      << (p.reserved->at_ms - now) << "ms\n";
  if (p.preempt)
    o << "preempt " << p.preempt->victim_job << "@" << p.preempt->node << " for "
      << p.preempt->for_job << "\n";
  return o.str();
}

// ------------------------------------------------------------------ model
//
// A straightforward, slow model of one node during a pass: the holders of
// resources (live allocations and planned starts) with their end times.

struct holder {
  u64 ram = 0;
  u64 cpus = 0;
  std::vector<std::string> lanes;
  i64 end = 0;
  u64 floor = 0; ///< its RAM floor, counted while it runs
};

struct model {
  const cluster_view* c;
  i64 now_ms;
  std::map<std::string, std::vector<holder>> holders; // by node
  std::map<std::string, u64> planned_caps;            // caps of starts planned this pass, by node
  std::map<std::string, u64> planned_floors; // largest floor of starts planned this pass, by node

  model(const cluster_view& cl, i64 t) : c(&cl), now_ms(t) {
    for (const auto& a : cl.allocations)
      holders[a.node].push_back({a.ram_bytes, a.cpus, a.lanes, a.est_end_ms, a.ram_floor_bytes});
  }

  const node_view* node(const std::string& name) const {
    for (const auto& n : c->nodes)
      if (n.name == name)
        return &n;
    return nullptr;
  }

  bool eligible(const node_view& n, const job_view& j) const {
    if (!n.approved || !n.enabled || n.held)
      return false;
    if (n.last_heartbeat_ms == 0 || now_ms - n.last_heartbeat_ms > c->heartbeat_fresh_ms)
      return false;
    if (j.gpus > 0 && n.gpu_fault)
      return false;
    if (j.pinned_node && *j.pinned_node != n.name)
      return false;
    return true;
  }

  /// Rule 3 at time t: holders ending at or before t are gone (t = nullopt: now, all count).
  /// Returns the lanes the job would get (first usable in listed order), or nullopt.
  std::optional<std::vector<std::string>> fits3(const node_view& n, const job_view& j,
                                                std::optional<i64> t,
                                                const std::vector<holder>* extra = nullptr) const {
    u64 allocatable =
        n.mem_total_bytes > n.ram_reserve_bytes ? n.mem_total_bytes - n.ram_reserve_bytes : 0;
    u64 ram = 0, cpus = 0;
    std::set<std::string> used;
    auto count = [&](const holder& h) {
      if (t && h.end <= *t)
        return;
      ram += h.ram;
      cpus += h.cpus;
      used.insert(h.lanes.begin(), h.lanes.end());
    };
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        count(h);
    if (extra)
      for (const auto& h : *extra)
        count(h);
    if (ram + j.ram_bytes > allocatable)
      return std::nullopt;
    if (n.cpus > 0 && cpus + j.cpus > n.cpus)
      return std::nullopt;
    if (j.gpus > 0 && n.vram_cap_bytes && j.vram_bytes > *n.vram_cap_bytes)
      return std::nullopt;
    std::vector<std::string> got;
    for (const auto& l : n.lanes) {
      if (got.size() == j.gpus)
        break;
      if (l.held || used.count(l.name))
        continue;
      u64 usable =
          l.vram_total_bytes > l.vram_outside_bytes ? l.vram_total_bytes - l.vram_outside_bytes : 0;
      if (usable >= j.vram_bytes)
        got.push_back(l.name);
    }
    if (got.size() < j.gpus)
      return std::nullopt;
    return got;
  }

  u64 combined_floor(const node_view& n, const job_view& j) const {
    u64 f = std::max(n.ram_floor_bytes, j.ram_floor_bytes);
    for (const auto& a : c->allocations)
      if (a.node == n.name)
        f = std::max(f, a.ram_floor_bytes);
    // A start planned earlier in the pass is an active allocation by the time
    // this one launches, so its floor counts too. (The header lists only live
    // allocations; the implementation and the seed's "all active allocations"
    // include planned starts.)
    if (auto it = planned_floors.find(n.name); it != planned_floors.end())
      f = std::max(f, it->second);
    return f;
  }

  /// Rule 4, now.
  bool fits4(const node_view& n, const job_view& j) const {
    u64 floor = combined_floor(n, j);
    if (floor == 0 && j.ram_start_min_bytes == 0)
      return true;
    __int128 avail = n.mem_available_bytes;
    for (const auto& a : c->allocations)
      if (a.node == n.name && a.ram_bytes > a.ram_used_bytes)
        avail -= a.ram_bytes - a.ram_used_bytes;
    if (auto it = planned_caps.find(n.name); it != planned_caps.end())
      avail -= it->second;
    return avail - __int128(j.ram_bytes) >= __int128(floor) &&
           avail >= __int128(j.ram_start_min_bytes);
  }

  /// Rule 4 at time t against the header's prediction (t = nullopt: now,
  /// exactly fits4): available = min(node memory, MemAvailable - pending
  /// growth - planned caps (and `extra`'s) + caps of holders ended by t);
  /// the combined floor counts the holders still running at t.
  bool fits4_at(const node_view& n, const job_view& j, std::optional<i64> t,
                const std::vector<holder>* extra = nullptr) const {
    u64 floor = std::max(n.ram_floor_bytes, j.ram_floor_bytes);
    __int128 avail = n.mem_available_bytes;
    for (const auto& a : c->allocations)
      if (a.node == n.name && a.ram_bytes > a.ram_used_bytes)
        avail -= a.ram_bytes - a.ram_used_bytes;
    if (auto it = planned_caps.find(n.name); it != planned_caps.end())
      avail -= it->second;
    auto count = [&](const holder& h) {
      if (t && h.end <= *t)
        avail += h.ram;
      else
        floor = std::max(floor, h.floor);
    };
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        count(h);
    if (extra)
      for (const auto& h : *extra) {
        avail -= h.ram;
        count(h);
      }
    if (floor == 0 && j.ram_start_min_bytes == 0)
      return true;
    avail = std::min<__int128>(avail, n.mem_total_bytes);
    return avail - __int128(j.ram_bytes) >= __int128(floor) &&
           avail >= __int128(j.ram_start_min_bytes);
  }

  std::set<std::string> lanes_used(const node_view& n) const {
    std::set<std::string> used;
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        used.insert(h.lanes.begin(), h.lanes.end());
    return used;
  }

  u64 free_lanes(const node_view& n) const {
    std::set<std::string> used;
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        used.insert(h.lanes.begin(), h.lanes.end());
    u64 k = 0;
    for (const auto& l : n.lanes)
      if (!l.held && !used.count(l.name))
        ++k;
    return k;
  }

  u64 ram_left(const node_view& n) const {
    u64 allocatable =
        n.mem_total_bytes > n.ram_reserve_bytes ? n.mem_total_bytes - n.ram_reserve_bytes : 0;
    u64 ram = 0;
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        ram += h.ram;
    return allocatable > ram ? allocatable - ram : 0;
  }

  void add_start(const node_view& n, const job_view& j, const std::vector<std::string>& lanes) {
    holders[n.name].push_back({j.ram_bytes, j.cpus, lanes, now_ms + j.est_ms, j.ram_floor_bytes});
    planned_caps[n.name] += j.ram_bytes;
    planned_floors[n.name] = std::max(planned_floors[n.name], j.ram_floor_bytes);
  }

  /// Earliest time (an end of some holder, or now) at which the job fits on n
  /// by rule 3 and by rule 4 against the prediction (fits4_at).
  std::optional<i64> earliest(const node_view& n, const job_view& j,
                              const std::vector<holder>* extra = nullptr) const {
    if (fits3(n, j, std::nullopt, extra) && fits4_at(n, j, std::nullopt, extra))
      return now_ms;
    std::vector<i64> ends;
    if (auto it = holders.find(n.name); it != holders.end())
      for (const auto& h : it->second)
        ends.push_back(h.end);
    if (extra)
      for (const auto& h : *extra)
        ends.push_back(h.end);
    std::sort(ends.begin(), ends.end());
    for (i64 t : ends)
      if (fits3(n, j, t, extra) && fits4_at(n, j, t, extra))
        return std::max(t, now_ms);
    return std::nullopt;
  }
};

/// The slow reference: greedy in serving order, best fit (rule 6), one EASY
/// reservation (rule 5). It does not choose preemptions.
plan reference(const cluster_view& c, const std::vector<job_view>& q, i64 t) {
  model m(c, t);
  plan p;
  const job_view* reserved_job = nullptr;
  std::set<std::string> reserved_lanes;
  for (const auto& j : q) {
    const node_view* best = nullptr;
    std::vector<std::string> best_lanes;
    u64 best_free = 0, best_left = 0;
    for (const auto& n : c.nodes) {
      if (!m.eligible(n, j))
        continue;
      auto lanes = m.fits3(n, j, std::nullopt);
      if (!lanes || !m.fits4(n, j))
        continue;
      if (p.reserved && p.reserved->node == n.name && t + j.est_ms > p.reserved->at_ms) {
        // It would still be running then: it may use only what the reserved
        // job will not need. The reserved job's lanes are the first that fit
        // it at that time; a backfilled job takes none of them.
        std::vector<std::string> spare;
        auto used = m.lanes_used(n);
        for (const auto& l : n.lanes) {
          if (spare.size() == j.gpus)
            break;
          if (l.held || used.count(l.name) || reserved_lanes.count(l.name))
            continue;
          if (l.vram_total_bytes >= l.vram_outside_bytes + j.vram_bytes)
            spare.push_back(l.name);
        }
        if (spare.size() < j.gpus)
          continue;
        lanes = spare;
        std::vector<holder> extra{{j.ram_bytes, j.cpus, *lanes, t + j.est_ms, j.ram_floor_bytes}};
        if (!m.fits3(n, *reserved_job, p.reserved->at_ms, &extra) ||
            !m.fits4_at(n, *reserved_job, p.reserved->at_ms, &extra))
          continue;
      }
      u64 fl = m.free_lanes(n), left = m.ram_left(n);
      if (!best || fl < best_free || (fl == best_free && left < best_left)) {
        best = &n;
        best_lanes = *lanes;
        best_free = fl;
        best_left = left;
      }
    }
    if (best) {
      m.add_start(*best, j, best_lanes);
      p.starts.push_back({j.id, best->name, best_lanes, m.combined_floor(*best, j)});
      continue;
    }
    if (p.reserved || j.pinned_node)
      continue;
    std::optional<i64> at;
    const node_view* where = nullptr;
    for (const auto& n : c.nodes) {
      if (!m.eligible(n, j))
        continue;
      if (auto e = m.earliest(n, j); e && (!at || *e < *at)) {
        at = e;
        where = &n;
      }
    }
    if (at) {
      p.reserved = reservation{j.id, where->name, *at};
      reserved_job = &j;
      auto l = m.fits3(*where, j, std::nullopt);
      if (!l)
        l = m.fits3(*where, j, *at);
      reserved_lanes = std::set<std::string>(l->begin(), l->end());
    }
  }
  return p;
}

/// Can the job never run on node n, even with every holder gone and
/// MemAvailable the node's whole memory? (Rule 3 on the empty node, and
/// rule 4: cap + max(node floor, job floor) and the start minimum within the
/// node's memory.)
bool never_fits_on(const cluster_view& c, const node_view& n, const job_view& j) {
  const cluster_view bare{c.nodes, {}, c.heartbeat_fresh_ms};
  model empty(bare, now);
  if (!empty.eligible(n, j) || !empty.fits3(n, j, std::nullopt))
    return true;
  __int128 floor = std::max(n.ram_floor_bytes, j.ram_floor_bytes);
  if (floor > 0 && __int128(j.ram_bytes) + floor > __int128(n.mem_total_bytes))
    return true;
  return j.ram_start_min_bytes > n.mem_total_bytes;
}

/// Can the job never run on any eligible node?
bool never_fits(const cluster_view& c, const job_view& j) {
  for (const auto& n : c.nodes)
    if (!never_fits_on(c, n, j))
      return false;
  return true;
}

/// Does the reservation's earliest time on its node have a unique minimum across nodes?
bool unique_reservation_node(const cluster_view& c, const std::vector<job_view>& q,
                             const plan& ref) {
  if (!ref.reserved)
    return true;
  model m(c, now);
  size_t ri = 0;
  for (; ri < q.size() && q[ri].id != ref.reserved->job; ++ri)
    ;
  for (const auto& s : ref.starts) {
    for (size_t k = 0; k < ri; ++k)
      if (q[k].id == s.job)
        m.add_start(*m.node(s.node), q[k], s.lanes);
  }
  int hits = 0;
  for (const auto& n : c.nodes)
    if (m.eligible(n, q[ri]))
      if (auto e = m.earliest(n, q[ri]); e && *e == ref.reserved->at_ms)
        ++hits;
  return hits == 1;
}

std::map<std::string, std::string> started_on(const plan& p) {
  std::map<std::string, std::string> out;
  for (const auto& s : p.starts)
    out[s.job] = s.node;
  return out;
}

struct counters {
  int plans = 0, with_starts = 0, with_reservation = 0, with_preempt = 0, full_compared = 0,
      clean_compared = 0;
  int with_admission_never = 0; ///< a waiting job fits by caps somewhere but never by rule 4
};

/// Check one scenario; CHECKs fail with the seed in scope.
void check_scenario(u64 seed, counters& k) {
  const scenario s = generate(seed);
  const auto& c = s.cluster;
  const auto& q = s.queue;
  INFO("seed " << seed << " (rerun: CQ_PLACEMENT_SEED=" << seed << ")");
  const plan p = place(c, q, now);
  INFO("scenario:\n" << describe(s) << "plan:\n" << describe(p));
  ++k.plans;
  if (!p.starts.empty())
    ++k.with_starts;
  if (p.reserved)
    ++k.with_reservation;
  if (p.preempt)
    ++k.with_preempt;

  std::map<std::string, size_t> index;
  for (size_t i = 0; i < q.size(); ++i)
    index[q[i].id] = i;
  model m(c, now);

  // Starts in serving order (their planning order).
  std::vector<const start*> starts;
  std::set<std::string> ids;
  for (const auto& st : p.starts) {
    REQUIRE(index.count(st.job) == 1);
    CHECK(ids.insert(st.job).second); // no job starts twice
    starts.push_back(&st);
  }
  std::sort(starts.begin(), starts.end(),
            [&](auto* a, auto* b) { return index[a->job] < index[b->job]; });

  std::map<std::string, std::set<std::string>> lanes_in_use; // node -> lanes
  for (const auto& a : c.allocations)
    lanes_in_use[a.node].insert(a.lanes.begin(), a.lanes.end());

  for (const start* st : starts) {
    const job_view& j = q[index[st->job]];
    INFO("start " << st->job << " on " << st->node);
    const node_view* n = m.node(st->node);
    REQUIRE(n != nullptr);
    CHECK(m.eligible(*n, j)); // rule 2, pinning included
    if (j.pinned_node)
      CHECK(st->node == *j.pinned_node);
    // Lanes: count, existence, not held, not shared, VRAM.
    CHECK(st->lanes.size() == j.gpus);
    std::set<std::string> own(st->lanes.begin(), st->lanes.end());
    CHECK(own.size() == st->lanes.size());
    for (const auto& ln : st->lanes) {
      auto it = std::find_if(n->lanes.begin(), n->lanes.end(),
                             [&](const lane& l) { return l.name == ln; });
      REQUIRE(it != n->lanes.end());
      CHECK_FALSE(it->held);
      CHECK(lanes_in_use[n->name].insert(ln).second); // never given twice
      CHECK(it->vram_total_bytes >= it->vram_outside_bytes + j.vram_bytes);
    }
    if (j.gpus > 0 && n->vram_cap_bytes)
      CHECK(j.vram_bytes <= *n->vram_cap_bytes);
    // Rule 4 recomputed, against what was planned before it.
    CHECK(m.fits4(*n, j));
    CHECK(st->ram_floor_bytes == m.combined_floor(*n, j));
    m.add_start(*n, j, st->lanes);
  }

  // RAM and CPUs never over-committed, live allocations plus starts.
  for (const auto& n : c.nodes) {
    INFO("node " << n.name);
    u64 ram = 0, cpus = 0;
    for (const auto& h : m.holders[n.name]) {
      ram += h.ram;
      cpus += h.cpus;
    }
    CHECK(ram <= n.mem_total_bytes - n.ram_reserve_bytes);
    if (n.cpus > 0)
      CHECK(cpus <= n.cpus);
  }

  // The reservation: an unpinned queued job that did not start, on a node
  // eligible for it, not delayed by any start of this plan.
  if (p.reserved) {
    REQUIRE(index.count(p.reserved->job) == 1);
    const job_view& rj = q[index[p.reserved->job]];
    CHECK_FALSE(rj.pinned_node.has_value());
    CHECK(ids.count(rj.id) == 0);
    const node_view* rn = m.node(p.reserved->node);
    REQUIRE(rn != nullptr);
    CHECK(m.eligible(*rn, rj));
    // Never for a job that can never fit, there or anywhere.
    CHECK_FALSE(never_fits_on(c, *rn, rj));
    CHECK_FALSE(never_fits(c, rj));
    // At the reserved time, with every start of the plan (each holds until
    // now + est), the job fits by caps and its predicted admission holds:
    // no backfilled start delays it.
    const i64 at = std::max(p.reserved->at_ms, now);
    CHECK(m.fits3(*rn, rj, at).has_value());
    CHECK(m.fits4_at(*rn, rj, at));
    auto e = m.earliest(*rn, rj);
    CHECK(e.has_value());
    if (e)
      CHECK(*e <= at);
    // A reservation at now is one rule 4 would admit now, unless something
    // has overrun its estimate and is counted as ending now.
    bool overrun = false;
    for (const auto& a : c.allocations)
      if (a.node == rn->name && a.est_end_ms <= now)
        overrun = true;
    if (p.reserved->at_ms <= now && !overrun) {
      model before(c, now); // the starts planned before the reserved job
      for (const start* st : starts)
        if (index[st->job] < index[rj.id])
          before.add_start(*before.node(st->node), q[index[st->job]], st->lanes);
      CHECK(before.fits4(*rn, rj));
    }
  }

  // The preemption: a strictly lower level, checkpoint mode, at a lease
  // boundary, no stop in flight.
  if (p.preempt) {
    REQUIRE(index.count(p.preempt->for_job) == 1);
    const job_view& fj = q[index[p.preempt->for_job]];
    CHECK(ids.count(fj.id) == 0);
    auto v = std::find_if(c.allocations.begin(), c.allocations.end(),
                          [&](const allocation_view& a) { return a.job == p.preempt->victim_job; });
    REQUIRE(v != c.allocations.end());
    CHECK(v->node == p.preempt->node);
    CHECK(static_cast<int>(v->priority) > static_cast<int>(fj.priority));
    CHECK(v->checkpoint);
    CHECK(v->at_lease_boundary);
    for (const auto& a : c.allocations)
      if (a.node == v->node)
        CHECK_FALSE(a.stopping);
    if (fj.pinned_node)
      CHECK(*fj.pinned_node == v->node);
    // For the first job that cannot start (a job pinned to an unknown node
    // is not considered at all).
    for (const auto& j : q) {
      if (ids.count(j.id) || (j.pinned_node && !m.node(*j.pinned_node)))
        continue;
      CHECK(j.id == fj.id);
      break;
    }
    // The victim's node is one the job could use, and with every allocation
    // of a lower level than the job gone (and the starts planned before the
    // job still there) the job would fit there.
    const node_view* vn = m.node(v->node);
    REQUIRE(vn != nullptr);
    CHECK(m.eligible(*vn, fj));
    model after(c, now);
    after.holders.clear();
    for (const auto& a : c.allocations)
      if (a.node == v->node && !(a.priority > fj.priority))
        after.holders[a.node].push_back({a.ram_bytes, a.cpus, a.lanes, a.est_end_ms});
    for (const auto& st : p.starts)
      if (st.node == v->node && index[st.job] < index[fj.id]) {
        const auto& sj = q[index[st.job]];
        after.holders[st.node].push_back({sj.ram_bytes, sj.cpus, st.lanes, now + sj.est_ms});
      }
    CHECK(after.fits3(*vn, fj, std::nullopt).has_value());
  }

  // Coverage: a job that waits, fits some empty node by caps, and can never
  // fit by its floor or start minimum (what the old caps-only search reserved).
  {
    const cluster_view bare{c.nodes, {}, c.heartbeat_fresh_ms};
    model empty(bare, now);
    for (const auto& j : q) {
      if (ids.count(j.id) || j.pinned_node || !never_fits(c, j))
        continue;
      bool caps = false;
      for (const auto& n : c.nodes)
        caps = caps || (empty.eligible(n, j) && empty.fits3(n, j, std::nullopt));
      if (caps) {
        ++k.with_admission_never;
        break;
      }
    }
  }

  // Against the reference.
  const plan ref = reference(c, q, now);
  INFO("reference:\n" << describe(ref));
  auto got = started_on(p), want = started_on(ref);
  // Up to the first unpinned job that cannot start, no reservation exists
  // and the pass is plain greedy best fit.
  size_t first_fail = q.size();
  for (size_t i = 0; i < q.size(); ++i)
    if (!want.count(q[i].id) && !q[i].pinned_node) {
      first_fail = i;
      break;
    }
  for (size_t i = 0; i <= first_fail && i < q.size(); ++i) {
    INFO("prefix job " << q[i].id);
    CHECK(got.count(q[i].id) == want.count(q[i].id));
    if (got.count(q[i].id) && want.count(q[i].id))
      CHECK(got[q[i].id] == want[q[i].id]);
  }
  // No reservation can exist: every unpinned job that does not start could
  // never run anywhere. Then the whole plan is greedy best fit.
  bool no_reservation_possible = true;
  for (const auto& j : q)
    if (!want.count(j.id) && !j.pinned_node && !never_fits(c, j))
      no_reservation_possible = false;
  if (no_reservation_possible) {
    ++k.full_compared;
    CHECK_FALSE(p.reserved.has_value());
    CHECK(got == want);
  } else if (s.clean) {
    // No RAM admission rules and no overrun estimates: the reservation and
    // backfill are fully determined by rules 3 and 5.
    ++k.clean_compared;
    CHECK(got == want);
    CHECK(p.reserved.has_value() == ref.reserved.has_value());
    if (p.reserved && ref.reserved) {
      CHECK(p.reserved->job == ref.reserved->job);
      CHECK(p.reserved->at_ms == ref.reserved->at_ms);
      if (unique_reservation_node(c, q, ref))
        CHECK(p.reserved->node == ref.reserved->node);
    }
  }

  // explain() is empty exactly when the job fits somewhere now (cluster as
  // given, no reservation).
  model fresh(c, now);
  for (size_t i = 0; i < q.size() && i < 6; ++i) {
    const auto& j = q[i];
    bool fits_now = false;
    for (const auto& n : c.nodes)
      if (fresh.eligible(n, j) && fresh.fits3(n, j, std::nullopt) && fresh.fits4(n, j))
        fits_now = true;
    INFO("explain " << j.id);
    CHECK(explain(c, j, std::nullopt, std::nullopt, now).empty() == fits_now);
  }
}

} // namespace

TEST_CASE("random clusters and queues keep every placement invariant and match the reference",
          "[placement]") {
  counters k;
  u64 first = 1, count = 3000;
  if (const char* one = std::getenv("CQ_PLACEMENT_SEED")) {
    first = std::strtoull(one, nullptr, 10);
    count = 1;
  } else if (const char* many = std::getenv("CQ_PLACEMENT_SEEDS")) { // a longer soak
    count = std::strtoull(many, nullptr, 10);
  }
  for (u64 seed = first; seed < first + count; ++seed)
    check_scenario(seed, k);
  INFO("plans " << k.plans << ", with starts " << k.with_starts << ", with a reservation "
                << k.with_reservation << ", with a preemption " << k.with_preempt
                << ", fully compared " << k.full_compared << ", clean compared " << k.clean_compared
                << ", with a job only rule 4 can never fit " << k.with_admission_never);
  if (std::getenv("CQ_PLACEMENT_STATS"))
    WARN("plans " << k.plans << ", with starts " << k.with_starts << ", with a reservation "
                  << k.with_reservation << ", with a preemption " << k.with_preempt
                  << ", fully compared " << k.full_compared << ", clean compared "
                  << k.clean_compared << ", with a job only rule 4 can never fit "
                  << k.with_admission_never);
  CHECK(k.plans == static_cast<int>(count));
  if (count > 1) {
    // The generator must reach the interesting cases.
    CHECK(k.with_starts > int(count) / 2);
    CHECK(k.with_reservation > int(count) / 10);
    CHECK(k.with_preempt > 0);
    CHECK(k.full_compared > int(count) / 20);
    CHECK(k.clean_compared > int(count) / 20);
    CHECK(k.with_admission_never > int(count) / 20);
  }
}
