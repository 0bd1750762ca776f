// The node actor: one per node. It owns the node's connection (which daemon
// speaks for the node), carries orders to it and matches their answers, keeps
// the node's telemetry, and reconciles the allocations it believes live with
// what the node's heartbeats list.
//
// Invariants:
//  1. One identity, one daemon: while the connection that spoke last for this
//     node is fresh (an accepted heartbeat or report within
//     heartbeat_fresh_ms), every heartbeat or report from another connection
//     is refused (already_exists) and changes nothing, unless it is a
//     heartbeat of the same daemon (the id of its state dir, which cq-node
//     locks: the daemon restarted or reconnected). A stale connection is
//     replaced by the next one that speaks; orders waiting on the old one fail
//     at once (their senders re-send on the new one).
//  2. Orders go only to the current connection, and an answer is accepted only
//     for an order that is still waiting, from the connection it went to. Order
//     ids are unguessable (ctx.new_order_id). Every order gets exactly one
//     answer: the node's, or errc::unavailable at its deadline (order_timeout),
//     or errc::unavailable when the connection is replaced.
//  3. Reconciliation: an allocation the node is known to hold (it took the
//     start order, or reported about it) that a later heartbeat does not list
//     is missing: its allocation actor is told once. The node lists every
//     allocation it holds until the coordinator acknowledged its exit report.
//     "Later" is the node's clock, not arrival order: every heartbeat carries
//     (daemon start, heartbeat number), and every acknowledgement and report
//     the latest such point sent before it; a heartbeat reconciles only the
//     allocations known at an earlier point, and a heartbeat not newer than
//     one already seen from its daemon (a duplicate, a frame of an old
//     connection drained late) changes nothing. A node without the clock
//     falls back to arrival order, which the transport keeps per connection.
//  4. A report of an exit for a GPU reason of the node (a fault stop, a refused
//     launch) blocks GPU placements on this node until the next heartbeat,
//     which carries the node's own state; the block is announced to the
//     scheduler before the report is handed on (and so before a requeue).
//  5. Node loss (docs/adr/0021): a node with no accepted heartbeat for
//     node_timeout is down; every allocation it took is told (down_atom) and
//     becomes unknown. The next accepted heartbeat ends the episode: what it
//     lists is found again, what it does not list is missing (invariant 3).
//     The first heartbeat after a coordinator restart finds what it lists as
//     well (recovery may bring allocations back unknown), and so does an
//     attach after it (a recovered allocation's actor).
//  6. Fencing: allocations a heartbeat lists that are not live here are
//     stopped, and the node gets no new work while its heartbeats list any
//     (node_status::fenced), so given-away work never shares it with new work.
//     An allocation whose exit here was committed is not given away: the
//     node lists it while it cleans up, and that fences nothing. Nor is one
//     recovery expects (expect_atom) before its actor attaches; a report of
//     one is answered unavailable (the node re-sends it), never acknowledged.
//  7. Holds: a hold id a heartbeat reports that the one before did not is
//     told to the api (held); one it no longer reports (released).
//  8. A start order's expiry (the allocation actor's deadline, on this
//     coordinator's wall clock) is restated on the node's wall clock, known
//     from the wall_ms of its latest heartbeat (docs/adr/0023).
#include "internal.hpp"
#include "policy/placement.hpp"
#include "policy/transitions.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <deque>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

