// The job actor's steps (job_steps.hpp): commits, events, the queue and
// reservation views, and the transitions several handlers share.
#include "job_steps.hpp"
#include "cq/text.hpp"
#include "cq/units.hpp"
#include "policy/outcome.hpp"
#include "policy/placement.hpp"
#include "policy/spec.hpp"
#include "policy/transitions.hpp"

#include <algorithm>

namespace cq::coord::job_impl {

void fatal(job_ptr self, const std::string& why) {
  spdlog::critical("job {}: {}", self->state.row.info.id, why);
  if (self->state.ctx->fatal)
    self->state.ctx->fatal(why);
}

void add_event(job_ptr self, change_batch& batch, std::string kind, std::string detail) {
  auto& st = self->state;
  batch.push_back(event_row{st.row.info.id, st.row.seq, st.last_event + events_in(batch) + 1,
                            std::move(kind), now_ms(self, *st.ctx), std::move(detail)});
}

bool cancel_requested(const job_actor_state& st) {
  return st.alloc && st.alloc->stop_cause == "cancel";
}

std::function<void(bus::error_info)> stop_on_error(job_ptr self) {
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
  r.est_default = j.est_default || !j.effective_est_ms;
  r.pinned_node = j.pinned_node;
  r.owner = j.owner;
  r.group = j.array;
  r.group_limit = j.array_limit;
  return r;
}

void enqueue(job_ptr self, bool rekey) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (j.state != job_state::queued || !st.waiting_on.empty() || st.alloc || j.on_hold)
    return;
  auto e = queue_entry_of(*st.ctx, j, st.row.seq, st.row.rank);
  e.handle = caf::actor_cast<job_actor>(self);
  if (rekey)
    self->send(st.ctx->scheduler, rekey_atom::value, std::move(e));
  else
    self->send(st.ctx->scheduler, enqueue_atom::value, std::move(e));
}

void leave_queue(job_ptr self) {
  auto& st = self->state;
  self->send(st.ctx->scheduler, dequeue_atom::value, st.row.info.id);
  self->send(st.ctx->scheduler, release_atom::value, st.row.info.id);
}

void reserve(job_ptr self, std::int64_t est_end_ms) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (!st.alloc)
    return;
  auto held = resources_of(*st.ctx, j);
  if (st.ctx->cfg.defects.forget_cpus) // deliberate defect (cq-sim's cpu_over)
    held.cpus = 0;
  alloc_entry a{j.id,
                st.alloc->id,
                st.alloc->node,
                level_of(j),
                j.preempt == "checkpoint",
                j.state == job_state::stopping || st.alloc->yield_requested_ms != 0,
                held,
                st.ram_floor_bytes,
                st.alloc->lanes,
                est_end_ms,
                st.alloc->started_ms,
                static_cast<std::int64_t>(j.lease_ms ? j.lease_ms : st.ctx->cfg.lease_ms)};
  self->send(st.ctx->scheduler, reserve_atom::value, std::move(a));
}

std::int64_t est_end(job_ptr self, std::int64_t started_ms) {
  return started_ms + resources_of(*self->state.ctx, self->state.row.info).est_ms;
}

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
  if (ctx.cfg.defects.lanes_from_zero && o.lanes) // deliberate defect (cq-sim's lane_twice)
    for (std::size_t i = 0; i < o.lanes->size(); ++i)
      (*o.lanes)[i] = fmt::format("gpu{}", i);
  if (floor || r.ram_start_min_bytes) {
    o.ram_floor_bytes = floor;
    o.ram_start_min_bytes = r.ram_start_min_bytes;
  }
  o.vram_bytes = j.vram_bytes; // absent stays absent on the wire
  o.timeout_ms = j.timeout_ms;
  o.owner = j.owner;
  if (resume)
    o.resume = true;
  if (!j.name.empty())
    o.name = j.name;
  if (!j.output.empty())
    o.output = j.output;
  if (j.pty)
    o.pty = true;
  if (j.oom_retries > 0 && a.attempt > 1)
    o.previous = fmt::format(
        "attempt {}: an earlier attempt was killed for using more memory than its RAM cap{}; "
        "this one has a cap of {:.1f} MiB",
        a.attempt, j.ram_bytes ? "" : " (a cap cq chose: no --ram)",
        static_cast<double>(r.ram_bytes) / (1024.0 * 1024.0));
  return o;
}

