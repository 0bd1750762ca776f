#pragma once
// What placement.cpp (the pass) and explain.cpp (the words for a job that
// waits) share (policy-internal): a node's state during a pass, the
// prepared cluster, and the reservation search of rule 5.

#include "placement.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cq::policy::detail {

using u64 = std::uint64_t;
using i64 = std::int64_t;
inline constexpr u64 unlimited = std::numeric_limits<u64>::max();

/// The mutable state of one node during a pass.
struct node_state {
  const node_view* view = nullptr;
  bool eligible = false;     ///< rule 2, GPU fault aside
  u64 free_ram = 0;          ///< allocatable minus caps of live and planned allocations
  u64 free_cpus = unlimited; ///< likewise (unlimited when the node does not account CPUs)
  i64 available = 0;         ///< MemAvailable minus pending growth and planned caps (may be < 0)
  u64 floor = 0;             ///< max of node floor and floors of live/planned allocations
  std::vector<bool> lane_busy;
  std::size_t reservations = 0; ///< live + planned allocations (for explanations)
  std::size_t free_lanes = 0;
};

/// The nodes' states, and their indexes by name (sorted: a lookup is a
/// binary search over views, with no string copied).
struct prepared {
  std::vector<node_state> nodes;
  std::vector<std::pair<std::string_view, std::size_t>> by_name;
  /// Per allocation of the cluster (in its order): its node's index (none
  /// for a node not in the cluster) and its lanes' indexes there.
  std::vector<std::optional<std::size_t>> alloc_node;
  std::vector<std::vector<std::size_t>> alloc_lanes;

  std::optional<std::size_t> find(std::string_view name) const {
    auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                               [](auto& e, std::string_view n) { return e.first < n; });
    if (it == by_name.end() || it->first != name)
      return std::nullopt;
    return it->second;
  }
};

/// Fills `p` for a pass over `c`. Every field is reset; the buffers keep
/// their capacity, so a pass that reuses `p` allocates nothing once the
/// cluster has stopped growing (place() keeps one per thread).
void prepare(const cluster_view& c, std::int64_t now, prepared& p);
prepared prepare(const cluster_view& c, std::int64_t now);

/// An allocation as seen by the reservation search: what it frees and when.
struct release {
  std::int64_t at_ms;
  u64 ram, cpus;
  std::vector<std::size_t> lanes;
  u64 floor = 0;      ///< its RAM floor, which counts while it runs
  bool guess = false; ///< at_ms is by the default estimate (job_resources::est_default)
};

/// Live allocation `k` of `c` as the reservation search sees it, into `out`
/// (its lane buffer reused): it ends by its estimate (or now, when overdue).
void release_of(const cluster_view& c, const prepared& p, std::size_t k, std::int64_t now,
                release& out);

/// What is left on a node at a reserved time beyond what the reserved job
/// needs (earliest_fit).
struct shadow {
  std::int64_t at_ms = 0;
  u64 extra_ram = 0, extra_cpus = 0;
  std::vector<bool> extra_lane; ///< lanes free at at_ms that j does not take
  i64 available = 0; ///< predicted available at at_ms before the cap to the node's memory,
                     ///< less caps of backfilled starts still running then
  u64 floor = 0; ///< node floor and floors of allocations running at at_ms (j's own not included)
  /// at_ms waits on an allocation whose end is by the default estimate: a
  /// guess, which explain() words as one.
  bool guessed = false;
};

/// Earliest time `j` fits on node `s` if the given allocations end by their
/// estimates: caps, CPUs and lanes as rule 3, and rule 4 against the
/// predicted() available RAM and the floors of allocations still running
/// then. Returns the time and what is left over then beyond what `j` needs.
std::optional<shadow> earliest_fit(const node_state& s, const job_view& j,
                                   std::span<const release> releases, std::int64_t now);

/// Rule 5: may `j`, starting now on the reserved node and still running at
/// the reserved time, take RAM and CPUs there without delaying `reserved`?
/// (Lanes are checked by the caller: `j` may take only extra_lane ones.)
bool leaves_room(const shadow& sh, const node_view& n, const job_view& reserved, const job_view& j);

/// Rule 4's test: `available` is MemAvailable after reservations (negative when
/// pending growth and planned caps exceed it), `floor` the combined floor.
bool admits(i64 available, u64 floor, const job_view& j);

bool fresh(const node_view& n, const cluster_view& c, std::int64_t now);

/// Whether lane `i` of `n` can take `j` (free of holds, VRAM enough).
bool lane_fits(const node_view& n, std::size_t i, const job_view& j);

/// Available RAM as shown to a person: a deficit reads as none.
std::string gib_available(i64 bytes);

/// Per array (group), how many of its tasks hold allocations.
std::unordered_map<std::string, u64> group_counts(const cluster_view& c);

} // namespace cq::policy::detail
