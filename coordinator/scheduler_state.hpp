#pragma once
// The scheduler's state (coordinator/scheduler_actor.cpp, whose header lists
// the invariants named here) and the view of it a placement pass reads,
// with what counts as a node's news (scheduler_view.cpp). Internal to the
// scheduler's two files.

#include "cq/gap_vector.hpp"
#include "internal.hpp"
#include "policy/placement.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace cq::coord::sched {

using namespace cq::actors;

using queue_key = std::tuple<std::uint8_t, std::int64_t, std::uint64_t>; ///< level, rank, seq

/// A queued job as the scheduler keeps it: the view a pass reads where it
/// is (its id is the job's, its priority the level), and what the scheduler
/// needs besides.
struct queued_job : policy::job_view {
  queue_key key; ///< its place in the serving order (its rank and seq in it)
  bool checkpoint = false;
  job_actor handle; ///< null for a queued job that has no actor yet
  std::uint8_t level() const { return static_cast<std::uint8_t>(priority); }
};

struct scheduler_state {
  context_ptr ctx;
  std::map<queue_key, queued_job> queue;             ///< startable queued jobs, serving order
  std::unordered_map<std::string, queue_key> key_of; ///< job id -> its key in `queue`
  std::map<std::string, node_status> nodes;          ///< every known node
  /// `nodes` by name in a hash: a pass's view finds each allocation's node
  /// here (`nodes` never erases, so a map node's address stays valid).
  std::unordered_map<std::string, const node_status*> node_named;
  /// Invariant 6: the pass's view, its nodes kept up to date as statuses and
  /// grants arrive (in `nodes` order); its allocations are rebuilt per pass.
  policy::cluster_view view;
  /// `queue`'s jobs in its order, kept beside it as it changes: what a pass
  /// reads. Rebuilt per pass, copies of 100,000 views took 4 ms and 26 MB,
  /// and a walk of the map alone 6 ms (its nodes are far apart). A start
  /// near the front moves the few pointers before it, not all after it.
  gap_vector<const policy::job_view*> order;
  std::map<std::string, std::string> grants; ///< disabled node -> the one job its grant lets start
  std::unordered_map<std::string, alloc_entry> allocs; ///< live allocations by job id
  std::optional<policy::reservation> reserved;         ///< from the last pass
  std::optional<policy::preemption> preempt;           ///< from the last pass
  bool pass_pending = false;                           ///< a pass_atom is in our own mailbox
  /// Invariant 3: per job, the latest lease boundary a pass has considered.
  std::unordered_map<std::string, std::int64_t> considered;
  std::unordered_map<std::string, std::string> asked; ///< victim job -> the job it yields for
  std::optional<std::int64_t> timer_at;               ///< when the next lease_atom is due
  /// Invariant 5: lost allocations by id, with the node's heartbeat count
  /// when they were lost.
  std::unordered_map<std::string, std::pair<alloc_entry, std::uint64_t>> ghosts;
  /// Whether `allocs` or `ghosts` changed since the pass's view last copied
  /// them: until then a pass refreshes only what time and heartbeats move.
  bool allocs_changed = true;
  /// Per allocation view, its node's status (null: not known when looked
  /// up). `nodes` never erases, so a map node's address stays valid.
  std::vector<const node_status*> view_nodes;
  /// Invariant 4: the current blocking episode.
  std::string blocked_job;
  std::int64_t blocked_since_ms = 0;
  bool blocked_told = false;
  static inline const char* name = "cq.scheduler";
};

/// The latest lease boundary of `a` at `now` (0 before the first one).
std::int64_t last_boundary(const alloc_entry& a, std::int64_t now);

/// Invariant 3: at a boundary no pass has considered yet, within the window.
bool at_boundary(const scheduler_state& st, const alloc_entry& a, std::int64_t now);

/// Invariant 6 after node `name` changed: its view replaced in place, or
/// every view rebuilt when the node is new (positions follow `nodes`).
/// Returns whether the view changed in more than its figures.
bool refresh_node_view(scheduler_state& st, const std::string& name);

/// The pass's view: the nodes as kept (invariant 6), the live allocations
/// and ghosts as of `now`.
const policy::cluster_view& cluster_of(scheduler_state& st, std::int64_t now);

/// Whether status `next` of a known node can change what a pass decides
/// beyond its view: the allocations it lists use of, or a heartbeat that
/// makes a node fresh again. A new node always can.
bool changes_placement(const scheduler_state& st, const node_status& kept, const node_status& next,
                       std::int64_t now);

/// Whether status `next` of a known node leaves more room for a start than
/// `kept`, its previous one, in the figures its telemetry moves (ADR 0063).
bool more_room(const scheduler_state& st, const node_status& kept, const node_status& next);

} // namespace cq::coord::sched
