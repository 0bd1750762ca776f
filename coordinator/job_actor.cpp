// The job actor: one per non-terminal job that was placed or acted on (a
// queued job waits without one, in the api and the scheduler's queue, until
// then: api/parked.cpp). It owns the job's row and its live allocation's row
// (the only writer of both, once it exists), turns placements, reports,
// cancels and losses into committed changes, and keeps the scheduler's view of
// the job current. The steps several handlers share (commits, events,
// requeues, the scheduler's views) are in job_steps.cpp.
//
// Invariants:
//  1. A transition is applied in memory (and answered) only after its change
//     records are committed; a commit suspends the job's other messages
//     (transitions apply one at a time).
//  2. A job has at most one live allocation (and one allocation actor).
//  3. The job's command and environment are not held here (the store keeps
//     them; they are read for the start order beside the placement's commit
//     and handed to the allocation actor, which reads them itself when they
//     are not there), and the serving order (priority, rank) is the api
//     actor's: a move arrives here already committed, as (move_atom,
//     priority, rank), and only re-keys the job where the scheduler still
//     queues it.
//  4. An exit is a checkpoint only when this coordinator asked the allocation
//     to yield (its yield_requested_ms); a job cannot declare its own.
//  5. A commit that fails where no caller can be told (a placement, a loss)
//     stops the coordinator (ctx.fatal): it recovers from the store.
//  6. Every event of the job is committed in the batch of the change that
//     causes it, with the next seq (gapless from 1, SPEC section 8).
//  7. Node loss (docs/adr/0021): an allocation whose node is down is unknown;
//     it is lost once it has been unknown for the job's lost-after (counted
//     from the durable unknown_since_ms, so across restarts), and only then
//     may the job run elsewhere. Its resources stay reserved until then.
//  8. A yield request is committed (yield_requested_ms) before the node hears
//     it; if the job has not exited within yield_grace it is stopped (stop
//     cause yield) and requeued, without resume.
//  9. The one exception to invariant 1 (docs/adr/0057): an allocation whose
//     exit its node reported gives its resources back to the scheduler when
//     its commit is sent, not when it is durable. The node reports an exit
//     after its cleanup, so they are free in fact (what a cleanup could not
//     confirm becomes a hold, which the node's heartbeat reports before the
//     exit); the store commits in the order it receives (one mailbox, a group
//     commit that keeps it), so a placement on them is durable only with or
//     after the exit, unless the exit's batch fails alone (then the node
//     sends the exit again, and until it is committed the scheduler's books
//     count more than the node runs, never less); and both commits share one
//     sync when they meet there. A lost allocation keeps them until its node
//     no longer lists it (invariant 7).
#include "cq/bus/codec.hpp"
#include "job_steps.hpp"
#include "policy/transitions.hpp"

#include <caf/all.hpp>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;
using namespace job_impl;