void finish(job_ptr self, bus::allocation_info a, job_row row, event_list events,
            std::function<void()> then, std::function<void(bus::error_info)> on_err) {
  change_batch batch{row, a};
  for (auto& [kind, detail] : events)
    add_event(self, batch, kind, detail);
  auto& st = self->state;
  // Invariant 9: an allocation that ended on its node (reported after its
  // cleanup) frees its resources now, in the commit's shadow; a lost one may
  // still run there, and the scheduler keeps its resources as a ghost until
  // the node no longer lists it (after the commit, as below).
  bool lost = a.reason == bus::reason::lost;
  commit(
      self, std::move(batch),
      [=]() mutable {
        auto& st = self->state;
        st.row = row;
        st.alloc = a;
        publish(self);
        st.alloc.reset();
        st.alloc_actor = nullptr;
        if (lost)
          self->send(st.ctx->scheduler, lost_atom::value, row.info.id);
        then();
      },
      on_err);
  if (!lost)
    self->send(st.ctx->scheduler, release_atom::value, row.info.id);
}

void fail_dependency(job_ptr self, const std::string& dep, job_state dep_state) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = st.row;
  policy::set_state(next.info, job_state::failed);
  next.info.reason = bus::reason::dependency_failed;
  next.info.finished_ms = now;
  spdlog::info("job {}: dependency {} is {}; failing", next.info.id, dep, to_string(dep_state));
  change_batch batch{next};
  add_event(self, batch, "failed", fmt::format("dependency_failed: job {} is {}", dep, dep_state));
  // A queued job that ends revokes the grant it holds, in the same commit.
  auto revoked = end_grant(self, batch, "revoked", now);
  commit(
      self, std::move(batch),
      [=] {
        self->state.row = next;
        grant_ended(self, revoked);
        publish(self);
        leave_queue(self);
        self->quit();
      },
      stop_on_error(self));
}

std::optional<bus::grant_info> end_grant(job_ptr self, change_batch& batch, std::string state,
                                         std::int64_t now) {
  auto& st = self->state;
  if (!st.grant)
    return std::nullopt;
  auto g = *st.grant;
  g.state = std::move(state);
  g.ended_ms = now;
  batch.push_back(g);
  return g;
}

void grant_ended(job_ptr self, const std::optional<bus::grant_info>& ended) {
  if (!ended)
    return;
  self->state.grant.reset();
  self->send(self->state.ctx->api, grant_atom::value, *ended);
}

void requeue(job_ptr self, bus::allocation_info a, bool resume, event_list events,
             std::function<void()> then, std::function<void(bus::error_info)> on_err,
             std::optional<job_row> from, std::string how) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = from ? *from : st.row;
  bool cancelled = cancel_requested(st);
  if (cancelled) {
    policy::set_state(next.info, job_state::cancelled), next.info.reason = bus::reason::cancelled;
    next.info.finished_ms = now;
    events.emplace_back("cancelled", how.empty()
                                         ? std::string()
                                         : fmt::format("attempt {} ended: {}", a.attempt, how));
  } else {
    policy::set_state(next.info, job_state::queued);
    next.info.lanes.clear();
    events.emplace_back("requeued",
                        fmt::format("attempt {} ended: {}", a.attempt,
                                    how.empty() ? std::string(to_string(a.reason)) : how));
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

std::int64_t lost_after_of(const job_actor_state& st) {
  return static_cast<std::int64_t>(st.row.info.lost_after_ms);
}

void schedule_lost_check(job_ptr self, const bus::allocation_info& a) {
  auto after = lost_after_of(self->state);
  if (after == 0 || a.unknown_since_ms == 0)
    return;
  auto due = a.unknown_since_ms + after - now_ms(self, *self->state.ctx);
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 0)),
                     timeout_atom::value, a.id);
}

