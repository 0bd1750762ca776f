#include "policy/outcome.hpp"

namespace cq::policy {

namespace {
exit_outcome decide(const exit_facts& f) {
  exit_outcome o;
  auto& r = f.reason;
  o.started = r != bus::reason::launch_failed && r != bus::reason::refused;
  if (r == bus::reason::checkpointed && f.yield_requested) { // invariant 1
    o.what = exit_outcome::action::checkpoint;
    o.reason = r;
    return o;
  }
  if (r == bus::reason::fault || r == bus::reason::refused ||
      r == bus::reason::lost) { // invariant 2
    o.what = exit_outcome::action::requeue;
    o.reason = r;
    return o;
  }
  bool ok = f.exit_code && *f.exit_code == 0 && !f.signal;
  if (!f.cancelled && f.fenced) { // invariant 7
    o.what = exit_outcome::action::requeue;
    o.reason = bus::reason::lost;
    return o;
  }
  if (!f.cancelled && f.yield_stopped) { // invariant 5
    o.what = exit_outcome::action::requeue;
    o.reason = bus::reason::preempted;
    return o;
  }
  if (!f.cancelled && r == bus::reason::oom && f.oom_retry_left) { // invariant 6
    o.what = exit_outcome::action::oom_retry;
    o.reason = r;
    o.measure = true;
    return o;
  }
  if (f.cancelled) // invariant 3
    o.state = bus::job_state::cancelled, o.reason = bus::reason::cancelled;
  else if (r == bus::reason::launch_failed || r == bus::reason::timeout || r == bus::reason::oom ||
           r == bus::reason::vram_cap)
    o.state = bus::job_state::failed, o.reason = r;
  else if (ok)
    o.state = bus::job_state::succeeded, o.reason = bus::reason::none;
  else if (f.signal)
    o.state = bus::job_state::failed, o.reason = bus::reason::signal;
  else
    o.state = bus::job_state::failed, o.reason = bus::reason::exit_code;
  // Invariant 4.
  o.measure = r != bus::reason::launch_failed && !f.cancelled && r != bus::reason::timeout &&
              r != bus::reason::vram_cap;
  return o;
}
} // namespace

exit_outcome outcome_of(const exit_facts& f) {
  auto o = decide(f);
  // Invariant 9: a diagnostic run gets one start; what would requeue it
  // (a checkpoint, a fault, a loss, an OOM retry) ends it failed, reason kept.
  if (f.never_requeue && o.what != exit_outcome::action::finish) {
    o.what = exit_outcome::action::finish;
    o.state = bus::job_state::failed;
  }
  return o;
}

} // namespace cq::policy
