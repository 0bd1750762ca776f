#pragma once
// What the coordinator counts for `/metrics` (cq/metrics.hpp): every counter
// and histogram family's name and help in one place, and the calls the
// actors make where something happens. Each call does nothing when the
// context keeps no registry (tests, cq-sim). The gauges of the fleet now
// (jobs by state, nodes, memory, VRAM) come from the api's snapshot instead
// (adapters/status_server.cpp).

#include "cq/actors/system.hpp"
#include "cq/bus/schema.hpp"

#include <optional>
#include <string_view>

namespace cq::coord::observe {

/// Declares every family the coordinator counts into `r`.
void declare(metrics::registry& r);

/// One authenticated request for operation `op` (cq_api_requests_total).
void request(const actors::context& ctx, std::string_view op);

/// `jobs` jobs were submitted (committed).
void submitted(const actors::context& ctx, std::size_t jobs);

/// Job `now` changed state from `before`: its queue wait when it starts
/// running, its run time and its outcome when it ends.
void transition(const actors::context& ctx, std::optional<bus::job_state> before,
                const bus::job_info& now);

/// An allocation changed state from `before` (nullopt: new): a start when it
/// runs, a cleanup when it is finished.
void allocation(const actors::context& ctx, std::optional<bus::alloc_state> before,
                const bus::allocation_info& now);

/// A group commit of the store took `seconds` (store_actor.cpp).
void commit(metrics::registry* r, double seconds);

/// The outcome a finished job is counted under: "succeeded", or its reason
/// (oom, timeout, lost, exit_code, cancelled, ...).
std::string outcome_of(const bus::job_info& j);

} // namespace cq::coord::observe