void schedule_yield_check(job_ptr self, const bus::allocation_info& a) {
  if (a.yield_requested_ms == 0 || !a.stop_cause.empty())
    return;
  auto grace = static_cast<std::int64_t>(self->state.ctx->cfg.yield_grace.count());
  auto due = a.yield_requested_ms + grace - now_ms(self, *self->state.ctx);
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 0)),
                     lease_atom::value, a.id);
}

void on_lost(job_ptr self, bus::allocation_info a, std::string why, std::function<void()> then) {
  auto& st = self->state;
  policy::set_state(a, alloc_state::finished);
  a.reason = bus::reason::lost;
  a.detail = why;
  a.finished_ms = now_ms(self, *st.ctx);
  // A diagnostic allocation that is lost fails without requeue, as does one
  // submitted with --no-requeue.
  bool requeues = !st.row.info.no_requeue && !st.row.info.diagnostic;
  if (requeues || cancel_requested(st)) {
    requeue(self, a, false, {{"lost", why}}, then, stop_on_error(self));
    return;
  }
  job_row next = st.row;
  policy::set_state(next.info, job_state::failed);
  next.info.reason = bus::reason::lost;
  next.info.finished_ms = a.finished_ms;
  finish(
      self, a, next, {{"lost", why}, {"failed", "lost (--no-requeue)"}},
      [=] {
        then();
        self->quit();
      },
      stop_on_error(self));
}

