#include "policy/outcome.hpp"

namespace cq::policy {

exit_outcome outcome_of(const exit_facts& f) {
  exit_outcome o;
  auto& r = f.reason;
  o.started = r != "launch_failed" && r != "refused";
  if (r == "checkpointed" && f.yield_requested) { // invariant 1
    o.what = exit_outcome::action::checkpoint;
    o.reason = r;
    return o;
  }
  if (r == "fault" || r == "refused" || r == "lost") { // invariant 2
    o.what = exit_outcome::action::requeue;
    o.reason = r;
    return o;
  }
  bool ok = f.exit_code && *f.exit_code == 0 && !f.signal;
  if (f.stopping) // invariant 3
    o.state = bus::job_state::cancelled, o.reason = "cancelled";
  else if (r == "launch_failed" || r == "timeout" || r == "oom" || r == "vram_cap")
    o.state = bus::job_state::failed, o.reason = r;
  else if (ok)
    o.state = bus::job_state::succeeded, o.reason = "";
  else if (f.signal)
    o.state = bus::job_state::failed, o.reason = "signal";
  else
    o.state = bus::job_state::failed, o.reason = "exit_code";
  // Invariant 4.
  o.measure = r != "launch_failed" && !f.stopping && r != "timeout" && r != "vram_cap";
  return o;
}

} // namespace cq::policy
