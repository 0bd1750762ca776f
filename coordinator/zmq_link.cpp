// Production wiring: the bridge between the gateway thread and the api actor,
// and the node link that carries orders over ZeroMQ.
//
// Every frame from the network reaches the bridge from the gateway thread in
// the order it arrived (anon_send from one thread), and the bridge hands
// requests and answers to orders on to the api in that order: a node's
// heartbeats, reports and answers keep their order all the way to its node
// actor (see actors/system.hpp).
#include "coordinator.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

struct zmq_wiring {
  explicit zmq_wiring(caf::actor_system& s) : sys(s) {}
  caf::actor_system& sys;
  bus::gateway* gw = nullptr; ///< set by connect_gateway, before the gateway starts
  caf::actor bridge;          ///< turns api replies into frames
};

namespace {

std::string encode(std::uint64_t id, const api_reply& r) {
  return std::visit(
      [&](auto& body) -> std::string {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, bus::error_info>)
          return bus::encode_error(id, body.code, body.message);
        else
          return bus::encode_reply(id, body);
      },
      r.body);
}

struct bridge_state {
  static inline const char* name = "cq.bridge";
};

caf::behavior bridge_actor(caf::stateful_actor<bridge_state>* self, std::shared_ptr<zmq_wiring> w,
                           caf::actor api) {
  return {
      [=](api_request& req) {
        auto peer = req.peer;
        auto id = req.id;
        self->request(api, caf::infinite, std::move(req))
            .then(
                [=](const api_reply& r) {
                  auto bytes = encode(id, r);
                  // Replies fit by construction (spec limit, paged listings); a
                  // frame over the peer's limit would end its session, so a bug
                  // here costs the caller an error, never the connection.
                  if (bytes.size() > bus::limits::frame_bytes) {
                    spdlog::error("a reply of {} bytes exceeds the frame limit; sent as an error",
                                  bytes.size());
                    bytes = bus::encode_error(id, errc::too_large,
                                              fmt::format("the reply would be {} bytes, over the "
                                                          "frame limit of {}",
                                                          bytes.size(), bus::limits::frame_bytes));
                  }
                  w->gw->send(peer, std::move(bytes));
                },
                [=](caf::error& e) {
                  w->gw->send(peer, bus::encode_error(id, errc::internal, to_string(e)));
                });
      },
      [=](node_reply& r) { self->send(api, std::move(r)); },
  };
}

struct link_state {
  std::shared_ptr<zmq_wiring> w;
  std::string node;
  static inline const char* name = "cq.zmq_link";
};

node_link_actor::behavior_type zmq_link(node_link_actor::stateful_pointer<link_state> self,
                                        std::shared_ptr<zmq_wiring> w, std::string node) {
  self->state.w = w;
  self->state.node = node;
  return {
      [=](order_atom, std::uint64_t id, const std::string& peer, const bus::node_order& order) {
        auto& st = self->state;
        if (!st.w->gw)
          return;
        auto bytes = bus::encode_node_order(id, order);
        // Every order fits by construction (limits::spec_bytes leaves room for
        // what a start order adds); the node actor's deadline answers a bug.
        if (bytes.size() > bus::limits::frame_bytes) {
          spdlog::critical("node {}: an order of {} bytes exceeds the frame limit; not sent",
                           st.node, bytes.size());
          return;
        }
        st.w->gw->send(peer, std::move(bytes));
      },
  };
}

} // namespace

std::shared_ptr<zmq_wiring> make_zmq_wiring(caf::actor_system& sys) {
  return std::make_shared<zmq_wiring>(sys);
}

bus::gateway::handlers gateway_handlers(std::shared_ptr<zmq_wiring> w) {
  bus::gateway::handlers h;
  h.on_request = [w](const bus::peer_id& peer, const bus::frame& f, bus::coordinator_request req) {
    caf::anon_send(w->bridge, api_request{peer, f.id, f.token, std::move(req)});
  };
  h.on_reply = [w](const bus::peer_id& peer, const bus::frame& f) {
    order_reply r;
    r.ok = f.ok;
    if (!f.ok)
      r.error = f.error;
    else if (auto c = bus::decode_body<bus::log_chunk>(f))
      r.chunk = std::move(*c); // read_log; other orders reply with an empty body
    caf::anon_send(w->bridge, node_reply{peer, f.id, std::move(r)});
  };
  return h;
}

std::function<node_link_actor(caf::actor_system&, const std::string&, caf::actor)>
zmq_link_factory(std::shared_ptr<zmq_wiring> w) {
  return [w](caf::actor_system& sys, const std::string& node, caf::actor) {
    return sys.spawn(zmq_link, w, node);
  };
}

void connect_gateway(const std::shared_ptr<zmq_wiring>& w, bus::gateway& gw, caf::actor api) {
  w->gw = &gw;
  w->bridge = w->sys.spawn(bridge_actor, w, std::move(api));
}

} // namespace cq::coord
