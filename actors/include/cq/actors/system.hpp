#pragma once
// What every coordinator actor shares: its configuration and the context
// (seams, id sources, the handles of the store, scheduler and api). The
// actors themselves are declared in coordinator.hpp, the seams in seams.hpp.

#include "cq/actors/coordinator.hpp"
#include "cq/actors/seams.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace cq::metrics {
class registry;
}

namespace cq::policy {
struct cluster_view;
struct job_view;
struct plan;
using queue_ref = std::span<const job_view* const>; // as policy/placement.hpp
} // namespace cq::policy

namespace cq::actors {

// ---- shared context ---------------------------------------------------------

struct config {
  /// The coordinator's endpoint and CURVE public key (Z85, "" when plain), as
  /// invite codes carry them for a joining node ("" endpoint: codes carry
  /// only their secret).
  std::string invite_endpoint;
  std::string server_key;
  /// An allocation whose start order no connection of its node acknowledged
  /// within this is given up (lost, requeued). Once the node took the order,
  /// the node's reports and heartbeats decide (reconciliation).
  std::chrono::milliseconds start_timeout{30000};
  std::chrono::milliseconds order_timeout{5000}; ///< a node must answer an order within this
  std::chrono::milliseconds order_retry{1000};   ///< re-send of an unacknowledged start/stop/yield
  std::chrono::milliseconds stop_grace{10000};   ///< TERM -> KILL on cancel
  std::int64_t heartbeat_fresh_ms = 5000;        ///< a node is live if it beat within this
  std::uint64_t default_ram_bytes = 1ull << 30;  ///< effective RAM of a job without --ram
  std::int64_t default_est_ms = 3600 * 1000;     ///< effective estimate without --est or profile
  std::int64_t invite_ttl_ms = 24 * 3600 * 1000; ///< invite codes expire after this
  /// An operation id's stored result (SPEC section 9) is kept at least this
  /// long, and at most a 24th of it longer; a retry after that runs anew.
  std::int64_t operation_window_ms = 24 * 3600 * 1000;
  /// A finished job's history (its row, events and allocations) is kept at
  /// least this long after it ended, and at most a 24th of it longer; 0
  /// keeps it forever.
  std::int64_t history_window_ms = 30ll * 24 * 3600 * 1000;
  /// At most this many finished jobs are kept (the oldest to end go first,
  /// in passes a 64th of it apart); 0 keeps any number (ADR 0071).
  std::uint64_t history_jobs = 100'000;
  /// Leases (SPEC section 4): a running allocation may be asked to yield only
  /// at started + k * lease (k >= 1); a job's --lease overrides the default.
  std::int64_t lease_ms = 30 * 60 * 1000;
  /// How long after a lease boundary a placement pass still counts as at it
  /// (a pass runs at each boundary; this only absorbs its latency).
  std::int64_t lease_window_ms = 5000;
  /// A job asked to yield that has not exited within this is stopped (TERM,
  /// stop_grace, KILL) and requeued.
  std::chrono::milliseconds yield_grace{5 * 60 * 1000};
  /// A node with no heartbeat for this long is down: its allocations are unknown.
  std::int64_t node_timeout_ms = 30 * 1000;
  /// An unknown allocation is lost after this (a job's --lost-after overrides
  /// it; 0 = never): the job is requeued, or fails with --no-requeue.
  std::int64_t lost_after_ms = 5 * 60 * 1000;
  /// Blocked notices (SPEC section 8): the head of the queue waiting this long
  /// behind a requested yield, or behind anything else, gets one job_blocked event.
  std::int64_t blocked_after_yield_ms = 15 * 60 * 1000;
  std::int64_t blocked_after_other_ms = 30 * 60 * 1000;
  /// Deliberate defects, one per checker of cq-sim, so that a test can show
  /// the checker finds it (tests/sim). cq-coordinator has no way to set them.
  struct defect_flags {
    bool ignore_fault_latch = false;        ///< placement ignores a latched GPU fault
    bool ack_submit_before_commit = false;  ///< a submit is acknowledged before it is durable
    bool forget_lanes = false;              ///< placement ignores lanes live allocations hold
    bool forget_ram = false;                ///< placement ignores RAM live allocations hold
    bool requeue_live_on_recovery = false;  ///< recovery queues a job whose allocation lives
    bool forget_queued_on_recovery = false; ///< recovery drops queued jobs from listings
    bool drop_exit_reports = false;         ///< exit reports are acknowledged and ignored
    bool starve_low = false;                ///< placement never considers low-priority jobs
    bool reconcile_by_arrival = false;      ///< reconciliation ignores the node's clock
    bool ignore_client_job_ids = false;     ///< a submit's job id is ignored (a fresh id each time)
    bool report_success_always = false;     ///< every exit that ends a job records it succeeded
    bool rerun_failed_on_recovery = false;  ///< recovery queues jobs that failed by exit code again
    bool lanes_from_zero = false;          ///< a start order names lanes gpu0.. not the placed ones
    bool forget_cpus = false;              ///< a placed allocation's CPUs are not held
    bool forget_vram = false;              ///< placement ignores a job's VRAM per lane
    bool ignore_cancel = false;            ///< a cancel is acknowledged and not carried out
    bool refuse_late_exit_reports = false; ///< a re-sent exit report of an ended job is refused
    bool forget_replays = false;           ///< a retried submit whose job exists makes a second job
    bool store_sync_normal = false;  ///< the store commits without syncing (cq-sim opens it so)
    bool ignore_ownership = false;   ///< "own jobs only" permissions let anyone act on any job
    bool serve_newest_first = false; ///< a placement pass serves its queue back to front
    bool ignore_levels = false;      ///< the queue orders jobs by rank alone, not level first
  };
  defect_flags defects;
};

/// Seams and handles every coordinator actor shares. Built once by
/// spawn_coordinator(); immutable afterwards except the handles it fills.
struct context {
  config cfg;
  /// Wall-clock anchor: now_ms() = epoch_ms + (actor clock now - steady anchor).
  std::int64_t epoch_ms = 0;
  std::chrono::steady_clock::time_point steady{};
  /// Fresh unique ids (UUIDs in production, a counter in tests).
  std::function<std::string()> new_id;
  /// Fresh allocation ids, given the wall clock's now: time-ordered UUIDs in
  /// production, so the store's index of them grows at its end
  /// (docs/adr/0046); a counter in tests.
  std::function<std::string(std::int64_t now_ms)> new_allocation_id;
  /// Fresh secrets (tokens, invite codes).
  std::function<std::string()> new_token;
  std::function<std::string()> new_invite_code;
  /// Fresh order ids: unguessable in production (a reply is matched by its id
  /// and its connection), a counter in tests.
  std::function<std::uint64_t()> new_order_id;
  /// Makes the link for a node; `node` is the node actor the link answers.
  std::function<node_link_actor(caf::actor_system&, const std::string& name, node_actor node)>
      make_link;
  /// Called when the state can no longer be trusted (the database file was
  /// deleted or replaced, a commit failed in a way a retry cannot mend).
  /// Production: log and end the process (crash-only, ADR 0003); tests record it.
  std::function<void(const std::string& why)> fatal;
  /// Replaces the board file with this JSON (--board); empty: no board.
  std::function<void(const std::string& json)> write_board;
  /// Called once recovery has rebuilt the read model (the coordinator's
  /// bulk load is over); may be empty.
  std::function<void()> recovered;
  /// Counters and histograms for `/metrics` (coordinator/observe.hpp); null:
  /// nothing is counted (tests, cq-sim).
  std::shared_ptr<metrics::registry> metrics;
  /// Sees every placement pass: its cluster, its queue in serving order and
  /// its plan (cq-sim's serving_order checker); production has none.
  std::function<void(const policy::cluster_view&, policy::queue_ref, const policy::plan&)>
      observe_pass;
  store_actor store;
  scheduler_actor scheduler;
  api_actor api;
};
using context_ptr = std::shared_ptr<context>;

} // namespace cq::actors
