// cq-sim's network: node links, frames both ways, and their faults.
#include "world_impl.hpp"

namespace cq::sim::detail {

node_link_actor::behavior_type sim_link(node_link_actor::stateful_pointer<link_state> self,
                                        world* w, std::uint64_t gen, std::string node) {
  self->state.w = w, self->state.gen = gen, self->state.node = std::move(node);
  return {
      [=](order_atom, std::uint64_t id, const std::string& peer, const bus::node_order& o) {
        self->state.w->order_out(self->state.gen, self->state.node, id, peer, o);
      },
  };
}

// The network, per connection and direction:
//  - frames arrive after a seeded delay (sometimes a slow moment of up to
//    half a second), in order;
//  - a frame may be lost (a full pipe, a connection that breaks with it in
//    flight) or arrive twice (drop, dup); with `reorder` a frame may overtake
//    earlier ones, and a duplicate may arrive after newer frames;
//  - after a reconnect, frames the old connection still carried toward the
//    coordinator may arrive after the new connection's first ones (reorder);
//    what it carried toward the node is lost;
//  - a partition either keeps the connection (TCP outlives it): frames both
//    ways wait in the sockets, and when it ends each side reads its whole
//    backlog at once, as ZeroMQ delivers it (the node's daemon gets the
//    frames in one batch); or it breaks the connection: everything in flight
//    is lost, and the node reconnects when it ends.
// TCP under ZeroMQ never reorders within a connection; cq does not rely on
// that (node_actor.cpp, invariant 3), and the simulator checks it does not.
std::int64_t world::delay(std::int64_t& fifo) {
  auto d = uniform(rng_, 0, 20);
  if (chance(rng_, 0.01))
    d += uniform(rng_, 50, 500); // a slow moment
  auto t = now() + d;
  if (!opt_.faults.reorder || !chance(rng_, 0.2))
    t = std::max(t, fifo);
  else if (t < fifo)
    ++res_.faults["frame_reordered"];
  fifo = std::max(fifo, t);
  return t;
}

void world::order_out(std::uint64_t gen, const std::string& node, std::uint64_t id,
                      const std::string& peer, const bus::node_order& o) {
  if (gen != gen_ || !coord_up_)
    return;
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return n.name == node; });
  if (it == nodes_.end())
    return;
  auto i = static_cast<std::size_t>(it - nodes_.begin());
  if (auto* s = std::get_if<bus::start_order>(&o)) {
    // Checker latch_bypassed.
    // Only a new placement counts: re-sends of an allocation's start are state.
    bool fresh = first_starts_.insert(s->allocation).second;
    if (fresh && s->lanes && !s->lanes->empty() && it->fault_seen_ms &&
        now() - *it->fault_seen_ms > 2000)
      violation("latch_bypassed",
                fmt::format("GPU start of job {} sent to {} {} ms after its fault was reported",
                            s->job, node, now() - *it->fault_seen_ms),
                {s->job, s->allocation, node});
  }
  // Preemption choices, as the report counts them: the first yield order of
  // each allocation.
  if (auto* y = std::get_if<bus::yield_order>(&o); y && first_yields_.insert(y->allocation).second)
    ++res_.yields;
  // An operator's clear lifts the latch as soon as the node takes it.
  if (std::holds_alternative<bus::clear_fault_order>(o))
    it->fault_seen_ms.reset();
  trace(fmt::format("coord -> {} {} #{}", peer,
                    std::visit([](auto& x) { return std::string(x.op); }, o), id));
  to_node(i, bus::encode_node_order(id, o), peer);
}

void world::reply_out(std::uint64_t gen, const std::string& peer, std::string bytes) {
  if (gen != gen_ || !coord_up_)
    return;
  if (peer == client_peer) {
    client_reply(bytes);
    return;
  }
  auto hash = peer.find('#');
  auto name = peer.substr(0, hash);
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return n.name == name; });
  if (it == nodes_.end())
    return;
  to_node(static_cast<std::size_t>(it - nodes_.begin()), std::move(bytes), peer);
}

void world::to_node(std::size_t i, std::string bytes, const std::string& peer) {
  auto& n = nodes_[i];
  if (n.peer() == peer && n.partitioned && n.keeps_connection) {
    n.backlog_in.push_back(std::move(bytes)); // waits in the node's socket
    return;
  }
  if (n.peer() != peer || n.partitioned) {
    trace(fmt::format("lost -> {}", peer));
    return;
  }
  if (chance(rng_, opt_.faults.drop)) {
    ++res_.faults["frame_dropped"];
    trace(fmt::format("lost -> {}", peer));
    return;
  }
  int copies = 1;
  if (chance(rng_, opt_.faults.dup))
    copies = 2, ++res_.faults["frame_duplicated"];
  for (int c = 0; c < copies; ++c) {
    auto t = delay(n.fifo_in);
    // Frames that arrive at one instant are read at one wake-up, as from the
    // node's socket (a run of start orders is then one group, ADR 0068).
    auto key = std::pair{t, peer};
    if (auto same = n.arriving.find(key); same != n.arriving.end()) {
      same->second->push_back(bytes);
      continue;
    }
    auto batch = std::make_shared<std::vector<std::string>>(1, bytes);
    n.arriving.emplace(key, batch);
    at(t, [this, i, key, batch] {
      auto& n = nodes_[i];
      n.arriving.erase(key);
      if (n.peer() != key.second || !n.model->up())
        return;
      if (n.partitioned) {
        if (n.keeps_connection)
          n.backlog_in.insert(n.backlog_in.end(), batch->begin(), batch->end());
        return;
      }
      for (auto& b : *batch)
        mix(b);
      n.model->receive(*batch);
    });
  }
}

