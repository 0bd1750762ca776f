#pragma once
// Every actor of the coordinator, its messages and atoms.
//
//   gateway thread --anon_send--> bridge --request--> api
//   api ---------> store (group commit), scheduler, job actors, node actors
//   scheduler ----> job actor (place) --spawns--> allocation actor
//   allocation ---> node actor --orders--> node link (ZeroMQ, or simulated)
//   node (wire) --> bridge --> api --> node actor --> allocation actor --> job actor
//
// Requests, reports and replies to orders from one node connection take the
// same path (gateway thread, bridge, api, node actor), each hop FIFO, so the
// node actor sees them in the order the node sent them: a heartbeat it
// handles after the acknowledgement of a start order was sent after the node
// took that order (the base of reconciliation, see node_actor.cpp).
//
// Actors are untyped event-based actors except the node link, the seam where
// production (ZeroMQ) and tests (a simulated node) differ, which is typed.
// Messages stay inside one process (the wire is msgpack, see bus/), so message
// types are allowed without CAF serialization (CAF_ALLOW_UNSAFE_MESSAGE_TYPE).
//
// Invariants:
//  1. A job has at most one live allocation actor; the job actor owns the
//     job's state and is the only writer of its rows.
//  2. A reply that acknowledges a change is sent only after the store actor
//     committed it.
//  3. Timers use the actor clock (delayed_send), so tests control time.

#include "cq/bus/protocol.hpp"
#include "cq/records.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <functional>
#include <memory>

