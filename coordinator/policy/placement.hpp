#pragma once
// Placement policy: pure functions over values. No CAF, no I/O, no clock.
//
// place() takes the cluster (nodes and live allocations) and the startable
// queue in serving order, and returns a plan: which jobs start where (and on
// which GPU lanes), the one backfill reservation, and the preemption it would
// ask for. explain() says in words why one queued job does not start.
//
// Rules (SPEC section 4, the compute-queue seed's RAM admission):
//  1. Serving order is the order of `queue` (level, then position); a job that
//     cannot start does not stop later jobs from starting, except through the
//     reservation of rule 5.
//  2. A node is eligible when approved, enabled, not held, not down, not
//     fencing (stopping given-away work), and its heartbeat is fresh; a GPU job also needs no fault
//     latch and no busy lock probe. A pinned job considers only its node.
//  3. Fit: effective RAM <= allocatable (total - node reserve) minus the caps
//     of live allocations and of starts planned earlier in the pass; CPUs
//     likewise; `gpus` free lanes (not held, not used by an allocation), each
//     with VRAM total minus outside use >= the job's VRAM, and the job's VRAM
//     within the node's VRAM cap.
//  4. RAM admission (only when the combined floor or the job's start minimum
//     is nonzero): available = MemAvailable - pending growth of live
//     allocations (cap - current use) - caps planned earlier in this pass on
//     the node. Combined floor = max(node floor, job floor, floors of every
//     live allocation on the node, stopping ones included, and of starts
//     planned earlier in this pass there). Requires available - cap >=
//     combined floor and available >= start minimum. A job can never fit on
//     a node (whatever ends there) when its cap + max(node floor, job floor)
//     or its start minimum exceeds the node's memory, and likewise when rule
//     3 fails on the empty node (cap over allocatable, more CPUs or GPUs than
//     the node has, VRAM over the node's cap or over too many lanes).
//  5. EASY backfill: the first unpinned job that cannot start now but could
//     run on some node once running allocations end (by their estimates) gets
//     a reservation at the earliest such time. "Could run" is rule 3 on what
//     is free then and rule 4 on a prediction: available then = min(node
//     memory, available now (rule 4) + caps of the allocations and planned
//     starts that have ended by then), and the combined floor counts the
//     floors of those still running. The prediction assumes outside use stays
//     as it is and running allocations give nothing back, so no reservation
//     is made at a time where admission is known to fail: a job refused by
//     rule 4 now is never reserved now, and a job that can never fit
//     anywhere, or whose admission no ending makes plausible, gets none.
//     Later jobs start on that node only if they end before it, or use only
//     resources the reserved job will not need then (caps, CPUs and lanes,
//     and leaving the predicted admission of the reserved job intact, their
//     own floors counted). The reserved job's lanes are fixed (the first free
//     ones at the reserved time), so a later job never takes them, even where
//     the reserved job could have used others: cautious, and simple to check.
//  6. Node choice: best fit on the scarcest resource. A GPU job takes the node
//     with the fewest free lanes left, then the least RAM left; a CPU job
//     prefers nodes with fewer free lanes (keeping GPU nodes free), then the
//     least RAM left. Ties go to the node listed first. (docs/adr/0007)
//  7. Preemption choice: for the first job that cannot start, a running
//     allocation of a strictly lower level with mode checkpoint, at a lease
//     boundary, on a node with no stop (or yield) in flight, whose end (with others on that node of
//     lower levels) would let the job fit. At most one victim per pass.
// Invariants of a plan: no lane is given to two allocations, no node's RAM or
// CPUs are over-committed, and no backfilled start delays the reservation.

#include "cq/records.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cq::policy {

enum class level : std::uint8_t { high = 0, medium = 1, low = 2 };
std::optional<level> parse_level(std::string_view s);
std::string_view to_string(level l);

struct lane {
  std::string name; ///< gpu0, gpu1, ...
  std::uint64_t vram_total_bytes = 0;
  std::uint64_t vram_outside_bytes = 0; ///< used by processes that are not cq's
  bool held = false;                    ///< in a hold (cleanup unconfirmed)
  std::string hold;                     ///< that hold's id, for the words
  bool operator==(const lane&) const = default;
};

struct node_view {
  std::string name;
  bool approved = false;
  bool enabled = true;
  /// A disabled node with a diagnostic grant takes this one job alone.
  std::string grant_job;
  /// Identities whose jobs it runs (run-as mapping); absent: every identity.
  std::optional<std::vector<std::string>> run_as;
  bool held = false;                  ///< whole node in a hold
  std::string hold;                   ///< that hold's id, for the words
  bool down = false;                  ///< missed heartbeats for the node timeout
  std::size_t fenced = 0;             ///< given-away allocations it still lists: no new work
  bool gpu_fault = false;             ///< kernel GPU fault latched: no GPU jobs
  bool gpu_probe_busy = false;        ///< an outside process holds a GPU lock probe: no GPU jobs
  std::int64_t last_heartbeat_ms = 0; ///< 0 = never
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t mem_available_bytes = 0;
  std::uint64_t ram_reserve_bytes = 0; ///< kept back from jobs
  std::uint64_t ram_floor_bytes = 0;   ///< node's MemAvailable floor
  std::uint64_t cpus = 0;              ///< 0 = CPUs are not accounted
  std::optional<std::uint64_t> vram_cap_bytes;
  std::vector<lane> lanes;
  bool operator==(const node_view&) const = default;
};