void world::end_partition(std::size_t i) {
  auto& n = nodes_[i];
  if (!n.partitioned)
    return;
  n.partitioned = false;
  if (!n.keeps_connection) {
    n.reconnect();
    trace(fmt::format("{} reachable; its connection broke: reconnects as {}", n.name, n.peer()));
    return;
  }
  auto in = std::exchange(n.backlog_in, {});
  auto out = std::exchange(n.backlog_out, {});
  // The orders that waited, by kind and allocation (a story names them).
  std::vector<std::string> orders;
  for (auto& b : in) {
    std::uint64_t seen = 0;
    auto f = bus::decode_frame(b, seen);
    if (!f || f->is_reply)
      continue;
    if (auto o = bus::decode_node_order(*f))
      std::visit(
          [&](auto& x) {
            if constexpr (requires { x.allocation; })
              orders.push_back(fmt::format("{} {}", x.op, x.allocation));
            else
              orders.push_back(std::string(x.op));
          },
          *o);
  }
  trace(fmt::format("{} reachable; {} frames waited for it{}{}, {} for the coordinator", n.name,
                    in.size(), orders.empty() ? "" : ": ", fmt::join(orders, ", "), out.size()));
  if (!in.empty() || !out.empty())
    ++res_.faults["backlog_delivered"];
  // Each side reads what waited at once (the node in one batch), before
  // anything sent from now on.
  if (!in.empty() && n.model->up()) {
    for (auto& b : in)
      mix(b);
    n.model->receive(in);
  }
  n.fifo_in = std::max(n.fifo_in, now());
  n.fifo_out = std::max(n.fifo_out, now());
  for (auto& b : out)
    to_coordinator(i, n.peer(), b);
}

void world::from_node(std::size_t i, std::string bytes, std::shared_ptr<decoded_frame> decoded) {
  auto& n = nodes_[i];
  if (!coord_up_)
    return;
  if (n.partitioned) {
    if (n.keeps_connection)
      n.backlog_out.push_back(std::move(bytes)); // waits in the node's socket
    return;
  }
  if (chance(rng_, opt_.faults.drop)) {
    ++res_.faults["frame_dropped"];
    return;
  }
  auto peer = n.peer();
  auto gen = gen_;
  int copies = 1;
  if (chance(rng_, opt_.faults.dup))
    copies = 2, ++res_.faults["frame_duplicated"];
  for (int c = 0; c < copies; ++c) {
    auto t = delay(n.fifo_out);
    at(t, [this, i, peer, gen, bytes, decoded]() mutable {
      auto& n = nodes_[i];
      // A coordinator restarted meanwhile never sees it; a reconnect loses it
      // unless the old connection drains late (reorder).
      if (gen != gen_ || !coord_up_ || (n.peer() != peer && !opt_.faults.reorder))
        return;
      if (n.partitioned) {
        if (n.keeps_connection && n.peer() == peer)
          n.backlog_out.push_back(bytes);
        return;
      }
      to_coordinator(i, peer, bytes, std::move(decoded));
    });
  }
}

void world::to_coordinator(std::size_t i, const std::string& peer, const std::string& bytes,
                           std::shared_ptr<decoded_frame> decoded) {
  auto& n = nodes_[i];
  mix(bytes);
  // The same bytes decode to the same frame: what the node's host decoded
  // when it sent them stands for the gateway's decode.
  if (!decoded && !(decoded = decode_from_node(bytes)))
    return;
  const auto& f = decoded->frame;
  if (f.is_reply) {
    caf::anon_send(bridge_, node_reply{peer, f.id, coord::order_reply_of(f)});
    return;
  }
  if (!decoded->request)
    return;
  // The last copy in flight (a duplicate shares it) gives its request up.
  auto req = decoded.use_count() == 1 ? std::move(*decoded->request) : *decoded->request;
  if (auto* hb = std::get_if<bus::heartbeat_req>(&req)) {
    if (hb->fault && !n.fault_seen_ms)
      n.fault_seen_ms = now();
    else if (!hb->fault)
      n.fault_seen_ms.reset();
  } else if (auto* r = std::get_if<bus::report_req>(&req)) {
    trace(fmt::format("{} -> coord report {} {} {}", peer, r->kind, r->allocation, r->reason));
  }
  caf::anon_send(bridge_, api_request{peer, f.id, f.token, std::move(req)});
}

} // namespace cq::sim::detail
