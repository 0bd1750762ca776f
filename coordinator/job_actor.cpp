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
//  6. Every event of the job is committed in the batch of the change that
//     causes it, with the next seq (gapless from 1, SPEC section 8).
//  7. Node loss (docs/adr/0021): an allocation whose node is down is unknown;
//     it is lost once it has been unknown for the job's lost-after (counted
//     from the durable unknown_since_ms, so across restarts), and only then
//     may the job run elsewhere. Its resources stay reserved until then.
//  8. A yield request is committed (yield_requested_ms) before the node hears
//     it; if the job has not exited within yield_grace it is stopped (stop
//     cause yield) and requeued, without resume.
#include "internal.hpp"
#include "policy/outcome.hpp"
#include "policy/placement.hpp"
#include "policy/spec.hpp"

#include <caf/all.hpp>
#include <fmt/ranges.h>
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
  std::uint64_t last_event = 0; ///< seq of the job's last committed event (invariant 6)
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
  std::uint64_t events = 0;
  for (auto& c : batch)
    events += std::holds_alternative<event_row>(c);
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .await(
          [=](const commit_result& r) mutable {
            if (r.error.empty()) {
              auto& st = self->state;
              if (events) {
                st.last_event += events; // invariant 6
                self->send(st.ctx->api, event_atom::value, st.row.info.id);
              }
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

/// Invariant 6: appends the job's next event to `batch` (its seq counts the
/// events already in the batch).
void add_event(job_ptr self, change_batch& batch, std::string kind, std::string detail = {}) {
  auto& st = self->state;
  std::uint64_t n = 0;
  for (auto& c : batch)
    n += std::holds_alternative<event_row>(c);
  batch.push_back(event_row{st.row.info.id, st.last_event + n + 1, std::move(kind),
                            now_ms(self, *st.ctx), std::move(detail)});
}

using event_list = std::vector<std::pair<std::string, std::string>>; ///< kind, detail

/// Whether the job's cancel was committed (the live allocation's stop cause;
/// a stop of an older store without a cause was a cancel).
bool cancel_requested(const job_actor_state& st) {
  return st.alloc && st.alloc->stop_cause == "cancel";
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
                j.state == job_state::stopping || st.alloc->yield_requested_ms != 0,
                resources_of(*st.ctx, j),
                st.ram_floor_bytes,
                st.alloc->lanes,
                est_end_ms,
                st.alloc->started_ms,
                static_cast<std::int64_t>(j.lease_ms ? j.lease_ms : st.ctx->cfg.lease_ms)};
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

/// Ends the live allocation with `a`'s final fields and moves the job to
/// `row`'s state, committing `events` with it.
void finish(job_ptr self, bus::allocation_info a, job_row row, event_list events,
            std::function<void()> then, std::function<void(bus::error_info)> on_err) {
  change_batch batch{row, a};
  for (auto& [kind, detail] : events)
    add_event(self, batch, kind, detail);
  commit(
      self, std::move(batch),
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
  change_batch batch{next};
  add_event(self, batch, "failed", fmt::format("dependency_failed: job {} is {}", dep, dep_state));
  commit(
      self, std::move(batch),
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
/// `events` say why (requeued or cancelled follows them); `next` is the job's
/// row to start from (the current one, or one with a raised cap).
void requeue(job_ptr self, bus::allocation_info a, bool resume, event_list events,
             std::function<void()> then, std::function<void(bus::error_info)> on_err,
             std::optional<job_row> from = std::nullopt) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = from ? *from : st.row;
  bool cancelled = cancel_requested(st);
  if (cancelled) {
    next.info.state = job_state::cancelled, next.info.reason = bus::reason::cancelled;
    next.info.finished_ms = now;
    events.emplace_back("cancelled", "");
  } else {
    next.info.state = job_state::queued;
    next.info.lanes.clear();
    events.emplace_back("requeued", fmt::format("attempt {} ended: {}", a.attempt, a.reason));
  }
  finish(
      self, a, next, std::move(events),
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

/// The job's lost-after (0 = never) and yield grace.
std::int64_t lost_after_of(const job_actor_state& st) {
  return static_cast<std::int64_t>(st.row.info.lost_after_ms);
}

/// Invariant 7: checks allocation `id` for loss when its lost-after has run.
void schedule_lost_check(job_ptr self, const bus::allocation_info& a) {
  auto after = lost_after_of(self->state);
  if (after == 0 || a.unknown_since_ms == 0)
    return;
  auto due = a.unknown_since_ms + after - now_ms(self, *self->state.ctx);
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 0)),
                     timeout_atom::value, a.id);
}

/// Invariant 8: checks allocation `a` once its yield grace has run.
void schedule_yield_check(job_ptr self, const bus::allocation_info& a) {
  if (a.yield_requested_ms == 0 || !a.stop_cause.empty())
    return;
  auto grace = static_cast<std::int64_t>(self->state.ctx->cfg.yield_grace.count());
  auto due = a.yield_requested_ms + grace - now_ms(self, *self->state.ctx);
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 0)),
                     lease_atom::value, a.id);
}

/// Ends a lost allocation: the job is queued again (attempt + 1 at its next
/// placement), or fails with reason lost under --no-requeue.
void on_lost(job_ptr self, bus::allocation_info a, std::string why) {
  auto& st = self->state;
  a.state = alloc_state::finished;
  a.reason = bus::reason::lost;
  a.detail = why;
  a.finished_ms = now_ms(self, *st.ctx);
  if (!st.row.info.no_requeue || cancel_requested(st)) {
    requeue(
        self, a, false, {{"lost", why}}, [] {}, stop_on_error(self));
    return;
  }
  job_row next = st.row;
  next.info.state = job_state::failed;
  next.info.reason = bus::reason::lost;
  next.info.finished_ms = a.finished_ms;
  finish(
      self, a, next, {{"lost", why}, {"failed", "lost (--no-requeue)"}}, [=] { self->quit(); },
      stop_on_error(self));
}

job_actor::behavior_type job_behavior(job_ptr self, context_ptr ctx, job_row row,
                                      std::optional<bus::allocation_info> live, node_actor node,
                                      std::set<std::string> waiting_on, std::string failed_dep,
                                      bool resume, std::uint64_t last_event) {
  auto& st = self->state;
  st.ctx = ctx;
  st.resume = resume;
  st.last_event = last_event;
  st.row = std::move(row);
  // Invariant 3: the store keeps these.
  st.row.env.clear();
  st.row.info.argv.clear();
  st.waiting_on = std::move(waiting_on);
  if (live) {
    st.alloc = live;
    bool starting = live->state == alloc_state::starting ||
                    (live->state == alloc_state::unknown && live->started_ms == 0);
    bool stopping = st.row.info.state == job_state::stopping;
    std::optional<bus::start_order> order;
    if (starting)
      order = make_order(*ctx, st.row, *live, 0, st.resume);
    st.alloc_actor = spawn_allocation(self, ctx, live->id, node, caf::actor_cast<job_actor>(self),
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
        change_batch batch{next, a};
        add_event(self, batch, "placed",
                  fmt::format("node {}, attempt {}{}{}", node_name, a.attempt,
                              lanes.empty() ? "" : ", lanes ", fmt::join(lanes, ",")));
        commit(
            self, std::move(batch),
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
        if (!st.alloc || st.alloc->id != r.allocation ||
            (st.alloc->state != alloc_state::starting &&
             !(st.alloc->state == alloc_state::unknown && st.alloc->started_ms == 0)))
          return bus::report_rep{r.seq}; // duplicate or stale: nothing to do
        auto rp = self->make_response_promise<bus::report_rep>();
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = alloc_state::running;
        a.started_ms = now;
        a.unknown_since_ms = 0;
        job_row next = st.row;
        if (next.info.state == job_state::starting)
          next.info.state = job_state::running;
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
        a.unknown_since_ms = 0;
        auto& jinfo = st.row.info;
        auto out = policy::outcome_of({r.reason, r.exit_code, r.signal, a.yield_requested_ms != 0,
                                       cancel_requested(st), a.stop_cause == "yield",
                                       jinfo.oom_retries < jinfo.retry_oom});
        if (a.started_ms == 0 && out.started)
          a.started_ms = now;
        job_row next = st.row;
        auto& j = next.info;
        using act = policy::exit_outcome::action;
        if (out.what == act::oom_retry) {
          // Invariant 8's sibling: the ladder's next rung, bounded by the
          // largest node. The profile learns the true peak is at least the cap.
          auto cap = effective_ram(*st.ctx, j);
          a.reason = out.reason;
          self->send(st.ctx->api, measure_atom::value,
                     measurement{j.profile, std::max(r.peak_ram_bytes.value_or(0), cap),
                                 r.peak_vram_bytes, r.wall_ms});
          self->request(st.ctx->scheduler, caf::infinite, largest_atom::value)
              .await(
                  [=](std::uint64_t largest) mutable {
                    auto next_cap = policy::next_oom_cap(cap, largest);
                    next.info.effective_ram_bytes = next_cap;
                    ++next.info.oom_retries;
                    requeue(
                        self, a, false,
                        {{"failed",
                          fmt::format("oom at a cap of {} bytes; retry {} of {} with "
                                      "{} bytes",
                                      cap, next.info.oom_retries, next.info.retry_oom, next_cap)}},
                        [=]() mutable { rp.deliver(bus::report_rep{r.seq}); }, reply_error, next);
                  },
                  [=](caf::error& e) mutable {
                    rp.deliver(caf::make_error(caf::sec::runtime_error, to_string(e)));
                  });
          return rp;
        }
        if (out.what != act::finish) {
          // A GPU fault on the node, a launch the node refused for its own
          // reasons, an allocation the node lost, a checkpoint after a yield
          // request, or a preemption: back to its old slot with a new allocation.
          a.reason = out.reason;
          event_list evs;
          if (out.what == act::checkpoint)
            evs.emplace_back("checkpointed", "exit 6 after a yield request");
          else if (out.reason == bus::reason::preempted)
            evs.emplace_back("preempted", "did not exit within the yield grace; stopped");
          requeue(
              self, a, out.what == act::checkpoint, std::move(evs),
              [=]() mutable { rp.deliver(bus::report_rep{r.seq}); }, reply_error);
          return rp;
        }
        j.exit_code = r.exit_code;
        j.signal = r.signal;
        j.finished_ms = now;
        j.state = out.state;
        j.reason = out.reason;
        a.reason = j.reason;
        if (out.measure) {
          auto peak = r.peak_ram_bytes;
          if (out.reason == bus::reason::oom) // the true peak is at least the cap it hit
            peak = std::max(peak.value_or(0), effective_ram(*st.ctx, j));
          self->send(st.ctx->api, measure_atom::value,
                     measurement{j.profile, peak, r.peak_vram_bytes, r.wall_ms});
        }
        std::string detail;
        if (j.state != job_state::succeeded)
          detail = r.signal      ? fmt::format("{}: signal {}", j.reason, *r.signal)
                   : r.exit_code ? fmt::format("{}: exit {}", j.reason, *r.exit_code)
                                 : std::string(to_string(j.reason));
        finish(
            self, a, next, {{std::string(to_string(j.state)), detail}},
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
        on_lost(self, *st.alloc, why);
      },
      // Invariant 7: the node is down; the allocation may still run there.
      [=](unknown_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->state == alloc_state::unknown)
          return;
        auto a = *st.alloc;
        a.state = alloc_state::unknown;
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
        if (!st.alloc || st.alloc->id != alloc_id || st.alloc->state != alloc_state::unknown)
          return;
        auto a = *st.alloc;
        a.state = a.started_ms ? alloc_state::running : alloc_state::starting;
        a.unknown_since_ms = 0;
        commit(
            self, {a},
            [=] {
              self->state.alloc = a;
              publish(self);
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
          on_lost(self, *st.alloc, why);
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
        next.info.state = job_state::stopping;
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
        enqueue(self); // re-keys a queued job in the scheduler's order
      },
      [=](cancel_atom, const std::string& who) -> caf::result<api_reply> {
        auto& st = self->state;
        auto state = st.row.info.state;
        if (cancel_requested(st))
          return api_reply{bus::cancel_rep{st.row.info}};
        auto rp = self->make_response_promise<api_reply>();
        auto now = now_ms(self, *st.ctx);
        job_row next = st.row;
        bool queued = state == job_state::queued;
        bool already_stopping = state == job_state::stopping; // a yield's stop is in flight
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
          if (!a->stop_requested_ms)
            a->stop_requested_ms = now;
          a->stop_cause = "cancel";
          batch.push_back(*a);
        }
        batch.push_back(audit_row{now, who, "owner", "cancel", next.info.id,
                                  std::string(to_string(next.info.state))});
        if (queued)
          add_event(self, batch, "cancelled", fmt::format("by {}", who));
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
                if (st.alloc_actor && !already_stopping)
                  self->send(st.alloc_actor, stop_atom::value);
              }
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      // Asks the running allocation to yield (a checkpointing job only). The
      // request is committed first, so the exit that follows counts as a
      // checkpoint (invariant 4) even across a restart.
      [=](yield_atom, const std::string& why) -> caf::result<api_reply> {
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
      [=](blocked_atom, const std::string& blockers) {
        auto& st = self->state;
        if (st.row.info.state != job_state::queued)
          return;
        change_batch batch;
        add_event(self, batch, "blocked", blockers);
        commit(
            self, std::move(batch), [] {}, stop_on_error(self));
      },
  };
}

} // namespace

job_actor spawn_job(caf::actor_system& sys, context_ptr ctx, job_row row,
                    std::optional<bus::allocation_info> live, node_actor node,
                    std::set<std::string> waiting_on, std::string failed_dep, bool resume,
                    std::uint64_t last_event) {
  return sys.spawn(job_behavior, std::move(ctx), std::move(row), std::move(live), std::move(node),
                   std::move(waiting_on), std::move(failed_dep), resume, last_event);
}

} // namespace cq::coord
