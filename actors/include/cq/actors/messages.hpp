#pragma once
// The atoms of every actor message, and the messages that carry no actor
// handle. Messages stay inside one process (the wire is msgpack, see bus/),
// so their types are allowed without CAF serialization
// (CAF_ALLOW_UNSAFE_MESSAGE_TYPE).

#include "cq/bus/protocol.hpp"
#include "cq/records.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <atomic>
#include <functional>
#include <memory>

namespace cq::actors {

// ---- atoms ------------------------------------------------------------------
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using dequeue_atom = caf::atom_constant<caf::atom("dequeue")>;
using rekey_atom = caf::atom_constant<caf::atom("rekey")>;
using node_atom = caf::atom_constant<caf::atom("node")>;
using reserve_atom = caf::atom_constant<caf::atom("reserve")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using pass_atom = caf::atom_constant<caf::atom("pass")>;
using place_atom = caf::atom_constant<caf::atom("place")>;
using started_atom = caf::atom_constant<caf::atom("started")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using park_atom = caf::atom_constant<caf::atom("park")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using approve_atom = caf::atom_constant<caf::atom("approve")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using expect_atom = caf::atom_constant<caf::atom("expect")>;
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
using recover_atom = caf::atom_constant<caf::atom("recover")>;
using down_atom = caf::atom_constant<caf::atom("down")>;
using found_atom = caf::atom_constant<caf::atom("found")>;
using unknown_atom = caf::atom_constant<caf::atom("unknown")>;
using event_atom = caf::atom_constant<caf::atom("event")>;
using audit_atom = caf::atom_constant<caf::atom("audit")>;
using exec_atom = caf::atom_constant<caf::atom("exec")>;
using enable_atom = caf::atom_constant<caf::atom("enable")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using lease_atom = caf::atom_constant<caf::atom("lease")>;
using largest_atom = caf::atom_constant<caf::atom("largest")>;
using blocked_atom = caf::atom_constant<caf::atom("blocked")>;
using board_atom = caf::atom_constant<caf::atom("board")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using replay_atom = caf::atom_constant<caf::atom("replay")>;

// ---- messages ---------------------------------------------------------------

/// The result of a commit: empty error = committed.
struct commit_result {
  std::string error;
};

/// Set by the bridge on a submit from a peer its ahead_filter accepts (the
/// local socket's): the api may have the reply written as soon as the commit
/// is durable, from the store's thread, instead of after its own next turn
/// (docs/adr/0067).
struct reply_ahead {
  std::function<void(std::string)> send; ///< writes an encoded reply to the peer
  /// Set by the api once the commit that writes the reply succeeded: the
  /// bridge then sends nothing more.
  std::atomic<bool> written{false};
};

/// Run by the store on its own thread once the batch it came with is
/// durable, after the batch's commit_result was sent; never when the commit
/// failed. Empty: nothing to run.
struct durable_hook {
  std::shared_ptr<const std::function<void()>> run;
  /// Runs it, when there is one.
  void operator()() const {
    if (run && *run)
      (*run)();
  }
};

/// A decoded, validated request as it reaches the api actor.
struct api_request {
  std::string peer; ///< routing id of the sender (node replies go back there)
  std::uint64_t id = 0;
  std::string token;
  bus::coordinator_request body;
  std::string addr; ///< the peer's IP address, when known (failed logins are limited per address)
  std::string args; ///< set by the api: digest of the body's arguments (audit rows)
  std::string key;  ///< the CURVE public key the peer connected with ("" = plain)
  std::shared_ptr<reply_ahead> ahead; ///< see reply_ahead; null: the api's reply is sent
};

/// Who asked for a change a job actor commits (a cancel): its audit row, and
/// the operation id whose result is stored with it (SPEC section 9).
struct call_stamp {
  std::string who;
  std::string role;
  std::string args;         ///< digest of the request's arguments
  std::string operation_id; ///< "" = none
};

/// The api actor's answer; the bridge encodes it for the wire.
struct api_reply {
  std::variant<bus::error_info, bus::submit_rep, bus::ls_rep, bus::show_rep, bus::logs_rep,
               bus::cancel_rep, bus::node_invite_rep, bus::node_rep, bus::node_ls_rep,
               bus::node_join_rep, bus::heartbeat_rep, bus::report_rep, bus::move_rep,
               bus::profile_ls_rep, bus::preempt_rep, bus::events_rep, bus::token_add_rep,
               bus::token_ls_rep, bus::audit_rep, bus::grant_rep, bus::whoami_rep,
               bus::terminal_rep, bus::clean_rep>
      body;
};

/// A live allocation's hold on a node's resources, as the scheduler sees it.
struct alloc_entry {
  std::string job;
  std::string allocation;
  std::string node;
  std::uint8_t level = 1;
  bool checkpoint = false;
  bool stopping = false;         ///< a cancel, or a yield, is requested
  job_resources resources;       ///< the job's, whole (records.hpp)
  std::uint64_t floor_bytes = 0; ///< the RAM floor its placement imposes on the node
  bus::string_list lanes;        ///< the lanes it holds
  std::int64_t est_end_ms = 0;
  std::int64_t started_ms = 0; ///< when the node reported the start; 0 = not yet
  std::int64_t lease_ms = 0;   ///< lease length: boundaries at started + k * lease
};

/// What the store holds of events, for a reader (events_req).
struct events_query {
  bus::string_list jobs;               ///< empty = every job
  std::vector<std::uint64_t> job_seqs; ///< the same jobs by submission seq (what the store indexes)
  std::uint64_t cursor = 0;
  std::uint64_t since = 0;
  std::uint64_t limit = 0;
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
/// A point on a node's clock: its daemon's start (wall ms) and a heartbeat
/// number (heartbeat_req::beat). Later points compare greater.
using node_clock = std::pair<std::int64_t, std::uint64_t>;

struct order_reply {
  bool ok = false;                     ///< the node took the order
  std::optional<bus::log_chunk> chunk; ///< read_log: the data
  bus::error_info error;               ///< when !ok
  std::optional<node_clock> at;        ///< the node's clock when it took the order
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

} // namespace cq::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::commit_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::durable_hook)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::call_stamp)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::grant_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::audit_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::audit_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::api_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::api_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::alloc_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::measurement)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::string_list)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::move_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::order_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::node_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::job_payload)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::actors::events_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::events_rep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::node_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::optional<cq::actors::job_payload>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const cq::change_batch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::start_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::stop_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::read_log_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::terminal_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::release_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::clear_fault_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::forget_order)
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
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::bus::hold_info)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::job_row)