namespace cq::coord {

using namespace cq::actors;

namespace {

/// An order that waits for the node's answer.
struct pending_order {
  std::string peer;       ///< the connection it went to
  std::string op;         ///< for messages
  std::string allocation; ///< start orders: the allocation the node then holds
  std::optional<caf::typed_response_promise<order_reply>> rp; ///< none: nobody waits
  std::function<void()> on_ok; ///< runs when the node took the order, before rp is answered
};

struct alloc_ref {
  allocation_actor handle;   ///< the allocation actor
  bool known = false;        ///< the node took its start order or reported about it
  bool missing_told = false; ///< the allocation actor was told it is missing
  /// The node's clock on the latest frame that made it known (invariant 3):
  /// only a heartbeat built after that may say it is missing.
  std::optional<node_clock> known_at;
};

/// Marks `a` known as of `at` (the later of two clocks wins).
void mark_known(alloc_ref& a, const std::optional<node_clock>& at) {
  a.known = true;
  if (at && (!a.known_at || *a.known_at < *at))
    a.known_at = at;
}

struct node_state {
  context_ptr ctx;                                   ///< shared seams and handles
  node_row row;                                      ///< committed node row
  node_link_actor link;                              ///< carries orders to the node
  bus::node_info info;                               ///< latest telemetry
  std::unordered_map<std::string, alloc_ref> allocs; ///< live allocations here
  std::string peer;                                  ///< the connection that speaks for the node
  std::string daemon;                  ///< the state-dir id its heartbeats carry ("" = none yet)
  std::int64_t peer_seen_ms = 0;       ///< its last accepted heartbeat or report
  std::vector<bus::alloc_usage> usage; ///< latest per-allocation usage
  std::unordered_map<std::uint64_t, pending_order> pending; ///< orders waiting for an answer
  bool gpu_blocked = false; ///< invariant 4: a GPU refusal or fault stop was reported
  std::int64_t refused_logged_ms = INT64_MIN / 2; ///< throttles the second-daemon warning
  std::optional<node_clock> last_beat;            ///< the newest heartbeat's clock, of `daemon`
  bool down = false;                              ///< invariant 5
  bool down_check = false;                        ///< a down check is scheduled
  std::size_t fenced = 0;                         ///< invariant 6: listed, not live here
  std::uint64_t beats = 0;                        ///< heartbeats accepted
  bus::string_list listed;                        ///< what the latest one listed
  /// Allocations whose exit here was committed, while the node may still
  /// list them (its cleanup): not given away, so not fenced (invariant 6).
  std::set<std::string> exited;
  /// Allocations recovery found live here whose actors have not attached yet
  /// (invariant 6 leaves them alone).
  std::set<std::string> expected;
  std::map<std::string, bus::hold_info> holds; ///< invariant 7: by id, as last reported
  /// Invariant 8: the node's wall clock minus ours, as of its latest
  /// heartbeat (its transit makes it err early, so expiries err early).
  std::optional<std::int64_t> clock_offset_ms;
  /// Forget orders that came while the node was down, or before its first
  /// heartbeat to this actor (a start): sent with its next heartbeat. At
  /// most forgets_waiting_max, each filled up to forget_order_items; the
  /// node's own window removes what is dropped.
  std::deque<bus::forget_order> forgets_waiting;
  static inline const char* name = "cq.node";
};

using node_ptr = node_actor::stateful_pointer<node_state>;

constexpr std::size_t forgets_waiting_max = 16;

order_reply unavailable(std::string message) {
  return order_reply{false, std::nullopt, {errc::unavailable, std::move(message)}};
}

void announce(node_ptr self) {
  auto& st = self->state;
  st.info.state = st.row.state;
  st.info.enabled = st.row.enabled;
  st.info.disabled_reason = st.row.disabled_reason;
  st.info.running = st.allocs.size();
  st.info.down = st.down;
  self->send(st.ctx->scheduler, node_atom::value,
             node_status{st.row.name, st.row.state == "approved", st.info.last_heartbeat_ms,
                         st.info, caf::actor_cast<node_actor>(self), st.usage, st.gpu_blocked,
                         st.down, st.fenced, st.beats, st.listed});
  self->send(st.ctx->api, info_atom::value, st.info);
}

/// Fails every waiting order that went to a connection other than `peer`.
void fail_orders_not_on(node_ptr self, const std::string& peer, const std::string& why) {
  auto& st = self->state;
  for (auto it = st.pending.begin(); it != st.pending.end();) {
    if (it->second.peer == peer) {
      ++it;
      continue;
    }
    if (it->second.rp)
      it->second.rp->deliver(unavailable(why));
    it = st.pending.erase(it);
  }
}

/// Invariant 1. Returns an error for a connection that may not speak for the
/// node now; otherwise makes `peer` the node's connection (re-sending what
/// waited on an old one) and notes that it spoke.
std::optional<bus::error_info> accept_peer(node_ptr self, const std::string& peer,
                                           const std::optional<std::string>& daemon = {}) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  if (peer != st.peer) {
    bool same_daemon = daemon && !daemon->empty() && *daemon == st.daemon;
    if (!st.peer.empty() && !same_daemon &&
        policy::heartbeat_fresh(st.peer_seen_ms, st.ctx->cfg.heartbeat_fresh_ms, now)) {
      if (now - st.refused_logged_ms >= 10'000) {
        spdlog::warn("node {}: refusing a second connection for this identity while the first "
                     "one is live (a copied node.toml, or a second cq-node?)",
                     st.row.name);
        st.refused_logged_ms = now;
      }
      return bus::error_info{
          errc::already_exists,
          fmt::format("node {} is connected from another cq-node daemon; one identity is one "
                      "daemon (this connection is refused while the other one heartbeats)",
                      st.row.name)};
    }
    if (!st.peer.empty())
      spdlog::info("node {}: a new connection speaks for it now", st.row.name);
    st.peer = peer;
    fail_orders_not_on(self, peer, fmt::format("node {} reconnected", st.row.name));
    // What waited for a connection (after a restart of either side) goes out now.
    for (auto& [id, a] : st.allocs)
      self->send(a.handle, resend_atom::value);
  }
  if (daemon)
    st.daemon = *daemon;
  st.peer_seen_ms = now;
  return std::nullopt;
}

/// Invariant 5: checks for a missed node_timeout at the time it would run out.
void schedule_down_check(node_ptr self) {
  auto& st = self->state;
  if (st.down_check || st.down)
    return;
  st.down_check = true;
  auto due = st.peer_seen_ms + st.ctx->cfg.node_timeout_ms - now_ms(self, *st.ctx);
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 1)),
                     down_atom::value);
}

