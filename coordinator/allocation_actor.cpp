// The allocation actor: one per live allocation. It carries the allocation's
// orders to its node actor until the node takes them, its reports to the job
// actor, and gives up a start that no connection of the node ever took.
//
// Orders are state, not messages (SPEC section 10):
//  1. The start order is sent until the node acknowledges it (the node then
//     holds the allocation durably) or reports about it; never once a stop is
//     requested.
//  2. A requested stop (the job is stopping: durable as the job's state) and a
//     requested yield (durable as the allocation's yield_requested_ms) are
//     sent until the node acknowledges them.
//  Unacknowledged orders are re-sent when the node reconnects (resend_atom)
//  and every order_retry while the node does not answer; at most one request
//  per kind of order is in flight.
//  3. Without an acknowledgement or a report within start_timeout (counted
//     from the latest connection of the node that was given the order) the
//     start is fenced: the job commits the allocation unknown with stop cause
//     fence and the node is sent a stop until it takes it. Every start order
//     carries that deadline (expires_ms, on the node's clock as the node
//     actor knows it), after which the node will not launch it. The start is
//     given up (the job requeued) only when the node reports the
//     allocation's exit, which it does after the cleanup of anything that
//     ran (or at once for a start it never launched), so that no two
//     attempts of a job are ever alive together (docs/adr/0023); a node that
//     never reports leaves it to the job's lost-after (docs/adr/0021). After
//     an acknowledgement the node's heartbeats decide: one that no longer
//     lists the allocation makes it lost (node actor, invariant 3).
//  4. The start order's command and environment come with the order (the
//     job actor read them beside the placement's commit) or are read from
//     the store when needed (an order without a command), and are dropped
//     once the node took the order.
//  5. An allocation its node listed again after it was down (found) is not
//     given up for lost-after: the job's lost-after check may have fired
//     before the found reached it, and the node runs it (cq-sim seed 2647).
//     A stop in flight (a fence, a cancel) still ends it as lost.
//  6. One exit report at a time reaches the job actor, which ends once it
//     has recorded the exit. While it is there, a start report for the
//     allocation (a node may send it after the exit, for a job shorter than
//     its start's report) is acknowledged without reaching the job, and a
//     repeat of the exit (the node re-sends what it has no answer for) gets
//     the first one's answer. Sent on to the job, either found no receiver
//     and was refused, and the node sent it again a re-send period later.
//     Once the exit is recorded the actor ends only when its node actor has
//     dropped it (the detach's answer): a report the node actor sent on
//     before that comes here first and is acknowledged, not refused.
#include "internal.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

