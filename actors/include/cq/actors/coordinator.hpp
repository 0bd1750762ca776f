#pragma once
// Every actor of the coordinator as a typed interface, with a comment per
// handler; messages only an actor sends itself are marked INTERNAL (Tenzir's
// actors.hpp is the model). The atoms and plain messages are in messages.hpp,
// the seams (store, node link) in seams.hpp.
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
// Every handle is typed, so a message nobody handles fails to compile
// (docs/adr/0017, which supersedes 0004).
//
// Invariants:
//  1. A job has at most one live allocation actor; the job actor owns the
//     job's state and is the only writer of its rows.
//  2. A reply that acknowledges a change is sent only after the store actor
//     committed it.
//  3. Timers use the actor clock (delayed_send), so tests control time.

#include "cq/actors/messages.hpp"

namespace cq::coord {
struct snapshot; // store/store.hpp: what recovery loads
} // namespace cq::coord

namespace cq::actors {

/// One live allocation of a job (allocation_actor.cpp), a child of its job
/// actor. It re-sends its start, stop and yield orders until the node takes
/// them (orders are state, ADR 0013).
using allocation_actor = caf::typed_actor<
    /// From the node actor: the node's report about this allocation
    /// (started|exited). Answered once the job actor committed what it means.
    caf::replies_to<report_atom, bus::report_req>::with<bus::report_rep>,
    /// From the node actor, which forwards the start deadline this actor armed
    /// there: no connection of the node took the start within start_timeout.
    caf::reacts_to<timeout_atom>,
    /// From the node actor: an acknowledged allocation the node's heartbeat
    /// no longer lists (reconciliation): it is lost.
    caf::reacts_to<missing_atom>,
    /// From the node actor: the node's connection changed; re-send now what is
    /// not acknowledged.
    caf::reacts_to<resend_atom>,
    /// From the node actor: the node is down (no heartbeat for node_timeout).
    caf::reacts_to<down_atom>,
    /// From the node actor: a heartbeat of the node lists it again.
    caf::reacts_to<found_atom>,
    /// From the job actor: it has been unknown for the job's lost-after (`why`).
    caf::reacts_to<lost_atom, std::string>,
    /// INTERNAL: the periodic re-send (order_retry).
    caf::reacts_to<retry_atom>,
    /// From the job actor: a stop is committed; send it until the node takes it.
    caf::reacts_to<stop_atom>,
    /// From the job actor: a yield request is committed.
    caf::reacts_to<yield_atom>>;

/// One node (node_actor.cpp): owns its connection, its orders in flight and
/// their deadlines, and reconciles heartbeats with the allocations it holds.
using node_actor = caf::typed_actor<
    /// From the api: a heartbeat from connection `peer`.
    caf::replies_to<beat_atom, std::string, bus::heartbeat_req>::with<api_reply>,
    /// From the api: a report from connection `peer`, handed to its allocation.
    caf::replies_to<report_atom, std::string, bus::report_req>::with<api_reply>,
    /// From the api (the bridge's path): the node's answer to an order.
    caf::reacts_to<reply_atom, node_reply>,
    /// INTERNAL: order `id` got no answer within order_timeout.
    caf::reacts_to<timeout_atom, std::uint64_t>,
    /// From the api: the node's identity was replaced; forget its connection.
    caf::reacts_to<peer_atom>,
    /// From the api: the node was approved (true) or is pending.
    caf::reacts_to<approve_atom, bool>,
    /// From the api: the node was enabled (true) or disabled, and why.
    caf::reacts_to<enable_atom, bool, std::string>,
    /// INTERNAL: node_timeout may have passed without a heartbeat.
    caf::reacts_to<down_atom>,
    /// From the api's recovery, before any heartbeat it forwards: allocation
    /// `id` is live here by the store, and its actor will attach.
    caf::reacts_to<expect_atom, std::string>,
    /// From an allocation actor: it lives on this node (`known`: the node took it).
    caf::reacts_to<attach_atom, std::string, allocation_actor, bool>,
    /// From an allocation actor: it ended.
    /// `exited`: its exit report was committed (the node may list it a while
    /// longer, cleaning up); else it was given up (lost, never started).
    caf::reacts_to<detach_atom, std::string, bool>,
    /// The start deadline allocation `id` armed (delayed, without a sender):
    /// forwarded to it while it is attached, dropped once it has ended.
    caf::reacts_to<timeout_atom, std::string>,
    /// Orders, from allocation actors and the api. Each gets exactly one
    /// answer: the node's, or errc::unavailable at the node actor's deadline.
    caf::replies_to<bus::start_order>::with<order_reply>,
    caf::replies_to<bus::stop_order>::with<order_reply>,
    caf::replies_to<bus::yield_order>::with<order_reply>,
    caf::replies_to<bus::read_log_order>::with<order_reply>,
    caf::replies_to<bus::terminal_order>::with<order_reply>,
    caf::replies_to<bus::release_order>::with<order_reply>,
    caf::replies_to<bus::clear_fault_order>::with<order_reply>,
    /// From the api: jobs it forgot had these allocations here; sent once,
    /// not waited for (a node that misses it keeps them its own window).
    caf::reacts_to<bus::forget_order>,
    /// From an allocation actor about to give `allocation` up: stop it with no
    /// grace, nobody waiting; answered once the node takes no new work while
    /// its latest heartbeat lists it (so the job's next attempt cannot land
    /// beside it).
    caf::replies_to<stop_atom, std::string>::with<bool>>;

/// One non-terminal job (job_actor.cpp): the only writer of its rows and of
/// its event stream.
using job_actor = caf::typed_actor<
    /// From the scheduler: start on node `name` (its actor), with `lanes` and
    /// the combined RAM floor for admission.
    caf::reacts_to<place_atom, std::string, node_actor, bus::string_list, std::uint64_t>,
    /// From its allocation actor: the node started it / it exited. Answered
    /// once the change is committed.
    caf::replies_to<started_atom, bus::report_req>::with<bus::report_rep>,
    caf::replies_to<exited_atom, bus::report_req>::with<bus::report_rep>,
    /// From its allocation actor: allocation `id` is lost (`why`); requeue.
    /// Answered once the loss is committed (the allocation actor lets its node
    /// go only then).
    caf::replies_to<lost_atom, std::string, std::string>::with<bool>,
    /// From its allocation actor: allocation `id`'s node is down (unknown) /
    /// lists it again (found).
    caf::reacts_to<unknown_atom, std::string>, caf::reacts_to<found_atom, std::string>,
    /// From its allocation actor: no connection of the node took allocation
    /// `id`'s start within start_timeout: fence it (stop cause fence).
    caf::reacts_to<stop_atom, std::string>,
    /// INTERNAL: allocation `id` may have been unknown for the job's lost-after.
    caf::reacts_to<timeout_atom, std::string>,
    /// INTERNAL: allocation `id`'s yield grace may have run out.
    caf::reacts_to<lease_atom, std::string>,
    /// From the api: dependency `dep` reached `state`.
    caf::reacts_to<dep_atom, std::string, job_state>,
    /// From the api: a committed move (priority, rank).
    caf::reacts_to<move_atom, std::string, std::int64_t>,
    /// From the api: cancel by identity `who`; answered once committed.
    caf::replies_to<cancel_atom, call_stamp>::with<api_reply>,
    /// From the api: keep this queued job from starting (true: cq hold), or
    /// let it start again (false: cq release JOB). Answered once committed.
    caf::replies_to<park_atom, bool, call_stamp>::with<api_reply>,
    /// From the api (cq preempt, or the scheduler at a lease boundary): ask a
    /// running checkpointing job to yield, saying `why`; answered once committed.
    /// `by` names the identity of a cq preempt (its audit row is committed
    /// with the request); empty for the scheduler's.
    caf::replies_to<yield_atom, std::string, call_stamp>::with<api_reply>,
    /// Records an event (kind, detail): from the scheduler, blocked (the job
    /// has been the blocked head of the queue for the configured delay; the
    /// detail names what it waits behind), recorded only while it is queued;
    /// from the api, held and released (a hold of one of its allocations).
    /// Answered once committed.
    caf::replies_to<event_atom, std::string, std::string>::with<bool>,
    /// From the api: a diagnostic grant for this queued job, by `by`: it is
    /// committed with the job (now diagnostic), answered with a grant_rep.
    caf::replies_to<grant_atom, bus::grant_info, call_stamp>::with<api_reply>,
    /// From the api (recovery): this job holds the active grant.
    caf::reacts_to<grant_atom, bus::grant_info>>;

/// One active diagnostic grant (grant_actor.cpp): tells the scheduler that its
/// node takes its job alone while disabled, and ends once the job's actor
/// committed the grant's consumption (the start) or revocation (a cancel).
using grant_actor = caf::typed_actor<
    /// From the api: the grant's committed end (state consumed or revoked).
    caf::reacts_to<grant_atom, bus::grant_info>>;

/// A queued, startable job as the scheduler sees it. Serving order is
/// (level, rank, seq).
struct queue_entry : job_resources {
  std::string job;
  std::uint64_t seq = 0;
  std::uint8_t level = 1; ///< 0 high, 1 medium, 2 low
  std::int64_t rank = 0;
  bool checkpoint = false; ///< preempt mode checkpoint
  /// The job actor; null for a queued job that has none yet: the scheduler
  /// places it through the api, which spawns its actor (api/parked.cpp).
  job_actor handle;
};

/// What the scheduler knows of a node; sent by the node actor on every change.
struct node_status {
  std::string name;
  bool approved = false;
  std::int64_t last_heartbeat_ms = 0;
  bus::node_info info;                 ///< telemetry and node configuration from the last heartbeat
  node_actor handle;                   ///< the node actor
  std::vector<bus::alloc_usage> usage; ///< what each running allocation uses now
  /// No GPU placements until the next heartbeat: the node reported a GPU
  /// refusal or fault stop that its telemetry may not show yet.
  bool gpu_blocked = false;
  bool down = false; ///< no heartbeat for node_timeout
  /// Allocations its heartbeat lists that are no longer its own (given away
  /// after a loss, or cancelled before they started): no new work goes there
  /// until the node stopped them (fencing, docs/adr/0021).
  std::size_t fenced = 0;
  std::uint64_t beats = 0; ///< heartbeats accepted so far (orders `listed`)
  bus::string_list listed; ///< what the latest heartbeat listed
  /// The scheduler's own: this node's position in its pass's node views
  /// (scheduler_actor.cpp, invariant 6). Not sent; 0 in every message.
  std::size_t view_at = 0;
};

/// The scheduler (scheduler_actor.cpp): the queue and node views, and
/// coalesced placement passes (policy/placement.hpp decides).
using scheduler_actor = caf::typed_actor<
    /// From a job actor or the api (a queued job without an actor): it is
    /// queued and startable (replaces an older entry).
    caf::reacts_to<enqueue_atom, queue_entry>,
    /// From the api at recovery: every parked job at once, as one message.
    caf::reacts_to<enqueue_atom, std::vector<queue_entry>>,
    /// From the api (`cq move` of a job without an actor): its new place,
    /// replacing its entry only while it is still in the queue. A job placed
    /// meanwhile is not queued again: it holds an allocation.
    caf::reacts_to<rekey_atom, queue_entry>,
    /// From a job actor or the api: job `id` no longer waits.
    caf::reacts_to<dequeue_atom, std::string>,
    /// From a node actor: its view changed.
    caf::reacts_to<node_atom, node_status>,
    /// From a job actor: a live allocation's hold on a node.
    caf::reacts_to<reserve_atom, alloc_entry>,
    /// From a job actor: job `id`'s allocation ended (or a placement was refused).
    caf::reacts_to<release_atom, std::string>,
    /// From a job actor: job `id`'s allocation was lost. Its resources stay
    /// taken on its node until a later heartbeat of the node no longer lists
    /// it (the node may still run it, docs/adr/0021).
    caf::reacts_to<lost_atom, std::string>,
    /// From a grant actor: disabled node `node` takes job `job` alone (true),
    /// or no longer (false).
    caf::reacts_to<grant_atom, std::string, std::string, bool>,
    /// From the api: why each of `ids` waits (one line per reason; none for
    /// a job no longer queued), in their order, from one view of the cluster.
    caf::replies_to<explain_atom, bus::string_list>::with<std::vector<bus::string_list>>,
    /// From a job actor: the largest allocatable RAM of any node (the OOM
    /// retry ladder's bound); 0 when no node reported yet.
    caf::replies_to<largest_atom>::with<std::uint64_t>,
    /// INTERNAL: run one placement pass (coalesced).
    caf::reacts_to<pass_atom>,
    /// INTERNAL: a lease boundary (or a blocked notice) may be due.
    caf::reacts_to<lease_atom>>;

/// The api (api/): authenticates and dispatches requests, keeps the read
/// model listings are served from.
using api_actor = caf::typed_actor<
    /// From the bridge: one decoded request; exactly one reply.
    caf::replies_to<api_request>::with<api_reply>,
    /// INTERNAL: runs an authorized mutating request whose outcome the api
    /// must see (a refusal is audited, an operation id's result is kept).
    caf::replies_to<exec_atom, api_request>::with<api_reply>,
    /// From a job actor: its committed row changed.
    caf::reacts_to<job_atom, job_row>,
    /// From a job actor: what a finished run measured (profiles).
    caf::reacts_to<measure_atom, measurement>,
    /// From a job actor: its allocation's committed row changed.
    caf::reacts_to<alloc_atom, bus::allocation_info>,
    /// From a node actor: its view changed (node listings).
    caf::reacts_to<info_atom, bus::node_info>,
    /// From the bridge: a node's answer to an order, for its node actor.
    caf::reacts_to<node_reply>,
    /// From the scheduler: ask job `id` to yield at its lease boundary (`why`).
    caf::reacts_to<yield_atom, std::string, std::string>,
    /// From a job actor: it committed events up to `seq` (wakes waiting readers).
    caf::reacts_to<event_atom, std::string, std::uint64_t>,
    /// From the scheduler, for a queued job it knows without an actor: place
    /// job `id` (its actor is spawned now; see job_actor's place_atom).
    caf::reacts_to<place_atom, std::string, std::string, node_actor, bus::string_list,
                   std::uint64_t>,
    /// From the scheduler, for a queued job it knows without an actor: record
    /// event (kind, detail) while the job is queued (job_actor's event_atom).
    caf::reacts_to<event_atom, std::string, std::string, std::string>,
    /// From a job actor: its grant's committed end (consumed or revoked).
    caf::reacts_to<grant_atom, bus::grant_info>,
    /// From a node actor: hold `h` of node `node` appeared (true) or is gone.
    caf::reacts_to<hold_atom, std::string, bus::hold_info, bool>,
    /// INTERNAL: a waiting events reader's wait_ms ran out.
    caf::reacts_to<timeout_atom, std::uint64_t>,
    /// INTERNAL: rewrite the board file (coalesced).
    caf::reacts_to<board_atom>,
    /// INTERNAL: forget the operation ids older than their window.
    caf::reacts_to<expire_atom>,
    /// INTERNAL: forget the finished jobs older than their history window.
    caf::reacts_to<expire_atom, bool>,
    /// INTERNAL (from spawn_coordinator): rebuild from the store's snapshot.
    caf::reacts_to<recover_atom, std::shared_ptr<coord::snapshot>>>;

/// The bridge (coordinator/zmq/bridge.cpp, production): hands what the
/// gateway thread decoded to the api, in arrival order, and sends replies.
using bridge_actor = caf::typed_actor<
    /// From the gateway thread: a request; its reply goes back as a frame.
    caf::reacts_to<api_request>,
    /// From the gateway thread: a node's answer to an order.
    caf::reacts_to<node_reply>>;

} // namespace cq::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::queue_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<cq::actors::queue_entry>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::node_status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<cq::coord::snapshot>)