namespace {

job_actor::behavior_type job_behavior(job_ptr self, context_ptr ctx, job_row row,
                                      std::optional<bus::allocation_info> live, node_actor node,
                                      std::set<std::string> waiting_on,
                                      failed_dependency failed_dep, bool resume,
                                      std::uint64_t last_event, bool queued) {
  auto& st = self->state;
  st.ctx = ctx;
  st.resume = resume;
  st.last_event = last_event;
  st.row = std::move(row);
  // Invariant 3: the store keeps these.
  st.row.env.reset();
  st.row.info.argv.clear();
  st.waiting_on = std::move(waiting_on);
  if (live) {
    st.alloc = live;
    bool starting = live->state == alloc_state::starting ||
                    (live->state == alloc_state::unknown && live->started_ms == 0);
    bool stopping = st.row.info.state == job_state::stopping || !live->stop_cause.empty();
    std::optional<bus::start_order> order;
    if (starting)
      order = make_order(*ctx, st.row, *live, 0, st.resume);
    st.alloc_actor =
        spawn_allocation(self, ctx, live->id, node, caf::actor_cast<job_actor>(self), st.row.seq,
                         order, !starting, stopping, live->yield_requested_ms != 0);
    reserve(self, est_end(self, live->started_ms ? live->started_ms : now_ms(self, *ctx)));
    schedule_lost_check(self, *live);
    schedule_yield_check(self, *live);
  } else if (st.row.info.state != job_state::queued) {
    // A live state without a live allocation (a store written by an older
    // version): a stop that was acknowledged ends cancelled, anything else is
    // queued again.
    job_row next = st.row;
    bool stopping = next.info.state == job_state::stopping;
    policy::set_state(next.info, stopping ? job_state::cancelled : job_state::queued);
    if (stopping)
      next.info.reason = bus::reason::cancelled, next.info.finished_ms = now_ms(self, *ctx);
    commit(
        self, {next},
        [=] {
          self->state.row = next;
          publish(self);
          if (stopping)
            self->quit();
          else
            enqueue(self);
        },
        stop_on_error(self));
  } else if (!failed_dep.empty()) {
    fail_dependency(self, failed_dep.job, failed_dep.state);
  } else if (!queued) {
    enqueue(self);
  }
  return {
      [=](place_atom, const std::string& node_name, node_actor node, const bus::string_list& lanes,
          std::uint64_t floor) {
        auto& st = self->state;
        // A placement the scheduler made before a hold, a cancel or an end
        // reached it: given back (the job may not start now).
        if (st.row.info.state != job_state::queued || st.alloc || st.row.info.on_hold) {
          self->send(st.ctx->scheduler, release_atom::value, st.row.info.id);
          return;
        }
        auto now = now_ms(self, *st.ctx);
        bus::allocation_info a;
        a.id = st.ctx->new_allocation_id(now);
        a.job = st.row.info.id;
        a.node = node_name;
        policy::set_state(a, alloc_state::starting);
        a.attempt = st.row.info.attempt + 1;
        a.lanes = lanes;
        a.created_ms = now;
        job_row next = st.row;
        policy::set_state(next.info, job_state::starting);
        next.info.node = node_name;
        next.info.allocation = a.id;
        next.info.attempt = a.attempt;
        next.info.lanes = lanes;
        change_batch batch{next, a};
        // A diagnostic grant is consumed in the placement's own transaction:
        // the job starts at most once under it.
        std::optional<bus::grant_info> ended;
        if (st.grant && st.grant->node == node_name)
          ended = end_grant(self, batch, "consumed", now);
        add_event(self, batch, "placed",
                  fmt::format("node {}, attempt {}{}{}", node_name, a.attempt,
                              lanes.empty() ? "" : ", lanes ", fmt::join(lanes, ",")));
        // Invariant 3: the start order's command and environment, read while
        // the placement's commit waits for its sync rather than after it.
        // Asked first, the store answers the read before it takes the commit
        // (a group commit waits behind the messages already in its mailbox);
        // awaited last, it is handled first, so they are here when the
        // commit's answer is.
        st.payload.reset();
        auto load =
            self->request(st.ctx->store, caf::infinite, load_atom::value, next.seq, next.info.id);
        commit(
            self, std::move(batch),
            [=] {
              auto& st = self->state;
              st.row = next;
              st.alloc = a;
              st.ram_floor_bytes = floor;
              grant_ended(self, ended);
              auto order = make_order(*st.ctx, next, a, floor, st.resume);
              // Invariant 3: read beside the commit (above), handed on whole;
              // without it the allocation actor reads them itself.
              if (st.payload) {
                order.argv = std::move(st.payload->argv);
                order.env = std::move(st.payload->env);
                st.payload.reset();
              }
              st.alloc_actor =
                  spawn_allocation(self, st.ctx, a.id, node, caf::actor_cast<job_actor>(self),
                                   next.seq, std::move(order), false, false, false);
              publish(self);
            },
            stop_on_error(self));
        load.await([=](job_payload& p) { self->state.payload = std::move(p); },
                   [](caf::error&) {}); // the allocation actor reads them (and decides)
      },
      [=](started_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != r.allocation ||
            (st.alloc->state != alloc_state::starting &&
             !(st.alloc->state == alloc_state::unknown && st.alloc->started_ms == 0)))
          return bus::report_rep{r.seq}; // duplicate or stale: nothing to do
        auto rp = self->make_response_promise<bus::report_rep>();
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.started_ms = now;
        if (a.stop_cause != "fence") { // a fenced start stays unknown until its stop is taken
          policy::set_state(a, alloc_state::running);
          a.unknown_since_ms = 0;
        }
        job_row next = st.row;
        if (next.info.state == job_state::starting)
          policy::set_state(next.info, job_state::running);
        next.info.started_ms = now;
        change_batch batch{next, a};
        add_event(self, batch, "started",
                  fmt::format("node {}{}", a.node, st.resume ? ", resumed (CQ_RESUME=1)" : ""));
        commit(
            self, std::move(batch),
            [=]() mutable {
              self->state.row = next;
              self->state.alloc = a;
              publish(self);
              reserve(self, est_end(self, now));
              rp.deliver(bus::report_rep{r.seq});
            },
            [=](bus::error_info e) mutable {
              rp.deliver(caf::make_error(caf::sec::runtime_error, e.message));
            });
        return rp;
      },
      [=](exited_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        return on_exit(self, r);
      },
      [=](lost_atom, const std::string& alloc_id, const std::string& why) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id)
          return true; // already ended: nothing to commit
        auto rp = self->make_response_promise<bool>();
        on_lost(self, *st.alloc, why, [rp]() mutable { rp.deliver(true); });
        return rp;
      },
      // Invariant 7: the node is down; the allocation may still run there.
      [=](unknown_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->state == alloc_state::unknown)
          return;
        auto a = *st.alloc;
        policy::set_state(a, alloc_state::unknown);
        a.unknown_since_ms = now_ms(self, *st.ctx);
        commit(
            self, {a},
            [=] {
              self->state.alloc = a;
              publish(self);
              schedule_lost_check(self, a);
            },
            stop_on_error(self));
      },
      [=](found_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->state != alloc_state::unknown ||
            st.alloc->stop_cause == "fence")
          return;
        auto a = *st.alloc;
        policy::set_state(a, a.started_ms ? alloc_state::running : alloc_state::starting);
        a.unknown_since_ms = 0;
        commit(
            self, {a},
            [=] {
              self->state.alloc = a;
              publish(self);
            },
            stop_on_error(self));
      },
      // Invariant 7's sibling: a start no connection took is fenced. It is
      // unknown (lost after lost-after) until the node takes its stop.
      [=](stop_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || !st.alloc->stop_cause.empty())
          return; // a stop (cancel or yield) is in flight already: its ack gives it up
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        policy::set_state(a, alloc_state::unknown);
        a.unknown_since_ms = now;
        a.stop_requested_ms = now;
        a.stop_cause = "fence";
        commit(
            self, {a},
            [=] {
              auto& st = self->state;
              st.alloc = a;
              publish(self);
              schedule_lost_check(self, a);
              if (st.alloc_actor)
                self->send(st.alloc_actor, stop_atom::value);
            },
            stop_on_error(self));
      },
      [=](timeout_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->state != alloc_state::unknown)
          return;
        auto after = lost_after_of(st);
        auto now = now_ms(self, *st.ctx);
        if (after == 0)
          return;
        if (now < st.alloc->unknown_since_ms + after) {
          schedule_lost_check(self, *st.alloc);
          return;
        }
        auto why = fmt::format("node {} has been down for {} ms (lost-after)", st.alloc->node,
                               now - st.alloc->unknown_since_ms);
        // The allocation actor fences the node and answers with lost_atom.
        if (st.alloc_actor)
          self->send(st.alloc_actor, lost_atom::value, why);
        else
          on_lost(self, *st.alloc, why, [] {});
      },
      // Invariant 8: the yield grace ran out.
      [=](lease_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->yield_requested_ms == 0 ||
            !st.alloc->stop_cause.empty() || st.row.info.state == job_state::stopping)
          return;
        auto grace = static_cast<std::int64_t>(st.ctx->cfg.yield_grace.count());
        auto now = now_ms(self, *st.ctx);
        if (now < st.alloc->yield_requested_ms + grace) {
          schedule_yield_check(self, *st.alloc);
          return;
        }
        auto a = *st.alloc;
        a.stop_requested_ms = now;
        a.stop_cause = "yield";
        job_row next = st.row;
        policy::set_state(next.info, job_state::stopping);
        spdlog::info("job {}: no exit within the yield grace ({} ms); stopping it", next.info.id,
                     grace);
        commit(
            self, {next, a},
            [=] {
              auto& st = self->state;
              st.row = next;
              st.alloc = a;
              publish(self);
              reserve(self, est_end(self, a.started_ms));
              if (st.alloc_actor)
                self->send(st.alloc_actor, stop_atom::value);
            },
            stop_on_error(self));
      },
      [=](dep_atom, const std::string& dep, job_state dep_state) {
        auto& st = self->state;
        if (!st.waiting_on.count(dep))
          return;
        if (dep_state != job_state::succeeded) {
          if (st.row.info.state == job_state::queued)
            fail_dependency(self, dep, dep_state);
          return;
        }
        st.waiting_on.erase(dep);
        enqueue(self);
      },
      // Invariant 3: a committed move (or renumbered level) of this job.
      [=](move_atom, const std::string& priority, std::int64_t rank) {
        auto& st = self->state;
        st.row.info.priority = priority;
        st.row.rank = rank;
        // Re-keys a queued job in the scheduler's order; never queues it
        // again: the scheduler may have placed it since the api sent this
        // (the placement comes from the scheduler, the move from the api).
        enqueue(self, true);
      },
      [=](cancel_atom, const call_stamp& by) -> caf::result<api_reply> {
        auto& who = by.who;
        auto& st = self->state;
        auto state = st.row.info.state;
        if (cancel_requested(st))
          return api_reply{bus::cancel_rep{st.row.info}};
        auto rp = self->make_response_promise<api_reply>();
        auto now = now_ms(self, *st.ctx);
        job_row next = st.row;
        next.info.cancelled_by = who;
        bool queued = state == job_state::queued;
        bool already_stopping = state == job_state::stopping; // a yield's stop is in flight
        change_batch batch;
        if (queued) {
          policy::set_state(next.info, job_state::cancelled),
              next.info.reason = bus::reason::cancelled;
          next.info.finished_ms = now;
        } else {
          policy::set_state(next.info, job_state::stopping);
        }
        batch.push_back(next);
        std::optional<bus::allocation_info> a = st.alloc;
        if (a) {
          if (!a->stop_requested_ms)
            a->stop_requested_ms = now;
          a->stop_cause = "cancel";
          batch.push_back(*a);
        }
        batch.push_back(audit_row{now, who, by.role, "cancel", next.info.id,
                                  std::string(to_string(next.info.state)), by.args});
        if (!by.operation_id.empty())
          batch.push_back(operation_row{by.operation_id, "cancel", by.args,
                                        bus::encode_body(bus::cancel_rep{next.info}), now});
        if (queued)
          add_event(self, batch, "cancelled", fmt::format("by {}", who));
        // Cancelling the pending job revokes its grant.
        auto revoked = end_grant(self, batch, "revoked", now);
        commit(
            self, std::move(batch),
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              if (a)
                st.alloc = a;
              grant_ended(self, revoked); // before publish: the api hears of it first
              publish(self);
              rp.deliver(api_reply{bus::cancel_rep{next.info}});
              if (queued) {
                leave_queue(self);
                self->quit();
              } else if (st.alloc) {
                reserve(self, est_end(self, st.alloc->started_ms));
                // A stop is state: the allocation actor sends it until the
                // node takes it (and never sends the start again).
                if (st.alloc_actor && !already_stopping)
                  self->send(st.alloc_actor, stop_atom::value);
              }
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      // cq hold / cq release JOB: a queued job kept from starting, or let go.
      [=](park_atom, bool hold, const call_stamp& by) -> caf::result<api_reply> {
        auto& st = self->state;
        const auto& j = st.row.info;
        if (j.state != job_state::queued)
          return api_reply{bus::error_info{
              errc::invalid_state,
              hold ? fmt::format("job {} is {}; cq hold keeps a queued job from starting (cq "
                                 "cancel stops one that runs)",
                                 j.id, j.state)
                   : fmt::format("job {} is {}; cq release lets a held job start, and only a "
                                 "queued job is held",
                                 j.id, j.state)}};
        if (j.on_hold == hold)
          return api_reply{bus::job_hold_rep{j}};
        auto rp = self->make_response_promise<api_reply>();
        auto now = now_ms(self, *st.ctx);
        job_row next = st.row;
        next.info.on_hold = hold;
        change_batch batch{next};
        batch.push_back(audit_row{now, by.who, by.role, "job_hold", next.info.id,
                                  hold ? "held" : "released", by.args});
        if (!by.operation_id.empty())
          batch.push_back(operation_row{by.operation_id, "job_hold", by.args,
                                        bus::encode_body(bus::job_hold_rep{next.info}), now});
        add_event(self, batch, hold ? "on_hold" : "off_hold", fmt::format("by {}", by.who));
        commit(
            self, std::move(batch),
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              publish(self);
              rp.deliver(api_reply{bus::job_hold_rep{next.info}});
              if (hold)
                self->send(st.ctx->scheduler, dequeue_atom::value, next.info.id);
              else
                enqueue(self);
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      // Asks the running allocation to yield (a checkpointing job only). The
      // request is committed first, so the exit that follows counts as a
      // checkpoint (invariant 4) even across a restart.
      [=](yield_atom, const std::string& why, const call_stamp& by) -> caf::result<api_reply> {
        auto& st = self->state;
        auto& j = st.row.info;
        if (j.preempt != "checkpoint")
          return api_reply{bus::error_info{
              errc::invalid_state,
              fmt::format("job {} was submitted with --preempt {}: only a job submitted with "
                          "--preempt checkpoint can be asked to yield",
                          j.id, j.preempt)}};
        if (!st.alloc || j.state != job_state::running || st.alloc->state != alloc_state::running)
          return api_reply{bus::error_info{
              errc::invalid_state,
              fmt::format("job {} is {}: only a running job can be asked to yield", j.id,
                          st.alloc && st.alloc->state == alloc_state::unknown
                              ? std::string("on a node that is down")
                              : std::string(to_string(j.state)))}};
        if (st.alloc->yield_requested_ms != 0)
          return api_reply{bus::preempt_rep{j}};
        auto rp = self->make_response_promise<api_reply>();
        auto a = *st.alloc;
        a.yield_requested_ms = now_ms(self, *st.ctx);
        change_batch batch{a};
        add_event(self, batch, "yield_requested", why);
        if (!by.who.empty())
          batch.push_back(audit_row{a.yield_requested_ms, by.who, by.role, "preempt", j.id,
                                    "yield_requested", by.args});
        commit(
            self, std::move(batch),
            [=]() mutable {
              auto& st = self->state;
              st.alloc = a;
              publish(self);
              reserve(self, est_end(self, a.started_ms));
              schedule_yield_check(self, a);
              if (st.alloc_actor)
                self->send(st.alloc_actor, yield_atom::value);
              rp.deliver(api_reply{bus::preempt_rep{st.row.info}});
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      [=](event_atom, const std::string& kind, const std::string& detail) -> caf::result<bool> {
        auto& st = self->state;
        if (kind == "blocked" && st.row.info.state != job_state::queued)
          return false;
        auto rp = self->make_response_promise<bool>();
        change_batch batch;
        add_event(self, batch, kind, detail);
        commit(
            self, std::move(batch), [rp]() mutable { rp.deliver(true); }, stop_on_error(self));
        return rp;
      },
      // A one-job diagnostic grant: the rules that are this job's own are
      // checked here, where its state is (the api checked the node's).
      [=](grant_atom, bus::grant_info g, const call_stamp& by) -> caf::result<api_reply> {
        auto& st = self->state;
        auto& j = st.row.info;
        auto refuse = [&](std::string why) {
          return api_reply{bus::error_info{errc::invalid_state, "job: " + why}};
        };
        if (j.state != job_state::queued || st.alloc)
          return refuse(fmt::format("job {} is {}: a grant is for a queued job", j.id, j.state));
        if (j.attempt != 0 || j.started_ms != 0)
          return refuse(fmt::format("job {} already ran (attempt {}): a grant is for a job "
                                    "never started",
                                    j.id, j.attempt));
        if (!j.pinned_node || *j.pinned_node != g.node)
          return refuse(fmt::format("job {} is not pinned to node {} (submit it with --node {})",
                                    j.id, g.node, g.node));
        if (st.grant)
          return refuse(fmt::format("job {} already holds a grant on {}", j.id, st.grant->node));
        auto now = now_ms(self, *st.ctx);
        g.created_ms = now;
        g.state = "active";
        job_row next = st.row;
        next.info.diagnostic = true;
        change_batch batch{next, g,
                           audit_row{now, by.who, by.role, "node_diagnostic", g.node,
                                     fmt::format("granted job {}", j.id), by.args}};
        if (!by.operation_id.empty())
          batch.push_back(operation_row{by.operation_id, "node_diagnostic", by.args,
                                        bus::encode_body(bus::grant_rep{g}), now});
        auto rp = self->make_response_promise<api_reply>();
        commit(
            self, std::move(batch),
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              st.grant = g;
              publish(self);
              rp.deliver(api_reply{bus::grant_rep{g}});
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      [=](grant_atom, const bus::grant_info& g) { self->state.grant = g; },
  };
}

} // namespace

job_actor spawn_job(caf::actor_system& sys, context_ptr ctx, job_row row,
                    std::optional<bus::allocation_info> live, node_actor node,
                    std::set<std::string> waiting_on, failed_dependency failed_dep, bool resume,
                    std::uint64_t last_event, bool queued) {
  return sys.spawn(job_behavior, std::move(ctx), std::move(row), std::move(live), std::move(node),
                   std::move(waiting_on), std::move(failed_dep), resume, last_event, queued);
}

} // namespace cq::coord