/// Invariant 2: sends `order` to the current connection and waits for its
/// answer. `allocation` names the allocation of a start order.
caf::result<order_reply> send_order(node_ptr self, bus::node_order order, std::string op,
                                    std::string allocation = {}, bool wait = true,
                                    std::function<void()> on_ok = {}) {
  auto& st = self->state;
  if (st.peer.empty())
    return unavailable(fmt::format("node {} is not connected", st.row.name));
  auto id = st.ctx->new_order_id();
  while (id == 0 || st.pending.count(id))
    id = st.ctx->new_order_id();
  pending_order p{st.peer, std::move(op), std::move(allocation), std::nullopt, std::move(on_ok)};
  caf::result<order_reply> out = order_reply{true, std::nullopt, {}};
  if (wait) {
    auto rp = self->make_response_promise<order_reply>();
    p.rp = rp;
    out = rp;
  }
  st.pending.emplace(id, std::move(p));
  self->send(st.link, order_atom::value, id, st.peer, std::move(order));
  self->delayed_send(self, st.ctx->cfg.order_timeout, timeout_atom::value, id);
  return out;
}

node_actor::behavior_type node_behavior(node_ptr self, context_ptr ctx, node_row row) {
  auto& st = self->state;
  st.ctx = ctx;
  st.row = std::move(row);
  st.info.name = st.row.name;
  st.info.state = st.row.state;
  st.link = ctx->make_link(self->system(), st.row.name, caf::actor_cast<node_actor>(self));
  self->link_to(st.link);
  // A node that does not speak within node_timeout of this actor's start (a
  // coordinator restart) is down as well.
  st.peer_seen_ms = now_ms(self, *ctx);
  schedule_down_check(self);
  return {
      [=](beat_atom, const std::string& peer, const bus::heartbeat_req& hb) -> api_reply {
        auto& st = self->state;
        std::optional<node_clock> at;
        if (hb.boot_ms && hb.beat && !st.ctx->cfg.defects.reconcile_by_arrival)
          at = node_clock{*hb.boot_ms, *hb.beat};
        // Invariant 3: a heartbeat older than one already seen from this
        // daemon (a duplicate, or a frame of an old connection drained late)
        // says nothing new; it neither moves the connection nor reconciles.
        if (at && st.last_beat && hb.daemon && *hb.daemon == st.daemon && *at <= *st.last_beat)
          return api_reply{bus::heartbeat_rep{st.row.state == "approved"}};
        if (hb.daemon && *hb.daemon != st.daemon)
          st.last_beat.reset(); // another state dir: its clock is not comparable
        if (auto e = accept_peer(self, peer, hb.daemon))
          return api_reply{*e};
        if (at)
          st.last_beat = at;
        if (hb.wall_ms)
          st.clock_offset_ms = *hb.wall_ms - now_ms(self, *st.ctx);
        schedule_down_check(self);
        bool was_down = st.down;
        if (st.down) {
          spdlog::info("node {} is back", st.row.name);
          st.down = false;
        }
        for (; !st.forgets_waiting.empty(); st.forgets_waiting.pop_front())
          send_order(self, std::move(st.forgets_waiting.front()), "forget", {}, false);
        st.info.mem_total_bytes = hb.mem_total_bytes;
        st.info.mem_available_bytes = hb.mem_available_bytes;
        st.info.cpus = hb.cpus;
        st.info.lanes = hb.lanes.value_or(std::vector<bus::lane_info>{});
        st.info.ram_reserve_bytes = hb.ram_reserve_bytes.value_or(0);
        st.info.ram_floor_bytes = hb.ram_floor_bytes.value_or(0);
        st.info.vram_cap_bytes = hb.vram_cap_bytes;
        st.info.mem_cap_mode = hb.mem_cap_mode.value_or("");
        st.info.fault = hb.fault;
        st.info.holds = hb.holds.value_or(std::vector<bus::hold_info>{});
        // Invariant 7.
        std::map<std::string, bus::hold_info> now_held;
        for (auto& h : st.info.holds)
          now_held.emplace(h.id, h);
        for (auto& [id, h] : now_held)
          if (!st.holds.count(id))
            self->send(st.ctx->api, hold_atom::value, st.row.name, h, true);
        for (auto& [id, h] : st.holds)
          if (!now_held.count(id))
            self->send(st.ctx->api, hold_atom::value, st.row.name, h, false);
        st.holds = std::move(now_held);
        st.info.outside_gpu_processes =
            hb.outside_gpu_processes.value_or(std::vector<bus::gpu_process>{});
        st.info.busy_probes = hb.busy_probes.value_or(bus::string_list{});
        st.info.run_as = hb.run_as;
        st.usage = hb.usage.value_or(std::vector<bus::alloc_usage>{});
        st.info.last_heartbeat_ms = now_ms(self, *st.ctx);
        st.info.online = true;
        st.gpu_blocked = false; // invariant 4: this heartbeat carries the node's own state
        std::unordered_set<std::string> listed(hb.allocations.begin(), hb.allocations.end());
        // Invariant 3: what the node should hold and no longer lists is missing.
        for (auto& [id, a] : st.allocs)
          if (a.known && !a.missing_told && !listed.count(id) &&
              (!at || !a.known_at || *a.known_at < *at)) {
            spdlog::warn("node {}: allocation {} is no longer listed by the node", st.row.name, id);
            a.missing_told = true;
            self->send(a.handle, missing_atom::value);
          }
        // Invariant 5: what the node lists again after it was down is found;
        // so is what the first heartbeat since this actor started lists (a
        // coordinator restarted while the node was down recovers its
        // allocations unknown: cq-sim seed 1676 lost them all at lost-after).
        if (was_down || st.beats == 0)
          for (auto& [id, a] : st.allocs)
            if (listed.count(id))
              self->send(a.handle, found_atom::value);
        // Invariant 6: work the node holds that is no longer live here (lost
        // and given away, or cancelled before it started) is stopped; nobody
        // waits for the answer, and no new work goes there meanwhile.
        st.fenced = 0;
        ++st.beats;
        st.listed = hb.allocations;
        std::set<std::string> still_exiting;
        for (auto& id : hb.allocations) {
          if (st.allocs.count(id) || st.expected.count(id))
            continue;
          if (st.exited.count(id)) { // ended here, being cleaned up
            still_exiting.insert(id);
            continue;
          }
          ++st.fenced;
          send_order(self, bus::stop_order{id, 0}, "stop", {}, false);
        }
        st.exited = std::move(still_exiting); // once unlisted, forgotten
        announce(self);
        return api_reply{bus::heartbeat_rep{st.row.state == "approved"}};
      },
      [=](report_atom, const std::string& peer,
          const bus::report_req& r) -> caf::result<api_reply> {
        auto& st = self->state;
        if (auto e = accept_peer(self, peer))
          return api_reply{*e};
        // An allocation recovery expects whose actor has not attached yet:
        // the node re-sends the report (acknowledging it would lose the exit).
        if (st.expected.count(r.allocation))
          return api_reply{bus::error_info{
              errc::unavailable,
              fmt::format("allocation {} is being recovered; retry", r.allocation)}};
        auto i = st.allocs.find(r.allocation);
        // An allocation that is no longer live here already has its outcome
        // committed (or was given away): acknowledge so the node stops re-sending.
        if (i == st.allocs.end())
          return api_reply{bus::report_rep{r.seq}};
        std::optional<node_clock> at;
        if (r.boot_ms && r.beat)
          at = node_clock{*r.boot_ms, *r.beat};
        mark_known(i->second, at);
        if (r.kind == "exited" &&
            (r.reason == bus::reason::fault || r.reason == bus::reason::refused)) {
          st.gpu_blocked = true; // invariant 4, before the requeue
          announce(self);
        }
        auto rp = self->make_response_promise<api_reply>();
        self->request(i->second.handle, caf::infinite, report_atom::value, r)
            .then([=](const bus::report_rep& ack) mutable { rp.deliver(api_reply{ack}); },
                  [=](caf::error& e) mutable {
                    rp.deliver(api_reply{bus::error_info{
                        errc::internal, fmt::format("report not recorded: {}", to_string(e))}});
                  });
        return rp;
      },
      [=](reply_atom, const node_reply& r) {
        auto& st = self->state;
        auto i = st.pending.find(r.id);
        if (i == st.pending.end())
          return; // late (after its deadline), a duplicate, or a guess
        if (i->second.peer != r.peer) {
          spdlog::warn("node {}: an answer to order {} came from another connection; ignored",
                       st.row.name, i->second.op);
          return;
        }
        auto p = std::move(i->second);
        st.pending.erase(i);
        if (r.reply.ok && !p.allocation.empty())
          if (auto a = st.allocs.find(p.allocation); a != st.allocs.end())
            mark_known(a->second, r.reply.at);
        if (r.reply.ok && p.on_ok)
          p.on_ok();
        if (p.rp)
          p.rp->deliver(r.reply);
      },
      [=](timeout_atom, std::uint64_t id) {
        auto& st = self->state;
        auto i = st.pending.find(id);
        if (i == st.pending.end())
          return;
        auto p = std::move(i->second);
        st.pending.erase(i);
        if (p.rp)
          p.rp->deliver(
              unavailable(fmt::format("node {} did not answer the {} order within {} ms",
                                      st.row.name, p.op, st.ctx->cfg.order_timeout.count())));
      },
      // The node's identity was replaced (its old token revoked): the old
      // connection no longer speaks for it, the next one that authenticates does.
      [=](peer_atom) {
        auto& st = self->state;
        fail_orders_not_on(self, "", fmt::format("node {} was replaced", st.row.name));
        st.peer.clear();
        st.daemon.clear();
        st.peer_seen_ms = 0;
      },
      [=](down_atom) {
        auto& st = self->state;
        st.down_check = false;
        auto now = now_ms(self, *st.ctx);
        if (now - st.peer_seen_ms < st.ctx->cfg.node_timeout_ms) {
          schedule_down_check(self);
          return;
        }
        if (st.down)
          return;
        st.down = true;
        st.info.online = false;
        spdlog::warn("node {} is down: no heartbeat for {} ms; its allocations are unknown",
                     st.row.name, now - st.peer_seen_ms);
        for (auto& [id, a] : st.allocs)
          self->send(a.handle, down_atom::value);
        announce(self);
      },
      [=](approve_atom, bool approved) {
        policy::set_state(self->state.row, approved ? "approved" : "pending");
        announce(self);
      },
      [=](enable_atom, bool enabled, const std::string& reason) {
        self->state.row.enabled = enabled;
        self->state.row.disabled_reason = reason;
        announce(self);
      },
      [=](expect_atom, const std::string& id) { self->state.expected.insert(id); },
      [=](attach_atom, const std::string& id, allocation_actor a, bool known) {
        auto& st = self->state;
        st.expected.erase(id);
        // Attached after the heartbeat that listed it (recovery): found.
        if (st.beats > 0 && !st.down &&
            std::find(st.listed.begin(), st.listed.end(), id) != st.listed.end())
          self->send(a, found_atom::value);
        st.allocs[id] = alloc_ref{std::move(a), known, false};
        self->state.info.running = self->state.allocs.size();
      },
      [=](detach_atom, const std::string& id, bool exited) {
        self->state.allocs.erase(id);
        if (exited)
          self->state.exited.insert(id);
        announce(self);
      },
      [=](timeout_atom, const std::string& id) {
        if (auto a = self->state.allocs.find(id); a != self->state.allocs.end())
          self->send(a->second.handle, timeout_atom::value);
      },
      [=](bus::start_order& o) {
        auto id = o.allocation;
        // Invariant 8: the expiry, stated on the node's clock.
        if (o.expires_ms && self->state.clock_offset_ms)
          *o.expires_ms += *self->state.clock_offset_ms;
        return send_order(self, std::move(o), "start", id);
      },
      [=](bus::stop_order& o) { return send_order(self, std::move(o), "stop"); },
      // INTERNAL: stop `allocation` with no grace, nobody waiting (a given-up start).
      [=](stop_atom, const std::string& allocation) {
        auto& st = self->state;
        send_order(self, bus::stop_order{allocation, 0}, "stop", {}, false);
        // Invariant 6 at once: the node came back listing it as it was given
        // away; it gets no new work until it no longer lists it, from now on,
        // not from its next heartbeat (cq-sim seed 3159).
        if (!st.down &&
            std::find(st.listed.begin(), st.listed.end(), allocation) != st.listed.end()) {
          ++st.fenced;
          announce(self);
        }
        return true;
      },

      [=](bus::yield_order& o) { return send_order(self, std::move(o), "yield"); },
      [=](bus::read_log_order& o) { return send_order(self, std::move(o), "read_log"); },
      [=](bus::terminal_order& o) { return send_order(self, std::move(o), "write_terminal"); },
      [=](bus::release_order& o) {
        // The coordinator stops honouring the hold as soon as the node confirms;
        // the node's next heartbeat says the same.
        auto id = o.hold;
        return send_order(self, std::move(o), "release", {}, true, [=] {
          auto& h = self->state.info.holds;
          h.erase(std::remove_if(h.begin(), h.end(), [&](auto& x) { return x.id == id; }), h.end());
          announce(self);
        });
      },
      [=](bus::forget_order& o) {
        auto& st = self->state;
        if (!st.peer.empty() && !st.down && st.beats > 0) {
          send_order(self, std::move(o), "forget", {}, false);
          return;
        }
        // Kept for the next heartbeat, merged while they fit one order.
        auto& w = st.forgets_waiting;
        if (!w.empty() && w.back().jobs.size() + o.jobs.size() <= bus::forget_order_items &&
            w.back().allocations.size() + o.allocations.size() <= bus::forget_order_items) {
          w.back().jobs.insert(w.back().jobs.end(), o.jobs.begin(), o.jobs.end());
          w.back().allocations.insert(w.back().allocations.end(), o.allocations.begin(),
                                      o.allocations.end());
        } else if (w.push_back(std::move(o)); w.size() > forgets_waiting_max) {
          w.pop_front();
        }
      },
      [=](bus::clear_fault_order& o) {
        return send_order(self, std::move(o), "clear_fault", {}, true, [=] {
          self->state.info.fault.reset();
          announce(self);
        });
      },
  };
}

} // namespace

node_actor spawn_node(caf::actor_system& sys, context_ptr ctx, node_row row) {
  return sys.spawn(node_behavior, std::move(ctx), std::move(row));
}

} // namespace cq::coord
