#pragma once
// Spawning the coordinator's actors, and the production node link.
//
// spawn_coordinator() loads the store's snapshot, spawns the store, scheduler
// and api actors, and recovers every live job, allocation and node from it:
// queued jobs are queued again, a starting allocation has its start order
// re-sent until its node takes it (nodes ignore a start they already know), a
// stopping one has its stop re-sent, a running one waits for the node's
// (re-sent) reports. Runs on any thread; returns the filled context. Throws
// std::runtime_error naming the damaged rows when the store holds any.

#include "cq/actors/system.hpp"
#include "cq/bus/gateway.hpp"

#include <memory>
#include <string>

namespace cq::coord {

class store;

struct spawn_options {
  bool detached_store = true; ///< run SQLite on its own thread (off in deterministic tests)
  /// Tests and the simulator: the store the other actors use, given the real
  /// one (a wrapper that fails chosen commits). Empty: the real store.
  std::function<actors::store_actor(caf::actor_system&, actors::store_actor)> wrap_store;
};

actors::context_ptr spawn_coordinator(caf::actor_system& sys, std::shared_ptr<store> db,
                                      actors::context ctx, spawn_options opts = {});

/// Adds a token for identity `name` with role owner|operator|submitter on the
/// coordinator's host (the coordinator is stopped: it holds the state lock)
/// and returns it. Fails with a message naming the field.
std::string add_token(store& db, const std::string& name, const std::string& role,
                      const std::string& token, std::int64_t now_ms);

/// Creates the Owner identity and returns its token (shown once). Fails with
/// a message when an owner already exists.
std::string init_owner(store& db, const std::string& name, const std::string& token,
                       std::int64_t now_ms);

/// The production board: replaces `path` atomically with each snapshot.
std::function<void(const std::string&)> board_writer(std::string path);

/// Where the bridge sends a reply frame: the connection `peer`.
using frame_sink = std::function<void(const std::string& peer, std::string bytes)>;

/// Whether a submit's reply to `peer` is written by the store's thread once
/// its commit is durable (docs/adr/0067).
using ahead_filter = std::function<bool(const std::string& peer)>;

/// The bridge (actors/coordinator.hpp): hands requests and answers to the
/// api in arrival order and sends each reply through `send` (production: the
/// gateway; cq-sim: its network). The reply to a submit from a peer that
/// `ahead` accepts is written by the store's thread instead.
actors::bridge_actor spawn_bridge(caf::actor_system& sys, frame_sink send, actors::api_actor api,
                                  ahead_filter ahead);

/// A node's answer to an order, from its decoded reply frame (the bridge's,
/// and cq-sim's).
actors::order_reply order_reply_of(const bus::frame& f);

/// The frame answering request `id` with `r` (the bridge's, and cq-sim's).
std::string encode_api_reply(std::uint64_t id, const actors::api_reply& r);

/// Production wiring between the gateway thread and the actors. Order:
/// make_zmq_wiring(); construct the gateway with gateway_handlers(w); put
/// zmq_link_factory(w) into the context; spawn_coordinator(); then
/// connect_gateway(w, gw, api) and gw.start().
struct zmq_wiring;
std::shared_ptr<zmq_wiring> make_zmq_wiring(caf::actor_system& sys);
bus::gateway::handlers gateway_handlers(std::shared_ptr<zmq_wiring> w);
std::function<actors::node_link_actor(caf::actor_system&, const std::string&, actors::node_actor)>
zmq_link_factory(std::shared_ptr<zmq_wiring> w);
void connect_gateway(const std::shared_ptr<zmq_wiring>& w, bus::gateway& gw, actors::api_actor api);

} // namespace cq::coord