/// A live allocation: it holds its resources until cleanup has finished.
/// A live allocation: its job's resources (records.hpp: ram_bytes is the
/// effective cap reserved; ram_floor_bytes the floor its placement imposes)
/// and what it holds now.
struct allocation_view : job_resources {
  std::string job;
  std::string node;
  level priority = level::medium;
  bool checkpoint = false;          ///< preempt mode checkpoint: may be asked to yield
  bool stopping = false;            ///< a yield or cancel is in flight
  bool at_lease_boundary = false;   ///< rule 7: only now may it be asked to yield
  std::uint64_t ram_used_bytes = 0; ///< current use (pending growth = cap - use)
  std::vector<std::string> lanes;
  std::int64_t est_end_ms = 0; ///< start + effective estimate
  /// Its node's index in cluster_view::nodes when the view's builder knows
  /// it (node names are unique): place() checks the name there before it
  /// searches. Out of range: it searches.
  std::size_t node_at = static_cast<std::size_t>(-1);
};

/// A queued, startable job: its resources (records.hpp) and its level.
struct job_view : job_resources {
  std::string id;
  level priority = level::medium;
};

struct cluster_view {
  std::vector<node_view> nodes;
  std::vector<allocation_view> allocations;
  std::int64_t heartbeat_fresh_ms = 5000;
};

struct start {
  std::string job;
  std::string node;
  std::vector<std::string> lanes;
  std::uint64_t ram_floor_bytes = 0; ///< combined floor, for the node's pre-launch check
};

struct reservation {
  std::string job;
  std::string node;
  std::int64_t at_ms = 0;
  /// at_ms waits on a running job whose estimate is the default (shadow::
  /// guessed): explain() says "once" rather than count down to it.
  bool guessed = false;
};

struct preemption {
  std::string victim_job;
  std::string node;
  std::string for_job;
};

struct plan {
  std::vector<start> starts;
  std::optional<reservation> reserved;
  std::optional<preemption> preempt;
};

/// Rule 2's liveness: a heartbeat was seen, within `fresh_ms` of `now_ms`.
bool heartbeat_fresh(std::int64_t last_heartbeat_ms, std::int64_t fresh_ms, std::int64_t now_ms);

/// The startable jobs in serving order, as a pass reads them: where their
/// holder keeps them (the scheduler's queue), not copied for the pass.
using queue_ref = std::span<const job_view* const>;

/// One placement pass. `queue` holds startable jobs in serving order.
plan place(const cluster_view& cluster, queue_ref queue, std::int64_t now_ms);
/// The same over jobs held in a vector (tests, cq-bench).
plan place(const cluster_view& cluster, const std::vector<job_view>& queue, std::int64_t now_ms);

/// What a node's report (cq node ls's node_info) says of its capacity: name,
/// enabled, run-as, memory, CPUs, the VRAM cap and its lanes (totals and
/// what outside processes use; holds mark the node or lanes held). Whether
/// it is approved, fresh, down or faulted is the caller's to add.
node_view capacity_of(const bus::node_info& n);

/// Whether no node could ever run `job`, empty or not: for each approved node
/// whose capacity is known, why it never could (with the figures); empty
/// when one could, when an approved node has not reported its capacity yet,
/// or when no node is approved (nothing is known: the job waits). A pin to a
/// node that does not exist is a reason of its own. For submit's refusal.
std::vector<std::string> never_runnable(const std::vector<node_view>& nodes, const job_view& job);
/// The same over `count` nodes whose views `view_at` makes one at a time, as
/// they are needed: submit asks it of every job, and the first node that
/// could run the job answers it.
std::vector<std::string> never_runnable(std::size_t count,
                                        const std::function<node_view(std::size_t)>& view_at,
                                        const job_view& job);

/// Why `job` does not start on the cluster as it is (after the last pass):
/// for each node the first rule it fails, with the figures; or the
/// reservation it waits for. Empty when the job fits somewhere now.
/// `reserved_job` is the job holding `reserved`, so a job that would only use
/// what the reservation leaves over is not said to delay it.
std::vector<std::string> explain(const cluster_view& cluster, const job_view& job,
                                 const std::optional<reservation>& reserved,
                                 const std::optional<job_view>& reserved_job, std::int64_t now_ms);

} // namespace cq::policy
