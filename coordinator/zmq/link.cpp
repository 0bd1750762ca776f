// The production node link: carries orders to a node's connection over ZeroMQ.
#include "zmq/wiring.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

namespace {

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

std::function<node_link_actor(caf::actor_system&, const std::string&, node_actor)>
zmq_link_factory(std::shared_ptr<zmq_wiring> w) {
  return [w](caf::actor_system& sys, const std::string& node, node_actor) {
    return sys.spawn(zmq_link, w, node);
  };
}

} // namespace cq::coord
