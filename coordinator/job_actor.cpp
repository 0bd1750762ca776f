// The job actor: one per non-terminal job. It owns the job's row and its live
// allocation's row (the only writer of both), turns placements, reports,
// cancels and losses into committed changes, and keeps the scheduler's view of
// the job current.
//
// Invariants:
//  1. A transition is applied in memory (and answered) only after its change
//     records are committed; a commit suspends the job's other messages
//     (transitions apply one at a time).
//  2. A job has at most one live allocation (and one allocation actor).
//  3. The job's command and environment are not held here (the store keeps
//     them; the allocation actor reads them for its start order), and the
//     serving order (priority, rank) is the api actor's: a move arrives here
//     already committed, as (move_atom, priority, rank).
//  4. An exit is a checkpoint only when this coordinator asked the allocation
//     to yield (its yield_requested_ms); a job cannot declare its own.
//  5. A commit that fails where no caller can be told (a placement, a loss)
//     stops the coordinator (ctx.fatal): it recovers from the store.
#include "internal.hpp"
#include "policy/outcome.hpp"
#include "policy/placement.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

namespace {

struct job_actor_state {
  context_ptr ctx;                           ///< shared seams and handles
  job_row row;                               ///< the committed job row (no argv, no env)
  std::optional<bus::allocation_info> alloc; ///< the live allocation's committed row
  allocation_actor alloc_actor;              ///< its actor (when `alloc` is set)
  std::set<std::string> waiting_on;          ///< dependencies that have not succeeded yet
  std::uint64_t ram_floor_bytes = 0;         ///< combined floor of the live allocation
  bool resume = false; ///< the last attempt checkpointed: the next one resumes (CQ_RESUME=1)
  static inline const char* name = "cq.job";
};

using job_ptr = job_actor::stateful_pointer<job_actor_state>;

void fatal(job_ptr self, const std::string& why) {
  spdlog::critical("job {}: {}", self->state.row.info.id, why);
  if (self->state.ctx->fatal)
    self->state.ctx->fatal(why);
}

/// Invariant 1: commits `batch`, suspending every other message of this job
/// until it is durable, then runs `on_ok` (or `on_err` with the reason).
template <class OnOk, class OnErr>
void commit(job_ptr self, change_batch batch, OnOk on_ok, OnErr on_err) {
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .await(
          [=](const commit_result& r) mutable {
            if (r.error.empty()) {
              on_ok();
            } else {
              spdlog::error("job {}: commit failed: {}", self->state.row.info.id, r.error);
              on_err(bus::error_info{errc::internal, "could not store the change: " + r.error});
            }
          },
          [=](caf::error& e) mutable {
            on_err(bus::error_info{errc::internal, "store unavailable: " + to_string(e)});
          });
}

/// Invariant 5: the on_err of commits nobody else hears about.
auto stop_on_error(job_ptr self) {
  return [=](bus::error_info e) { fatal(self, e.message); };
}

void publish(job_ptr self) {
  auto& st = self->state;
  self->send(st.ctx->api, job_atom::value, st.row);
  if (st.alloc)
    self->send(st.ctx->api, alloc_atom::value, *st.alloc);
}

std::uint8_t level_of(const bus::job_info& j) {
  auto l = policy::parse_level(j.priority);
  return static_cast<std::uint8_t>(l ? *l : policy::level::medium);
}

/// The job's resources, carried whole from here to its allocation's entry.
job_resources resources_of(const context& ctx, const bus::job_info& j) {
  job_resources r;
  r.ram_bytes = effective_ram(ctx, j);
  r.vram_bytes = j.vram_bytes.value_or(0);
  r.gpus = j.gpus;
  r.cpus = j.cpus;
  r.ram_floor_bytes = j.ram_floor_bytes;
  r.ram_start_min_bytes = j.ram_start_min_bytes;
  r.est_ms =
      static_cast<std::int64_t>(j.effective_est_ms ? j.effective_est_ms : ctx.cfg.default_est_ms);
  r.pinned_node = j.pinned_node;
  return r;
}

/// Puts the job in the scheduler's queue if it is queued and startable.
void enqueue(job_ptr self) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (j.state != job_state::queued || !st.waiting_on.empty() || st.alloc)
    return;
  queue_entry e;
  static_cast<job_resources&>(e) = resources_of(*st.ctx, j);
  e.job = j.id;
  e.seq = st.row.seq;
  e.level = level_of(j);
  e.rank = st.row.rank;
  e.checkpoint = j.preempt == "checkpoint";
  e.handle = caf::actor_cast<job_actor>(self);
  self->send(st.ctx->scheduler, enqueue_atom::value, std::move(e));
}

