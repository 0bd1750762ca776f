#pragma once
// What the production bridge and node links share: the gateway they send
// through and the bridge actor (coordinator/zmq/).
#include "coordinator.hpp"

namespace cq::coord {

struct zmq_wiring {
  explicit zmq_wiring(caf::actor_system& s) : sys(s) {}
  caf::actor_system& sys;
  bus::gateway* gw = nullptr;  ///< set by connect_gateway, before the gateway starts
  actors::bridge_actor bridge; ///< turns api replies into frames
};

} // namespace cq::coord
