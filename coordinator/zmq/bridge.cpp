// The bridge between the gateway thread and the api actor (production).
//
// Every frame from the network reaches the bridge from the gateway thread in
// the order it arrived (anon_send from one thread), and the bridge hands
// requests and answers to orders on to the api in that order: a node's
// heartbeats, reports and answers keep their order all the way to its node
// actor (see actors/system.hpp).
#include "zmq/wiring.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

namespace {

struct bridge_state {
  static inline const char* name = "cq.bridge";
};

bridge_actor::behavior_type bridge_behavior(bridge_actor::stateful_pointer<bridge_state> self,
                                            frame_sink send, api_actor api,
                                            ahead_filter ahead_for) {
  return {
      [=](api_request& req) {
        auto peer = req.peer;
        auto id = req.id;
        // A submit's reply may be written by the store's thread once its
        // commit is durable (docs/adr/0067).
        std::shared_ptr<reply_ahead> ahead;
        if (std::holds_alternative<bus::submit_req>(req.body) && ahead_for && ahead_for(peer)) {
          ahead = std::make_shared<reply_ahead>();
          ahead->send = [send, peer](std::string bytes) { send(peer, std::move(bytes)); };
          req.ahead = ahead;
        }
        self->request(api, caf::infinite, std::move(req))
            .then(
                [=](const api_reply& r) {
                  if (ahead && ahead->written.load())
                    return;
                  auto bytes = encode_api_reply(id, r);
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
                  send(peer, std::move(bytes));
                },
                [=](caf::error& e) {
                  send(peer, bus::encode_error(id, errc::internal, to_string(e)));
                });
      },
      [=](node_reply& r) { self->send(api, std::move(r)); },
  };
}

} // namespace

bridge_actor spawn_bridge(caf::actor_system& sys, frame_sink send, api_actor api,
                          ahead_filter ahead) {
  return sys.spawn(bridge_behavior, std::move(send), std::move(api), std::move(ahead));
}

order_reply order_reply_of(const bus::frame& f) {
  order_reply r;
  r.ok = f.ok;
  if (!f.ok) {
    r.error = f.error;
  } else if (auto c = bus::decode_body<bus::log_chunk>(f)) {
    r.chunk = std::move(*c); // read_log
  } else if (auto a = bus::decode_body<bus::order_ack>(f); a && a->boot_ms && a->beat) {
    r.at = node_clock{*a->boot_ms, *a->beat};
  }
  return r;
}

std::string encode_api_reply(std::uint64_t id, const api_reply& r) {
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

std::shared_ptr<zmq_wiring> make_zmq_wiring(caf::actor_system& sys) {
  return std::make_shared<zmq_wiring>(sys);
}

bus::gateway::handlers gateway_handlers(std::shared_ptr<zmq_wiring> w) {
  bus::gateway::handlers h;
  h.on_request = [w](const bus::peer_id& peer, const std::string& addr, const std::string& key,
                     const bus::frame& f, bus::coordinator_request req) {
    caf::anon_send(w->bridge, api_request{peer, f.id, f.token, std::move(req), addr, {}, key});
  };
  h.on_reply = [w](const bus::peer_id& peer, const bus::frame& f) {
    caf::anon_send(w->bridge, node_reply{peer, f.id, order_reply_of(f)});
  };
  return h;
}

void connect_gateway(const std::shared_ptr<zmq_wiring>& w, bus::gateway& gw, api_actor api) {
  w->gw = &gw;
  w->bridge = spawn_bridge(
      w->sys,
      [w](const std::string& peer, std::string bytes) { w->gw->send(peer, std::move(bytes)); },
      std::move(api),
      // Local peers only: a ZeroMQ peer's reply goes through the gateway
      // thread either way, and from the store's thread it only lengthens
      // the store's turn between commits (docs/adr/0067).
      [](const std::string& peer) { return bus::gateway::is_local(peer); });
}

} // namespace cq::coord