caf::result<bus::report_rep> on_exit(job_ptr self, const bus::report_req& r) {
  auto& st = self->state;
  if (!st.alloc || st.alloc->id != r.allocation)
    return bus::report_rep{r.seq};
  auto rp = self->make_response_promise<bus::report_rep>();
  auto reply_error = [=](bus::error_info e) mutable {
    rp.deliver(caf::make_error(caf::sec::runtime_error, e.message));
  };
  auto now = now_ms(self, *st.ctx);
  auto a = *st.alloc;
  policy::set_state(a, alloc_state::finished);
  a.exit_code = r.exit_code;
  a.signal = r.signal;
  a.peak_ram_bytes = r.peak_ram_bytes;
  a.peak_vram_bytes = r.peak_vram_bytes;
  a.detail = r.detail.value_or("");
  a.unknown_since_ms = 0;
  auto& jinfo = st.row.info;
  // A cap cq chose (a profile's or the default, no --ram) is cq's mistake,
  // not the job's: an OOM under it is retried with more (policy::
  // auto_oom_retries at most, and never beyond the largest node); an explicit
  // --ram fails at once unless --retry-oom allows more.
  bool sized_by_cq = !jinfo.ram_bytes;
  bool retry_left = jinfo.oom_retries < jinfo.retry_oom ||
                    (sized_by_cq && jinfo.oom_retries < policy::auto_oom_retries);
  auto out = policy::outcome_of({r.reason, r.exit_code, r.signal, a.yield_requested_ms != 0,
                                 cancel_requested(st), a.stop_cause == "yield",
                                 a.stop_cause == "fence", retry_left, jinfo.diagnostic});
  if (st.ctx->cfg.defects.report_success_always && out.what == policy::exit_outcome::action::finish)
    out.state = job_state::succeeded, out.reason = bus::reason::none; // deliberate defect (outcome)
  if (a.started_ms == 0 && out.started)
    a.started_ms = now;
  // When it ended, by the node's measure of how long it ran: a report that
  // waited out a coordinator's outage does not stretch the run.
  auto ended = now;
  if (a.started_ms > 0 && r.wall_ms > 0)
    ended =
        std::min(now, std::max(a.started_ms, a.started_ms + static_cast<std::int64_t>(r.wall_ms)));
  a.finished_ms = ended;
  job_row next = st.row;
  auto& j = next.info;
  using act = policy::exit_outcome::action;
  // The job ends here with `out` (a lambda: an OOM retry that cannot grow
  // the cap any more ends this way too, after asking the scheduler).
  auto finish_job = [=](job_row next, bus::allocation_info a, policy::exit_outcome out) mutable {
    auto& st = self->state;
    auto& j = next.info;
    j.exit_code = r.exit_code;
    j.signal = r.signal;
    j.finished_ms = ended;
    policy::set_state(j, out.state);
    j.reason = out.reason;
    a.reason = j.reason;
    if (out.measure) {
      auto peak = r.peak_ram_bytes;
      if (out.reason == bus::reason::oom) // the true peak is at least the cap it hit
        peak = std::max(peak.value_or(0), effective_ram(*st.ctx, j));
      self->send(st.ctx->api, measure_atom::value,
                 measurement{j.profile, peak, r.peak_vram_bytes, r.wall_ms});
    }
    // "exit 3", "oom: signal 9", "cancelled" by its kind: the reason unless it
    // only repeats the kind or the exit.
    std::string detail;
    if (j.state != job_state::succeeded) {
      auto how = r.signal      ? fmt::format("signal {}", *r.signal)
                 : r.exit_code ? fmt::format("exit {}", *r.exit_code)
                               : std::string();
      auto why = std::string(to_string(j.reason));
      bool plain = j.reason == bus::reason::exit_code || why == to_string(j.state);
      detail = how.empty() ? why : plain ? how : fmt::format("{}: {}", why, how);
      // A launch that failed has no exit of its own (125 is the node's):
      // the node's words say why ("launch failed: cwd /x: not a directory").
      if (j.reason == bus::reason::launch_failed && !a.detail.empty()) {
        detail = cut_utf8(a.detail, 200);
      }
    }
    finish(
        self, a, next, {{std::string(to_string(j.state)), detail}},
        [=]() mutable {
          rp.deliver(bus::report_rep{r.seq});
          self->quit();
        },
        reply_error);
  };
  if (out.what == act::oom_retry) {
    // Invariant 8's sibling: the ladder's next rung, bounded by the largest
    // node; a cap cq chose goes at least to the default at once. The profile
    // learns the true peak is at least the cap.
    auto cap = effective_ram(*st.ctx, j);
    a.reason = out.reason;
    self->send(st.ctx->api, measure_atom::value,
               measurement{j.profile, std::max(r.peak_ram_bytes.value_or(0), cap),
                           r.peak_vram_bytes, r.wall_ms});
    auto default_ram = st.ctx->cfg.default_ram_bytes;
    self->request(st.ctx->scheduler, caf::infinite, largest_atom::value)
        .await(
            [=](std::uint64_t largest) mutable {
              auto next_cap = policy::next_oom_cap(cap, largest, sized_by_cq ? default_ram : 0);
              if (next_cap <= cap) {
                // No node has more to give: the OOM is final.
                auto final = out;
                final.what = act::finish, final.state = job_state::failed;
                finish_job(next, a, final);
                return;
              }
              next.info.effective_ram_bytes = next_cap;
              ++next.info.oom_retries;
              // One requeued event: the job goes on, so no `failed` (a
              // follower or a notify rule would take it for the end).
              requeue(
                  self, a, false, {}, [=]() mutable { rp.deliver(bus::report_rep{r.seq}); },
                  reply_error, next,
                  sized_by_cq
                      ? fmt::format("oom at a cap of {} that cq chose (no --ram); next cap {}",
                                    format_bytes(cap), format_bytes(next_cap))
                      : fmt::format("oom at a cap of {}; retry {} of {} with {}", format_bytes(cap),
                                    next.info.oom_retries, next.info.retry_oom,
                                    format_bytes(next_cap)));
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
  finish_job(next, a, out);
  return rp;
}

} // namespace cq::coord::job_impl

namespace cq::coord {

actors::queue_entry queue_entry_of(const actors::context& ctx, const bus::job_info& j,
                                   std::uint64_t seq, std::int64_t rank) {
  actors::queue_entry e;
  static_cast<job_resources&>(e) = job_impl::resources_of(ctx, j);
  e.job = j.id;
  e.seq = seq;
  e.level = job_impl::level_of(j);
  e.rank = rank;
  e.checkpoint = j.preempt == "checkpoint";
  if (ctx.cfg.defects.forget_vram) // deliberate defect (cq-sim's vram_over)
    e.vram_bytes = 0;
  return e;
}

} // namespace cq::coord
