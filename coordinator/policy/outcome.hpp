#pragma once
// What a node's exit report means for its job (SPEC sections 3 and 4): a
// pure function from the facts the job actor holds to the job's next state.
//
//  1. Exit 6 is a checkpoint only when the coordinator had committed a yield
//     request for that allocation; without one it is an ordinary failure.
//  2. A latched GPU fault, a launch the node refused for its own reasons, and
//     an allocation the node lost are not the job's fault: it is queued again
//     in its old slot.
//  3. A job whose cancel was committed ends cancelled, however its process
//     ended (a requeue of such a job ends it cancelled as well: the job
//     actor's requeue() checks the same fact).
//  5. A job stopped because it did not yield within the grace (and did not
//     checkpoint meanwhile) is preempted: queued again in its old slot,
//     without resume.
//  7. A fenced allocation (its start was never acknowledged; cq stopped it)
//     is lost, whatever its exit: queued again in its old slot.
//  6. An oom with retries left (--retry-oom) is queued again with a larger
//     cap (the job actor computes the rung, policy/spec.hpp).
//  4. Only runs that ended by themselves (or by their RAM cap, whose peak
//     still says the job needs more) feed the job's profile.
//  9. A diagnostic run (one start granted on a disabled node) is never
//     queued again: what would requeue it fails it, with the same reason.

#include "cq/bus/protocol.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace cq::policy {

struct exit_facts {
  bus::reason reason = bus::reason::none; ///< the node's (none: ran to its own end)
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  bool yield_requested = false; ///< a yield request was committed for the allocation
  bool cancelled = false;       ///< the job's cancel was committed
  bool yield_stopped = false;   ///< stopped after the yield grace ran out
  bool fenced = false;          ///< stopped because no connection took its start
  bool oom_retry_left = false;  ///< --retry-oom allows another attempt
  bool never_requeue = false;   ///< a diagnostic run: what would requeue fails instead
};

struct exit_outcome {
  enum class action {
    requeue,    ///< back to its old slot, a new allocation later
    checkpoint, ///< requeue with resume (CQ_RESUME=1)
    oom_retry,  ///< requeue with the next cap of the ladder
    finish,     ///< terminal: `state` and `reason`
  } what = action::finish;
  bus::job_state state = bus::job_state::failed; ///< finish: succeeded|failed|cancelled
  bus::reason reason = bus::reason::none; ///< the job's (finish) or the allocation's (requeue)
  bool measure = false;                   ///< feed the profile
  bool started = true;                    ///< the workload ran (false: launch_failed, refused)
};

exit_outcome outcome_of(const exit_facts& f);

} // namespace cq::policy
