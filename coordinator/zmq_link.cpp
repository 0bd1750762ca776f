// Production wiring: the bridge between the gateway thread and the api actor,
// and the node link that carries orders over ZeroMQ.
#include "coordinator.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace cq::coord {

using namespace cq::actors;

struct zmq_wiring {
  explicit zmq_wiring(caf::actor_system& s) : sys(s) {}
  caf::actor_system& sys;
  bus::gateway* gw = nullptr; ///< set by connect_gateway, before the gateway starts
  caf::actor bridge;          ///< turns api replies into frames
  std::atomic<std::uint64_t> next_order{1};
  std::mutex mtx;
  /// Orders waiting for a node's reply: order id -> the link that sent it.
  std::unordered_map<std::uint64_t, node_link_actor> waiting; // guarded by mtx
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
            .then([=](const api_reply& r) { w->gw->send(peer, encode(id, r)); },
                  [=](caf::error& e) {
                    w->gw->send(peer, bus::encode_error(id, errc::internal, to_string(e)));
                  });
      },
  };
}

struct link_state {
  std::shared_ptr<zmq_wiring> w;
  std::string node;
  std::string peer; ///< routing id of the node's connection ("" = not connected yet)
  std::unordered_map<std::uint64_t, caf::typed_response_promise<order_reply>> pending;
  static inline const char* name = "cq.zmq_link";
};

node_link_actor::behavior_type zmq_link(node_link_actor::stateful_pointer<link_state> self,
                                        std::shared_ptr<zmq_wiring> w, std::string node) {
  self->state.w = w;
  self->state.node = node;
  auto send_order = [=](auto& order) -> std::uint64_t {
    auto& st = self->state;
    if (st.peer.empty() || !st.w->gw) {
      spdlog::warn("node {} is not connected; order {} dropped", st.node, order.op);
      return 0;
    }
    auto id = st.w->next_order++;
    st.w->gw->send(st.peer, bus::encode_request(id, "", order));
    return id;
  };
  // Sends an order whose reply someone waits for; the reply (or a timeout)
  // arrives as reply_atom.
  auto await_order = [=](auto& o) -> caf::result<order_reply> {
    auto& st = self->state;
    if (st.peer.empty())
      return order_reply{false,
                         std::nullopt,
                         {errc::unavailable, fmt::format("node {} is not connected", st.node)}};
    auto id = st.w->next_order++;
    {
      std::lock_guard<std::mutex> g(st.w->mtx);
      st.w->waiting[id] = node_link_actor{self};
    }
    st.w->gw->send(st.peer, bus::encode_request(id, "", o));
    auto rp = self->make_response_promise<order_reply>();
    st.pending.emplace(id, rp);
    self->delayed_send(
        self, std::chrono::seconds(5), reply_atom::value, id,
        order_reply{false,
                    std::nullopt,
                    {errc::unavailable, fmt::format("node {} did not answer in time", st.node)}});
    return rp;
  };
  return {
      [=](bus::start_order& o) { send_order(o); },
      [=](bus::stop_order& o) { send_order(o); },
      [=](bus::read_log_order& o) { return await_order(o); },
      [=](bus::release_order& o) { return await_order(o); },
      [=](bus::clear_fault_order& o) { return await_order(o); },
      [=](bus::yield_order& o) { send_order(o); },
      [=](peer_atom, const std::string& p) { self->state.peer = p; },
      [=](reply_atom, std::uint64_t id, order_reply& r) {
        auto& st = self->state;
        auto i = st.pending.find(id);
        if (i == st.pending.end())
          return;
        i->second.deliver(std::move(r));
        st.pending.erase(i);
        std::lock_guard<std::mutex> g(st.w->mtx);
        st.w->waiting.erase(id);
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
  h.on_reply = [w](const bus::peer_id&, const bus::frame& f) {
    node_link_actor link;
    {
      std::lock_guard<std::mutex> g(w->mtx);
      auto i = w->waiting.find(f.id);
      if (i == w->waiting.end())
        return; // an ack of a start or stop order
      link = i->second;
      w->waiting.erase(i);
    }
    order_reply r;
    r.ok = f.ok;
    if (!f.ok)
      r.error = f.error;
    else if (auto c = bus::decode_body<bus::log_chunk>(f))
      r.chunk = std::move(*c); // read_log; other orders reply with an empty body
    caf::anon_send(link, reply_atom::value, f.id, std::move(r));
  };
  return h;
}

std::function<node_link_actor(caf::actor_system&, const std::string&)>
zmq_link_factory(std::shared_ptr<zmq_wiring> w) {
  return
      [w](caf::actor_system& sys, const std::string& node) { return sys.spawn(zmq_link, w, node); };
}

void connect_gateway(const std::shared_ptr<zmq_wiring>& w, bus::gateway& gw, caf::actor api) {
  w->gw = &gw;
  w->bridge = w->sys.spawn(bridge_actor, w, std::move(api));
}

} // namespace cq::coord