namespace cq::actors {

// ---- atoms ------------------------------------------------------------------
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using dequeue_atom = caf::atom_constant<caf::atom("dequeue")>;
using node_atom = caf::atom_constant<caf::atom("node")>;
using reserve_atom = caf::atom_constant<caf::atom("reserve")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using pass_atom = caf::atom_constant<caf::atom("pass")>;
using place_atom = caf::atom_constant<caf::atom("place")>;
using started_atom = caf::atom_constant<caf::atom("started")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using approve_atom = caf::atom_constant<caf::atom("approve")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using detach_atom = caf::atom_constant<caf::atom("detach")>;
using peer_atom = caf::atom_constant<caf::atom("peer")>;
using job_atom = caf::atom_constant<caf::atom("job")>;
using alloc_atom = caf::atom_constant<caf::atom("alloc")>;
using reply_atom = caf::atom_constant<caf::atom("reply")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using explain_atom = caf::atom_constant<caf::atom("explain")>;
using dep_atom = caf::atom_constant<caf::atom("dep")>;
using move_atom = caf::atom_constant<caf::atom("move")>;
using measure_atom = caf::atom_constant<caf::atom("measure")>;
using resend_atom = caf::atom_constant<caf::atom("resend")>;
using order_atom = caf::atom_constant<caf::atom("order")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using missing_atom = caf::atom_constant<caf::atom("missing")>;
using yield_atom = caf::atom_constant<caf::atom("yield")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using check_atom = caf::atom_constant<caf::atom("check")>;

// ---- messages ---------------------------------------------------------------

/// The result of a commit: empty error = committed.
struct commit_result {
  std::string error;
};

/// A decoded, validated request as it reaches the api actor.
struct api_request {
  std::string peer; ///< routing id of the sender (node replies go back there)
  std::uint64_t id = 0;
  std::string token;
  bus::coordinator_request body;
};

/// The api actor's answer; the bridge encodes it for the wire.
struct api_reply {
  std::variant<bus::error_info, bus::submit_rep, bus::ls_rep, bus::show_rep, bus::logs_rep,
               bus::cancel_rep, bus::node_invite_rep, bus::node_rep, bus::node_ls_rep,
               bus::node_join_rep, bus::heartbeat_rep, bus::report_rep, bus::move_rep,
               bus::profile_ls_rep>
      body;
};

/// A queued, startable job as the scheduler sees it. Serving order is
/// (level, rank, seq).
struct queue_entry {
  std::string job;
  std::uint64_t seq = 0;
  std::uint8_t level = 1; ///< 0 high, 1 medium, 2 low
  std::int64_t rank = 0;
  std::uint64_t ram_bytes = 0; ///< effective RAM
  std::uint64_t vram_bytes = 0;
  std::uint64_t gpus = 0;
  std::uint64_t cpus = 0;
  std::uint64_t ram_floor_bytes = 0;
  std::uint64_t ram_start_min_bytes = 0;
  std::int64_t est_ms = 0; ///< effective estimate
  std::optional<std::string> pinned_node;
  bool checkpoint = false; ///< preempt mode checkpoint
  caf::actor handle;       ///< the job actor
};

/// A live allocation's hold on a node's resources, as the scheduler sees it.
struct alloc_entry {
  std::string job;
  std::string allocation;
  std::string node;
  std::uint8_t level = 1;
  bool checkpoint = false;
  bool stopping = false;
  std::uint64_t ram_bytes = 0;
  std::uint64_t ram_floor_bytes = 0;
  std::uint64_t cpus = 0;
  std::uint64_t vram_bytes = 0;
  bus::string_list lanes;
  std::int64_t est_end_ms = 0;
};

/// What the scheduler knows of a node; sent by the node actor on every change.
struct node_status {
  std::string name;
  bool approved = false;
  std::int64_t last_heartbeat_ms = 0;
  bus::node_info info;                 ///< telemetry and node configuration from the last heartbeat
  caf::actor handle;                   ///< the node actor
  std::vector<bus::alloc_usage> usage; ///< what each running allocation uses now
  /// No GPU placements until the next heartbeat: the node reported a GPU
  /// refusal or fault stop that its telemetry may not show yet.
  bool gpu_blocked = false;
};

/// What a finished allocation measured, for its job's profile.
struct measurement {
  std::string profile;
  std::optional<std::uint64_t> peak_ram_bytes;
  std::optional<std::uint64_t> peak_vram_bytes;
  std::uint64_t wall_ms = 0;
};

/// A node's answer to an order (its acknowledgement, or its error), or the
/// node actor's verdict that none came in time (errc::unavailable).
struct order_reply {
  bool ok = false;                     ///< the node took the order
  std::optional<bus::log_chunk> chunk; ///< read_log: the data
  bus::error_info error;               ///< when !ok
};

/// A reply frame from a node connection, as the gateway decoded it: the
/// answer to order `id`. Accepted only by the node actor that sent that order,
/// and only when it comes from the connection the order went to.
struct node_reply {
  std::string peer; ///< routing id of the connection it came from
  std::uint64_t id = 0;
  order_reply reply;
};

/// What the store keeps of a job that is not held in memory: its command and
/// environment, read when an allocation needs its start order.
struct job_payload {
  bus::string_list argv;
  bus::env_map env;
};

// ---- seams --------------------------------------------------------------------
// Handles that production and the simulator (sim/) implement differently.

/// The store: the only actor that touches SQLite (store_actor.cpp). The
/// simulator wraps it to fail chosen commits.
using store_actor = caf::typed_actor<
    /// Commits `batch` in one transaction (grouped with whatever else arrived
    /// meanwhile). The result's error is empty only once the batch is durable;
    /// otherwise nothing of the batch was committed.
    caf::replies_to<commit_atom, std::shared_ptr<const change_batch>>::with<commit_result>,
    /// Reads the command and environment of `job` (kept only in the store).
    /// Fails when the row is missing or unreadable.
    caf::replies_to<load_atom, std::string>::with<job_payload>,
    /// INTERNAL: commits what arrived since the last flush.
    caf::reacts_to<flush_atom>,
    /// INTERNAL: checks that the database file is still the one opened.
    caf::reacts_to<check_atom>>;

/// Carries orders to one node. Production: a frame through the gateway to the
/// connection `peer`. Tests and the simulator: a simulated node, which answers
/// the node actor with (reply_atom, node_reply) as the gateway path would.
using node_link_actor = caf::typed_actor<
    /// INTERNAL: order `id` for the connection `peer`; fire and forget (the
    /// node actor waits for the answer, with its own deadline).
    caf::reacts_to<order_atom, std::uint64_t, std::string, bus::node_order>>;

// ---- shared context ---------------------------------------------------------

struct config {
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
  /// Fresh secrets (tokens, invite codes).
  std::function<std::string()> new_token;
  std::function<std::string()> new_invite_code;
  /// Fresh order ids: unguessable in production (a reply is matched by its id
  /// and its connection), a counter in tests.
  std::function<std::uint64_t()> new_order_id;
  /// Makes the link for a node; `node` is the node actor the link answers.
  std::function<node_link_actor(caf::actor_system&, const std::string& name, caf::actor node)>
      make_link;
  /// Called when the state can no longer be trusted (the database file was
  /// deleted or replaced, a commit failed in a way a retry cannot mend).
  /// Production: log and end the process (crash-only, ADR 0003); tests record it.
  std::function<void(const std::string& why)> fatal;
  store_actor store;
  caf::actor scheduler, api;
};
using context_ptr = std::shared_ptr<context>;

} // namespace cq::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::commit_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::api_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::api_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::queue_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::node_status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::alloc_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::measurement)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::string_list)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::move_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::order_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::node_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::job_payload)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::node_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::optional<cq::actors::job_payload>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const cq::change_batch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::start_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::stop_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::read_log_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::release_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::clear_fault_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::yield_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::report_req)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::heartbeat_req)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::report_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::heartbeat_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::job_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::allocation_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::cancel_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::node_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::error_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::job_row)
