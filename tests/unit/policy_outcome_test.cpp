// The exit-report-to-outcome mapping (coordinator/policy/outcome.hpp).
#include "policy/outcome.hpp"

#include <catch2/catch.hpp>

#include "state_names.hpp"

using namespace cq;
using namespace cq::policy;
using action = exit_outcome::action;

TEST_CASE("a run that exits 0 by itself succeeds and feeds the profile") {
  auto o = outcome_of({bus::reason::none, 0, std::nullopt, false, false});
  CHECK(o.what == action::finish);
  CHECK(o.state == cq::bus::job_state::succeeded);
  CHECK(o.reason == bus::reason::none);
  CHECK(o.measure);
}

TEST_CASE("exit 6 is a checkpoint only after a committed yield request") {
  CHECK(outcome_of({bus::reason::checkpointed, 6, std::nullopt, true, false}).what ==
        action::checkpoint);
  auto self_made = outcome_of({bus::reason::checkpointed, 6, std::nullopt, false, false});
  CHECK(self_made.what == action::finish);
  CHECK(self_made.state == cq::bus::job_state::failed);
  CHECK(self_made.reason == "exit_code");
}

TEST_CASE("faults, refusals and losses are not the job's fault: it is queued again") {
  for (auto r : {bus::reason::fault, bus::reason::refused, bus::reason::lost}) {
    auto o = outcome_of({r, std::nullopt, 9, false, false});
    CHECK(o.what == action::requeue);
    CHECK(o.reason == r);
  }
  CHECK_FALSE(outcome_of({bus::reason::refused, 125, std::nullopt, false, false}).started);
  CHECK(outcome_of({bus::reason::fault, std::nullopt, 9, false, false}).started);
}

TEST_CASE("a job whose cancel was committed ends cancelled however it exited") {
  for (auto rc : {0, 1}) {
    auto o = outcome_of({bus::reason::none, rc, std::nullopt, false, true});
    CHECK(o.state == cq::bus::job_state::cancelled);
    CHECK(o.reason == "cancelled");
    CHECK_FALSE(o.measure);
  }
}

TEST_CASE("the node's reason names the failure; otherwise the signal or the exit code does") {
  CHECK(outcome_of({bus::reason::timeout, std::nullopt, 9, false, false}).reason == "timeout");
  CHECK_FALSE(outcome_of({bus::reason::timeout, std::nullopt, 9, false, false}).measure);
  auto oom = outcome_of({bus::reason::oom, std::nullopt, 9, false, false});
  CHECK(oom.reason == "oom");
  CHECK(oom.measure); // its peak, at its cap, still says it needs more
  auto lf = outcome_of({bus::reason::launch_failed, 125, std::nullopt, false, false});
  CHECK(lf.reason == "launch_failed");
  CHECK_FALSE(lf.started);
  CHECK_FALSE(lf.measure);
  CHECK(outcome_of({bus::reason::none, std::nullopt, 11, false, false}).reason == "signal");
  CHECK(outcome_of({bus::reason::none, 3, std::nullopt, false, false}).reason == "exit_code");
  CHECK(outcome_of({bus::reason::none, 0, 15, false, false}).state == cq::bus::job_state::failed);
}

TEST_CASE("a yield's stop is a preemption, a fence's a loss, an oom with retries a retry") {
  using act = cq::policy::exit_outcome::action;
  // Stopped after the yield grace (the node says cancelled): requeued, no resume.
  auto pre = outcome_of({bus::reason::cancelled, std::nullopt, 15, true, false, true});
  CHECK(pre.what == act::requeue);
  CHECK(pre.reason == "preempted");
  // ... but exit 6 within the stop's grace is still a checkpoint.
  CHECK(outcome_of({bus::reason::checkpointed, 6, std::nullopt, true, false, true}).what ==
        act::checkpoint);
  // A cancel overrides both.
  CHECK(outcome_of({bus::reason::cancelled, std::nullopt, 15, true, true, true}).state ==
        cq::bus::job_state::cancelled);
  // Fenced: lost, whatever the exit.
  auto fenced = outcome_of({bus::reason::none, 0, std::nullopt, false, false, false, true});
  CHECK(fenced.what == act::requeue);
  CHECK(fenced.reason == "lost");
  // An oom with retries left is retried (and measured); without, it fails.
  auto retry = outcome_of({bus::reason::oom, std::nullopt, 9, false, false, false, false, true});
  CHECK(retry.what == act::oom_retry);
  CHECK(retry.measure);
  CHECK(outcome_of({bus::reason::oom, std::nullopt, 9, false, false, false, false, false}).state ==
        cq::bus::job_state::failed);
}