/// Tells the scheduler what the live allocation holds.
void reserve(job_ptr self, std::int64_t est_end_ms) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (!st.alloc)
    return;
  alloc_entry a{j.id,
                st.alloc->id,
                st.alloc->node,
                level_of(j),
                j.preempt == "checkpoint",
                j.state == job_state::stopping,
                resources_of(*st.ctx, j),
                st.ram_floor_bytes,
                st.alloc->lanes,
                est_end_ms};
  self->send(st.ctx->scheduler, reserve_atom::value, std::move(a));
}

std::int64_t est_end(job_ptr self, std::int64_t started_ms) {
  auto& j = self->state.row.info;
  auto est = j.effective_est_ms ? static_cast<std::int64_t>(j.effective_est_ms)
                                : self->state.ctx->cfg.default_est_ms;
  return started_ms + est;
}

/// The start order of allocation `a`, without the command and environment
/// (the allocation actor reads them from the store). The effective RAM is the
/// job's hard cap on the node, whatever it was derived from (SPEC section 3).
bus::start_order make_order(const context& ctx, const job_row& row, const bus::allocation_info& a,
                            std::uint64_t floor, bool resume) {
  auto& j = row.info;
  auto r = resources_of(ctx, j); // the same derivation as the queue's and the allocation's
  bus::start_order o;
  o.allocation = a.id;
  o.job = j.id;
  o.attempt = a.attempt;
  o.cwd = j.cwd;
  o.ram_bytes = r.ram_bytes;
  o.lanes = a.lanes;
  if (floor || r.ram_start_min_bytes) {
    o.ram_floor_bytes = floor;
    o.ram_start_min_bytes = r.ram_start_min_bytes;
  }
  o.vram_bytes = j.vram_bytes; // absent stays absent on the wire
  o.timeout_ms = j.timeout_ms;
  if (resume)
    o.resume = true;
  return o;
}

/// Ends the live allocation with `a`'s final fields and moves the job to `row`'s state.
void finish(job_ptr self, bus::allocation_info a, job_row row, std::function<void()> then,
            std::function<void(bus::error_info)> on_err) {
  commit(
      self, {row, a},
      [=]() mutable {
        auto& st = self->state;
        st.row = row;
        st.alloc = a;
        publish(self);
        st.alloc.reset();
        st.alloc_actor = nullptr;
        self->send(st.ctx->scheduler, release_atom::value, row.info.id);
        then();
      },
      on_err);
}

/// Fails a job that never started because a dependency did not succeed.
void fail_dependency(job_ptr self, const std::string& dep, job_state dep_state) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = st.row;
  next.info.state = job_state::failed;
  next.info.reason = bus::reason::dependency_failed;
  next.info.finished_ms = now;
  spdlog::info("job {}: dependency {} is {}; failing", next.info.id, dep, to_string(dep_state));
  commit(
      self, {next},
      [=] {
        self->state.row = next;
        publish(self);
        self->send(self->state.ctx->scheduler, dequeue_atom::value, next.info.id);
        self->quit();
      },
      stop_on_error(self));
}

/// Back to its old slot in the queue (its rank is unchanged), or cancelled if
/// a cancel came meanwhile, after allocation `a` ended without the job's fault.
void requeue(job_ptr self, bus::allocation_info a, bool resume, std::function<void()> then,
             std::function<void(bus::error_info)> on_err) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = st.row;
  bool cancelled = next.info.state == job_state::stopping;
  if (cancelled) {
    next.info.state = job_state::cancelled, next.info.reason = bus::reason::cancelled;
    next.info.finished_ms = now;
  } else {
    next.info.state = job_state::queued;
    next.info.lanes.clear();
  }
  finish(
      self, a, next,
      [=] {
        then();
        if (cancelled) {
          self->quit();
        } else {
          self->state.resume = resume;
          enqueue(self);
        }
      },
      on_err);
}

