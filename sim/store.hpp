#pragma once
// The simulated store: the real store actor (SQLite, so a restarted
// coordinator sees exactly the committed rows) behind a wrapper that fails
// the commits a plan chooses, and records what was committed, for checkers.
//
// Invariants:
//  1. A failed commit reaches the real store never: nothing of it is durable,
//     and its caller gets a commit_result with an error.
//  2. `committed_jobs` holds a job id only after the real store reported the
//     batch that submitted it as durable.
//  3. A committed allocation row moves its job's entry in `live_allocs`; a
//     job with two non-finished allocations is reported through on_twice.

#include "cq/actors/system.hpp"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace cq::sim {

struct store_plan {
  /// Called for every commit; true fails it (invariant 1).
  std::function<bool(const change_batch&)> fail;
  /// Called after a commit is durable, before its reply; true: the process
  /// dies there (the reply is never sent; the world crashes the coordinator
  /// before any other actor runs).
  std::function<bool(const change_batch&)> crash_after;
  /// Called for every commit; true holds it back, neither committed nor
  /// answered, until the wrapper gets flush_atom (a test orders replies so).
  std::function<bool(const change_batch&)> hold;
  std::uint64_t commits = 0; ///< commits that reached the real store
  std::uint64_t failed = 0;  ///< commits failed by the plan
  /// Jobs whose submission is durable (invariant 2).
  std::set<std::string> committed_jobs;
  /// The committed state of every job, and how many are not terminal.
  std::map<std::string, cq::job_state> job_states;
  std::size_t open_jobs = 0;
  /// Allocations whose end (state finished) is durable.
  std::set<std::string> finished_allocs;
  /// The coordinator's view (invariant 3): per job, the allocations whose
  /// committed state is not finished; at most one (SPEC section 10).
  std::map<std::string, std::set<std::string>> live_allocs;
  /// Called when a commit gives a job a second live allocation.
  std::function<void(const std::string& job, const std::set<std::string>& live)> on_twice;
  /// The latest committed state of every allocation.
  std::map<std::string, cq::alloc_state> alloc_states;
  /// Called with every committed job row, after job_states has it.
  std::function<void(const bus::job_info&)> on_job;
  /// Allocations committed lost straight from unknown: their node was down for
  /// the job's lost-after, so it may still run them (docs/adr/0021).
  std::set<std::string> lost_while_down;
  /// Every finished job's (end, submission seq), until a committed history
  /// expiry (ADR 0071) forgets it: then it is in `forgotten`.
  std::map<std::pair<std::int64_t, std::uint64_t>, std::string> ended;
  std::set<std::string> forgotten;
};

/// The wrapper; linked to `real`, so ending one ends both.
actors::store_actor spawn_faulty_store(caf::actor_system& sys, actors::store_actor real,
                                       std::shared_ptr<store_plan> plan);

} // namespace cq::sim
