#include "observe.hpp"

#include "cq/metrics.hpp"

#include <map>
#include <mutex>

namespace cq::coord::observe {

namespace {

/// Seconds, from a second to a week: queue waits and run times.
const std::vector<double> long_bounds{1,    5,        15,        60,    300,      900,
                                      3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400};

} // namespace

void declare(metrics::registry& r) {
  r.counter("cq_jobs_submitted_total", "Jobs submitted (each task of an array counts).");
  r.counter("cq_job_outcomes_total",
            "Jobs that ended, by outcome: succeeded, or the reason it failed or was cancelled.");
  r.histogram("cq_job_queue_wait_seconds", "From a job's submission to its (last) start.",
              long_bounds);
  r.histogram("cq_job_run_seconds", "From a job's (last) start to its end.", long_bounds);
  r.counter("cq_allocation_starts_total", "Allocations a node reported started.");
  r.counter("cq_allocation_cleanups_total", "Allocations finished and cleaned up on their node.");
  r.histogram("cq_store_commit_seconds", "Duration of one group commit to the state database.",
              {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1});
  r.counter("cq_notify_deliveries_total", "Notifications delivered, by rule.");
  r.counter("cq_notify_failures_total",
            "Notification attempts that failed (each is retried), by rule.");
  r.counter("cq_http_requests_total", "Requests to the status server, by path and status code.");
  r.counter("cq_api_requests_total",
            "Authenticated requests to the coordinator (clients' and nodes'), by operation.");
}

void request(const actors::context& ctx, std::string_view op) {
  if (!ctx.metrics)
    return;
  // One label set per operation, made once: the count costs no allocation.
  static std::mutex m;
  static std::map<std::string_view, metrics::labels> made;
  const metrics::labels* l = nullptr;
  {
    std::lock_guard g(m);
    auto it = made.find(op);
    if (it == made.end())
      it = made.emplace(op, metrics::labels{{"op", std::string(op)}}).first;
    l = &it->second;
  }
  ctx.metrics->add("cq_api_requests_total", *l);
}

std::string outcome_of(const bus::job_info& j) {
  if (j.state == bus::job_state::succeeded)
    return "succeeded";
  if (j.reason == bus::reason::none)
    return std::string(to_string(j.state));
  return std::string(to_string(j.reason));
}

void submitted(const actors::context& ctx, std::size_t jobs) {
  if (ctx.metrics)
    ctx.metrics->add("cq_jobs_submitted_total", {}, static_cast<double>(jobs));
}

void transition(const actors::context& ctx, std::optional<bus::job_state> before,
                const bus::job_info& now) {
  if (!ctx.metrics || before == now.state)
    return;
  auto& r = *ctx.metrics;
  if (now.state == bus::job_state::running && now.started_ms >= now.submitted_ms &&
      now.submitted_ms > 0)
    r.observe("cq_job_queue_wait_seconds",
              static_cast<double>(now.started_ms - now.submitted_ms) / 1000.0);
  if (!is_terminal(now.state) || (before && is_terminal(*before)))
    return;
  r.add("cq_job_outcomes_total", {{"outcome", outcome_of(now)}});
  if (now.started_ms > 0 && now.finished_ms >= now.started_ms)
    r.observe("cq_job_run_seconds", static_cast<double>(now.finished_ms - now.started_ms) / 1000.0);
}

void allocation(const actors::context& ctx, std::optional<bus::alloc_state> before,
                const bus::allocation_info& now) {
  if (!ctx.metrics || before == now.state)
    return;
  // A start is the node's first report of it running (an allocation back
  // from unknown, its node come back, is no new start).
  if (now.state == bus::alloc_state::running && (!before || before == bus::alloc_state::starting))
    ctx.metrics->add("cq_allocation_starts_total");
  else if (now.state == bus::alloc_state::finished)
    ctx.metrics->add("cq_allocation_cleanups_total");
}

void commit(metrics::registry* r, double seconds) {
  if (r)
    r->observe("cq_store_commit_seconds", seconds);
}

} // namespace cq::coord::observe