job_actor::behavior_type job_behavior(job_ptr self, context_ptr ctx, job_row row,
                                      std::optional<bus::allocation_info> live, node_actor node,
                                      std::set<std::string> waiting_on, std::string failed_dep,
                                      bool resume) {
  auto& st = self->state;
  st.ctx = ctx;
  st.resume = resume;
  st.row = std::move(row);
  // Invariant 3: the store keeps these.
  st.row.env.clear();
  st.row.info.argv.clear();
  st.waiting_on = std::move(waiting_on);
  if (live) {
    st.alloc = live;
    bool starting = live->state == alloc_state::starting;
    bool stopping = st.row.info.state == job_state::stopping;
    std::optional<bus::start_order> order;
    if (starting)
      order = make_order(*ctx, st.row, *live, 0, st.resume);
    st.alloc_actor = spawn_allocation(self, ctx, live->id, node, caf::actor_cast<job_actor>(self),
                                      order, !starting, stopping, live->yield_requested_ms != 0);
    reserve(self, est_end(self, live->started_ms ? live->started_ms : now_ms(self, *ctx)));
  } else if (st.row.info.state != job_state::queued) {
    // A live state without a live allocation (a store written by an older
    // version): a stop that was acknowledged ends cancelled, anything else is
    // queued again.
    job_row next = st.row;
    bool stopping = next.info.state == job_state::stopping;
    next.info.state = stopping ? job_state::cancelled : job_state::queued;
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
    fail_dependency(self, failed_dep, job_state::failed);
  } else {
    enqueue(self);
  }
  return {
      [=](place_atom, const std::string& node_name, node_actor node, const bus::string_list& lanes,
          std::uint64_t floor) {
        auto& st = self->state;
        if (st.row.info.state != job_state::queued || st.alloc) {
          self->send(st.ctx->scheduler, release_atom::value, st.row.info.id);
          return;
        }
        auto now = now_ms(self, *st.ctx);
        bus::allocation_info a;
        a.id = st.ctx->new_id();
        a.job = st.row.info.id;
        a.node = node_name;
        a.state = alloc_state::starting;
        a.attempt = st.row.info.attempt + 1;
        a.lanes = lanes;
        a.created_ms = now;
        job_row next = st.row;
        next.info.state = job_state::starting;
        next.info.node = node_name;
        next.info.allocation = a.id;
        next.info.attempt = a.attempt;
        next.info.lanes = lanes;
        commit(
            self, {next, a},
            [=] {
              auto& st = self->state;
              st.row = next;
              st.alloc = a;
              st.ram_floor_bytes = floor;
              st.alloc_actor = spawn_allocation(
                  self, st.ctx, a.id, node, caf::actor_cast<job_actor>(self),
                  make_order(*st.ctx, next, a, floor, st.resume), false, false, false);
              publish(self);
            },
            stop_on_error(self));
      },
      [=](started_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != r.allocation || st.alloc->state != alloc_state::starting)
          return bus::report_rep{r.seq}; // duplicate or stale: nothing to do
        auto rp = self->make_response_promise<bus::report_rep>();
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = alloc_state::running;
        a.started_ms = now;
        job_row next = st.row;
        if (next.info.state == job_state::starting)
          next.info.state = job_state::running;
        next.info.started_ms = now;
        commit(
            self, {next, a},
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
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != r.allocation)
          return bus::report_rep{r.seq};
        auto rp = self->make_response_promise<bus::report_rep>();
        auto reply_error = [=](bus::error_info e) mutable {
          rp.deliver(caf::make_error(caf::sec::runtime_error, e.message));
        };
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = alloc_state::finished;
        a.exit_code = r.exit_code;
        a.signal = r.signal;
        a.peak_ram_bytes = r.peak_ram_bytes;
        a.peak_vram_bytes = r.peak_vram_bytes;
        a.finished_ms = now;
        a.detail = r.detail.value_or("");
        auto out = policy::outcome_of({r.reason, r.exit_code, r.signal, a.yield_requested_ms != 0,
                                       st.row.info.state == job_state::stopping});
        if (a.started_ms == 0 && out.started)
          a.started_ms = now;
        job_row next = st.row;
        auto& j = next.info;
        if (out.what != policy::exit_outcome::action::finish) {
          // A GPU fault on the node, a launch the node refused for its own
          // reasons, an allocation the node lost, or a checkpoint after a yield
          // request: back to its old slot with a new allocation.
          a.reason = out.reason;
          requeue(
              self, a, out.what == policy::exit_outcome::action::checkpoint,
              [=]() mutable { rp.deliver(bus::report_rep{r.seq}); }, reply_error);
          return rp;
        }
        j.exit_code = r.exit_code;
        j.signal = r.signal;
        j.finished_ms = now;
        j.state = out.state;
        j.reason = out.reason;
        a.reason = j.reason;
        if (out.measure)
          self->send(st.ctx->api, measure_atom::value,
                     measurement{j.profile, r.peak_ram_bytes, r.peak_vram_bytes, r.wall_ms});
        finish(
            self, a, next,
            [=]() mutable {
              rp.deliver(bus::report_rep{r.seq});
              self->quit();
            },
            reply_error);
        return rp;
      },
      [=](lost_atom, const std::string& alloc_id, const std::string& why) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id)
          return;
        auto a = *st.alloc;
        a.state = alloc_state::finished;
        a.reason = bus::reason::lost;
        a.detail = why;
        a.finished_ms = now_ms(self, *st.ctx);
        requeue(
            self, a, false, [] {}, stop_on_error(self));
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
        enqueue(self); // re-keys a queued job in the scheduler's order
      },
      [=](cancel_atom, const std::string& who) -> caf::result<api_reply> {
        auto& st = self->state;
        auto state = st.row.info.state;
        if (state == job_state::stopping)
          return api_reply{bus::cancel_rep{st.row.info}};
        auto rp = self->make_response_promise<api_reply>();
        auto now = now_ms(self, *st.ctx);
        job_row next = st.row;
        bool queued = state == job_state::queued;
        change_batch batch;
        if (queued) {
          next.info.state = job_state::cancelled, next.info.reason = bus::reason::cancelled;
          next.info.finished_ms = now;
        } else {
          next.info.state = job_state::stopping;
        }
        batch.push_back(next);
        std::optional<bus::allocation_info> a = st.alloc;
        if (a) {
          a->stop_requested_ms = now;
          batch.push_back(*a);
        }
        batch.push_back(audit_row{now, who, "owner", "cancel", next.info.id,
                                  std::string(to_string(next.info.state))});
        commit(
            self, std::move(batch),
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              if (a)
                st.alloc = a;
              publish(self);
              rp.deliver(api_reply{bus::cancel_rep{next.info}});
              if (queued) {
                self->send(st.ctx->scheduler, dequeue_atom::value, next.info.id);
                self->quit();
              } else if (st.alloc) {
                reserve(self, est_end(self, st.alloc->started_ms));
                // A stop is state: the allocation actor sends it until the
                // node takes it (and never sends the start again).
                if (st.alloc_actor)
                  self->send(st.alloc_actor, stop_atom::value);
              }
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      // Asks the running allocation to yield (a checkpointing job only). The
      // request is committed first, so the exit that follows counts as a
      // checkpoint (invariant 4) even across a restart.
      [=](yield_atom) {
        auto& st = self->state;
        auto& j = st.row.info;
        if (!st.alloc || j.state != job_state::running || j.preempt != "checkpoint") {
          spdlog::info("job {} is {} (preempt {}): only a running checkpointing job yields", j.id,
                       j.state, j.preempt);
          return;
        }
        if (st.alloc->yield_requested_ms != 0)
          return;
        auto a = *st.alloc;
        a.yield_requested_ms = now_ms(self, *st.ctx);
        commit(
            self, {a},
            [=] {
              auto& st = self->state;
              st.alloc = a;
              publish(self);
              if (st.alloc_actor)
                self->send(st.alloc_actor, yield_atom::value);
            },
            stop_on_error(self));
      },
  };
}

} // namespace

job_actor spawn_job(caf::actor_system& sys, context_ptr ctx, job_row row,
                    std::optional<bus::allocation_info> live, node_actor node,
                    std::set<std::string> waiting_on, std::string failed_dep, bool resume) {
  return sys.spawn(job_behavior, std::move(ctx), std::move(row), std::move(live), std::move(node),
                   std::move(waiting_on), std::move(failed_dep), resume);
}

} // namespace cq::coord
