#pragma once
// The job actor's state and the steps its handlers share (job_steps.cpp):
// an implementation detail of job_actor.cpp, whose header comment lists the
// invariants these steps keep.

#include "internal.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <functional>
#include <set>

namespace cq::coord::job_impl {

using namespace cq::actors;

struct job_actor_state {
  context_ptr ctx;                           ///< shared seams and handles
  job_row row;                               ///< the committed job row (no argv, no env)
  std::optional<bus::allocation_info> alloc; ///< the live allocation's committed row
  allocation_actor alloc_actor;              ///< its actor (when `alloc` is set)
  std::set<std::string> waiting_on;          ///< dependencies that have not succeeded yet
  std::uint64_t ram_floor_bytes = 0;         ///< combined floor of the live allocation
  bool resume = false; ///< the last attempt checkpointed: the next one resumes (CQ_RESUME=1)
  /// The active diagnostic grant this queued job holds: consumed with its
  /// placement, revoked with its cancel (in the same commit).
  std::optional<bus::grant_info> grant;
  std::uint64_t last_event = 0; ///< seq of the job's last committed event (invariant 6)
  /// The command and environment read beside a placement's commit, until
  /// its start order takes them (invariant 3).
  std::optional<job_payload> payload;
  static inline const char* name = "cq.job";
};

using job_ptr = job_actor::stateful_pointer<job_actor_state>;

/// Ends the coordinator: the job's state can no longer be trusted (invariant 5).
void fatal(job_ptr self, const std::string& why);

/// How many event rows `batch` holds.
inline std::uint64_t events_in(const change_batch& batch) {
  std::uint64_t n = 0;
  for (auto& c : batch)
    n += std::holds_alternative<event_row>(c);
  return n;
}

/// Invariant 1: commits `batch`, suspending every other message of this job
/// until it is durable, then runs `on_ok` (or `on_err` with the reason).
template <class OnOk, class OnErr>
void commit(job_ptr self, change_batch batch, OnOk on_ok, OnErr on_err) {
  auto events = events_in(batch);
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .await(
          [=](const commit_result& r) mutable {
            if (r.error.empty()) {
              auto& st = self->state;
              if (events) {
                st.last_event += events; // invariant 6
                self->send(st.ctx->api, event_atom::value, st.row.info.id, st.last_event);
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

using event_list = std::vector<std::pair<std::string, std::string>>; ///< kind, detail

/// Invariant 6: appends the job's next event to `batch` (its seq counts the
/// events already in the batch).
void add_event(job_ptr self, change_batch& batch, std::string kind, std::string detail = {});
/// Whether the job's cancel was committed (the live allocation's stop cause).
bool cancel_requested(const job_actor_state& st);
/// Invariant 5: the on_err of commits nobody else hears about.
std::function<void(bus::error_info)> stop_on_error(job_ptr self);
/// Tells the api the committed row (and the live allocation's).
void publish(job_ptr self);
std::uint8_t level_of(const bus::job_info& j);
/// The job's resources, carried whole from here to its allocation's entry.
job_resources resources_of(const context& ctx, const bus::job_info& j);
/// Puts the job in the scheduler's queue if it is queued and startable.
/// With `rekey`, only replaces its entry there: a job that is in the queue
/// (or was, until a pass placed it and the placement is on its way here)
/// must not be queued again (api/parked.cpp, invariant 4).
void enqueue(job_ptr self, bool rekey = false);
/// The queued job ends (its actor quits): out of the scheduler's queue, and
/// a placement on its way here (which the ending actor will not answer)
/// given back.
void leave_queue(job_ptr self);
/// Tells the scheduler what the live allocation holds.
void reserve(job_ptr self, std::int64_t est_end_ms);
/// When the live allocation is expected to end, started at `started_ms`.
std::int64_t est_end(job_ptr self, std::int64_t started_ms);
/// The start order of allocation `a`, without the command and environment
/// (the allocation actor reads them from the store). The effective RAM is the
/// job's hard cap on the node, whatever it was derived from (SPEC section 3).
bus::start_order make_order(const context& ctx, const job_row& row, const bus::allocation_info& a,
                            std::uint64_t floor, bool resume);
/// Ends the live allocation with `a`'s final fields and moves the job to
/// `row`'s state, committing `events` with it.
void finish(job_ptr self, bus::allocation_info a, job_row row, event_list events,
            std::function<void()> then, std::function<void(bus::error_info)> on_err);
/// Fails a job that never started because a dependency did not succeed.
void fail_dependency(job_ptr self, const std::string& dep, job_state dep_state);

/// Ends the grant the job holds (consumed by its placement, revoked by its
/// end while queued) in `batch`, the change's own commit: the ended row, or
/// nullopt when it holds none.
std::optional<bus::grant_info> end_grant(job_ptr self, change_batch& batch, std::string state,
                                         std::int64_t now);
/// After that commit: the job holds no grant, and the api hears of its end
/// (before the job's own change is published).
void grant_ended(job_ptr self, const std::optional<bus::grant_info>& ended);
/// Back to its old slot in the queue (its rank is unchanged), or cancelled if
/// a cancel came meanwhile, after allocation `a` ended without the job's fault.
/// `events` say why (requeued or cancelled follows them); `from` is the job's
/// row to start from (default the current one; one with a raised cap);
/// `how` says how the attempt ended in the requeued event (default: its
/// reason).
void requeue(job_ptr self, bus::allocation_info a, bool resume, event_list events,
             std::function<void()> then, std::function<void(bus::error_info)> on_err,
             std::optional<job_row> from = std::nullopt, std::string how = {});
/// The job's lost-after (0 = never).
std::int64_t lost_after_of(const job_actor_state& st);
/// Invariant 7: a lost check once allocation `a`'s lost-after has run.
void schedule_lost_check(job_ptr self, const bus::allocation_info& a);
/// Invariant 8: a check once allocation `a`'s yield grace has run.
void schedule_yield_check(job_ptr self, const bus::allocation_info& a);
/// Ends a lost allocation: the job is queued again (attempt + 1 at its next
/// placement), or fails with reason lost under --no-requeue.
/// `then` runs once the loss is committed.
void on_lost(job_ptr self, bus::allocation_info a, std::string why, std::function<void()> then);
/// The node reported allocation r.allocation's exit: the job's next state
/// (policy/outcome.hpp), committed before the report is acknowledged.
caf::result<bus::report_rep> on_exit(job_ptr self, const bus::report_req& r);

} // namespace cq::coord::job_impl
