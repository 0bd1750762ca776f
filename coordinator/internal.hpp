#pragma once
// Spawn functions of the coordinator's actors (implementation detail of
// coordinator/; tests go through spawn_coordinator()).

#include "cq/actors/system.hpp"
#include "cq/bus/format.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <optional>
#include <set>

namespace cq::coord {

class store;

/// Wall-clock milliseconds on the actor clock (virtual time in tests).
std::int64_t now_ms(caf::local_actor* self, const actors::context& ctx);

/// Group-commit store actor: replies commit_result to {commit_atom, batch} and
/// job_payload to {load_atom, seq, job}; each commit's duration goes to `metrics`. `fatal` is
/// called once if the database file is deleted or replaced under it (store_actor.cpp).
actors::store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<store> db, bool detached,
                                std::function<void(const std::string&)> fatal,
                                std::shared_ptr<metrics::registry> metrics = nullptr);

/// Scheduler: holds the queue view and node views, runs coalesced passes.
actors::scheduler_actor spawn_scheduler(caf::actor_system& sys, actors::context_ptr ctx);

/// Node actor for one node; creates the node's link through ctx->make_link.
actors::node_actor spawn_node(caf::actor_system& sys, actors::context_ptr ctx, node_row row);

/// A dependency that ended without succeeding, and how it ended (failed or
/// cancelled); `job` empty: none.
struct failed_dependency {
  std::string job;
  bus::job_state state = bus::job_state::failed;
  bool empty() const { return job.empty(); }
};

/// Job actor. `live` is the job's live allocation when recovering one, with
/// its node actor; a queued job enqueues itself with the scheduler once
/// `waiting_on` (dependencies not yet succeeded) is empty, unless `queued`
/// says the api already put it there (a queued job waits without an actor
/// until it is placed or touched: api/parked.cpp). A non-empty
/// `failed_dep` names a dependency that already ended without succeeding:
/// the job fails with reason dependency_failed. `resume`: the job's last attempt checkpointed, so
/// its next start carries CQ_RESUME=1. `last_event`: the seq of the job's
/// last committed event.
actors::job_actor spawn_job(caf::actor_system& sys, actors::context_ptr ctx, job_row row,
                            std::optional<bus::allocation_info> live, actors::node_actor node,
                            std::set<std::string> waiting_on, failed_dependency failed_dep,
                            bool resume, std::uint64_t last_event, bool queued = false);

/// The scheduler's entry of queued job `j` (its submission `seq`, its `rank`
/// in its level), with no actor handle (the scheduler places such a job
/// through the api, which spawns its actor).
actors::queue_entry queue_entry_of(const actors::context& ctx, const bus::job_info& j,
                                   std::uint64_t seq, std::int64_t rank);

/// Grant actor of an active diagnostic grant (grant_actor.cpp).
actors::grant_actor spawn_grant(caf::actor_system& sys, actors::context_ptr ctx,
                                bus::grant_info grant);

/// Allocation actor of a live allocation, a child of its job actor `parent`.
/// `order`: the start order without argv and env (read from the store), for an
/// allocation the node has not confirmed; `confirmed`: the node reported its
/// start; `stopping`: a stop is requested (no start is sent then, and a
/// fenced start ends with the node's exit report); `yield`: a yield is
/// requested (allocation_actor.cpp).
actors::allocation_actor spawn_allocation(caf::local_actor* parent, actors::context_ptr ctx,
                                          std::string id, actors::node_actor node,
                                          actors::job_actor job, std::uint64_t job_seq,
                                          std::optional<bus::start_order> order, bool confirmed,
                                          bool stopping, bool yield);

/// The effective RAM of a job: the figure fixed at submit (--ram, else the
/// profile's, else the default), which is also its hard cap on the node.
std::uint64_t effective_ram(const actors::context& ctx, const bus::job_info& job);

} // namespace cq::coord