namespace {

struct allocation_state {
  context_ptr ctx;                       ///< shared seams and handles
  std::string id;                        ///< allocation id
  node_actor node;                       ///< node actor the allocation lives on
  job_actor job;                         ///< the job actor that owns it
  std::optional<bus::start_order> order; ///< until the node took it (1, 4)
  bool order_ready = false;              ///< argv and env are loaded into `order`
  bool start_acked = false;              ///< the node took the start order
  bool confirmed = false;                ///< the node reported the start
  bool stop = false;                     ///< a stop is requested (2)
  bool stop_acked = false;               ///< the node took the stop order
  bool yield = false;                    ///< a yield is requested (2)
  bool yield_acked = false;              ///< the node took the yield order
  bool start_busy = false, stop_busy = false, yield_busy = false; ///< requests in flight
  bool retry_scheduled = false;                                   ///< a retry_atom is on its way
  bool ended = false; ///< lost or exited: nothing more is sent
  /// The exit report is with the job actor (6): a repeat of it waits here
  /// for that answer, a start report is answered at once.
  bool exiting = false;
  bool exit_recorded = false; ///< the job acknowledged the exit (6)
  std::vector<std::pair<caf::typed_response_promise<bus::report_rep>, std::uint64_t>> exit_waiters;
  bool found = false; ///< its node listed it again after it was down (5)
  /// When an unanswered start is given up (invariant 3): start_timeout after
  /// the latest connection of the node was given the order.
  caf::actor_clock::time_point start_deadline;
  static inline const char* name = "cq.allocation";
};

using alloc_ptr = allocation_actor::stateful_pointer<allocation_state>;

bool retryable(const order_reply& r) {
  return r.error.code == errc::unavailable || r.error.code == errc::internal;
}

void push(alloc_ptr self);

/// Arms the start deadline `d` from now (invariant 3). The timeout comes
/// through the node actor, which forwards it while this allocation is
/// attached: a delayed message to itself would hold this actor until it
/// came, start_timeout (30 s) after every start, long after the allocation
/// ended, and the memory of thousands of ended allocations with it during
/// a drain (docs/adr/0070). Sent without a sender, for the same reason.
void arm_start_deadline(alloc_ptr self, caf::actor_clock::duration_type d) {
  caf::delayed_anon_send(self->state.node, d, timeout_atom::value, self->state.id);
}

void schedule_retry(alloc_ptr self) {
  auto& st = self->state;
  if (st.retry_scheduled || st.ended)
    return;
  st.retry_scheduled = true;
  self->delayed_send(self, st.ctx->cfg.order_retry, retry_atom::value);
}

/// Invariant 3: tells the job and, once the job committed the loss, fences
/// the node and ends this actor. Until then the node's reports about the
/// allocation still come here (and reach the job after the loss), so none
/// is acknowledged before the allocation's end is stored.
void give_up(alloc_ptr self, std::string why) {
  auto& st = self->state;
  if (st.ended)
    return;
  st.ended = true;
  spdlog::warn("allocation {}: {}", st.id, why);
  // First the node: told to stop it (should the start still reach it, it must
  // not keep given-away work), and fenced while it lists it; only then the
  // job, whose next attempt must not land beside it.
  self->request(st.node, caf::infinite, stop_atom::value, st.id).then([=](bool) {
    self->request(self->state.job, caf::infinite, lost_atom::value, self->state.id, why)
        .then([=](bool) {
          auto& st = self->state;
          self->send(st.node, detach_atom::value, st.id, false);
          self->quit();
        });
  });
}

void push(alloc_ptr self) {
  auto& st = self->state;
  if (st.ended)
    return;
  auto grace = static_cast<std::uint64_t>(st.ctx->cfg.stop_grace.count());
  if (st.stop) {
    if (!st.stop_acked && !st.stop_busy) {
      st.stop_busy = true;
      self->request(st.node, caf::infinite, bus::stop_order{st.id, grace})
          .then([=](const order_reply& r) {
            auto& st = self->state;
            st.stop_busy = false;
            if (r.ok) {
              // A fenced start (invariant 3) ends with the exit report the
              // node sends once nothing of it runs there.
              st.stop_acked = true;
            } else if (retryable(r))
              schedule_retry(self);
            else
              spdlog::error("allocation {}: the node refused the stop order: {}", st.id,
                            r.error.message);
          });
    }
  } else if (st.order && st.order_ready && !st.start_acked && !st.confirmed && !st.start_busy) {
    st.start_busy = true;
    // Invariant 3: the order expires when it would be fenced (the
    // coordinator's wall clock here; the node actor restates it on the node's).
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(st.start_deadline -
                                                                      self->clock().now());
    st.order->expires_ms = now_ms(self, *st.ctx) + std::max<std::int64_t>(0, left.count());
    self->request(st.node, caf::infinite, *st.order).then([=](const order_reply& r) {
      auto& st = self->state;
      st.start_busy = false;
      if (r.ok) {
        st.start_acked = true;
        st.order.reset(); // invariant 4
      } else if (retryable(r)) {
        schedule_retry(self);
      } else {
        give_up(self, "the node refused the start order: " + r.error.message);
      }
    });
  }
  if (st.yield && !st.stop && !st.yield_acked && !st.yield_busy) {
    st.yield_busy = true;
    self->request(st.node, caf::infinite, bus::yield_order{st.id}).then([=](const order_reply& r) {
      auto& st = self->state;
      st.yield_busy = false;
      if (r.ok)
        st.yield_acked = true;
      else if (retryable(r))
        schedule_retry(self);
      else
        spdlog::warn("allocation {}: the node refused the yield order: {}", st.id, r.error.message);
    });
  }
}

allocation_actor::behavior_type allocation_behavior(alloc_ptr self, context_ptr ctx, std::string id,
                                                    node_actor node, job_actor job,
                                                    std::uint64_t job_seq,
                                                    std::optional<bus::start_order> order,
                                                    bool confirmed, bool stopping, bool yield) {
  auto& st = self->state;
  st.ctx = ctx, st.id = id, st.node = node, st.job = job, st.confirmed = confirmed;
  st.stop = stopping;
  st.yield = yield;
  self->send(node, attach_atom::value, id, caf::actor_cast<allocation_actor>(self), confirmed);
  if (order && !confirmed && !stopping && !order->argv.empty()) {
    st.order = std::move(order); // the job actor read them (invariant 4)
    st.order_ready = true;
  } else if (order && !confirmed && !stopping) {
    st.order = std::move(order);
    auto job_id = st.order->job;
    self->request(ctx->store, caf::infinite, load_atom::value, job_seq, job_id)
        .then(
            [=](job_payload& p) {
              auto& st = self->state;
              if (!st.order)
                return;
              st.order->argv = std::move(p.argv);
              st.order->env = std::move(p.env);
              st.order_ready = true;
              push(self);
            },
            [=](caf::error& e) {
              // The job's row was committed before this actor existed: a store
              // that cannot read it back cannot be trusted.
              auto why = fmt::format("allocation {}: cannot read job {} from the store: {}", id,
                                     job_id, to_string(e));
              spdlog::critical("{}", why);
              if (self->state.ctx->fatal)
                self->state.ctx->fatal(why);
            });
  }
  if (!confirmed) {
    self->state.start_deadline = self->clock().now() + ctx->cfg.start_timeout;
    arm_start_deadline(self, ctx->cfg.start_timeout);
  }
  push(self);
  return {
      [=](report_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (st.exit_recorded) // invariant 6: after the exit, nothing changes
          return bus::report_rep{r.seq};
        if (r.kind == "started") {
          if (st.exiting) // invariant 6: the exit decides
            return bus::report_rep{r.seq};
          st.confirmed = true;
          st.order.reset();
          auto rp = self->make_response_promise<bus::report_rep>();
          rp.delegate(st.job, started_atom::value, r);
          return rp;
        }
        auto rp = self->make_response_promise<bus::report_rep>();
        if (st.exiting) { // invariant 6: a repeat waits for the first one's answer
          st.exit_waiters.emplace_back(rp, r.seq);
          return rp;
        }
        st.exiting = true;
        self->request(st.job, caf::infinite, exited_atom::value, r)
            .then(
                [=](bus::report_rep ack) mutable {
                  rp.deliver(ack);
                  auto& st = self->state;
                  for (auto& [waiter, seq] : st.exit_waiters)
                    waiter.deliver(bus::report_rep{seq});
                  st.exit_waiters.clear();
                  st.ended = true;
                  st.exit_recorded = true;
                  self->request(st.node, caf::infinite, detach_atom::value, st.id, true)
                      .then([=] { self->quit(); }, [=](caf::error&) { self->quit(); });
                },
                [=](caf::error& e) mutable {
                  rp.deliver(e);
                  auto& st = self->state;
                  for (auto& [waiter, seq] : st.exit_waiters)
                    waiter.deliver(e);
                  st.exit_waiters.clear();
                  st.exiting = false; // not recorded: the node sends it again
                });
        return rp;
      },
      [=](timeout_atom) {
        auto& st = self->state;
        if (st.confirmed || st.start_acked)
          return;
        if (auto now = self->clock().now(); now < st.start_deadline) {
          // A newer connection was given the order since: it has its own time.
          arm_start_deadline(self, st.start_deadline - now);
          return;
        }
        // Invariant 3: fenced, not given up, while the node may still run it.
        spdlog::warn("allocation {}: no connection of the node took the start order within {} ms; "
                     "stopping it there before it is given up",
                     st.id, st.ctx->cfg.start_timeout.count());
        if (!st.stop) // else a stop is on its way or taken: the exit report ends it
          self->send(st.job, stop_atom::value, st.id); // commits the fence, then stop_atom here
      },
      [=](missing_atom) {
        give_up(self, "the node no longer lists it (its daemon lost track of it)");
      },
      [=](lost_atom, const std::string& why) {
        auto& st = self->state;
        if (st.found && !st.stop) { // invariant 5
          spdlog::info("allocation {}: not lost ({}): its node lists it again", st.id, why);
          return;
        }
        give_up(self, why);
      },
      [=](down_atom) {
        auto& st = self->state;
        st.found = false;
        // Only what the node took can run there; an unacknowledged start
        // keeps its own deadline (invariant 3).
        if (!st.ended && (st.confirmed || st.start_acked))
          self->send(st.job, unknown_atom::value, st.id);
      },
      [=](found_atom) {
        auto& st = self->state;
        st.found = true; // its node lists it (after a down, or a restart)
        if (!st.ended)
          self->send(st.job, found_atom::value, st.id);
      },
      [=](resend_atom) {
        // The node reconnected: what its old connection did not answer is lost.
        // A start re-sent now gets the whole start_timeout on this connection:
        // giving it up sooner would place the job again while this order may
        // still start it (cq-sim seed 204566: given up 9 ms after a re-send).
        auto& st = self->state;
        if (!st.confirmed && !st.start_acked && !st.stop)
          st.start_deadline = self->clock().now() + st.ctx->cfg.start_timeout;
        push(self);
      },
      [=](retry_atom) {
        self->state.retry_scheduled = false;
        push(self);
      },
      [=](stop_atom) {
        self->state.stop = true;
        push(self);
      },
      [=](yield_atom) {
        self->state.yield = true;
        push(self);
      },
  };
}

} // namespace

allocation_actor spawn_allocation(caf::local_actor* parent, context_ptr ctx, std::string id,
                                  node_actor node, job_actor job, std::uint64_t job_seq,
                                  std::optional<bus::start_order> order, bool confirmed,
                                  bool stopping, bool yield) {
  // Linked: an allocation actor never outlives its job actor's abnormal end.
  auto a = parent->spawn(allocation_behavior, std::move(ctx), std::move(id), std::move(node),
                         std::move(job), job_seq, std::move(order), confirmed, stopping, yield);
  parent->link_to(a);
  return a;
}

} // namespace cq::coord
