// The job and allocation state machines' tables (coordinator/policy/transitions.hpp).
#include "policy/transitions.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace cq;
using namespace cq::policy;
using js = bus::job_state;
using as = bus::alloc_state;

namespace {
const std::vector<js> jobs{js::queued,    js::starting, js::running,  js::stopping,
                           js::succeeded, js::failed,   js::cancelled};
const std::vector<as> allocs{as::starting, as::running, as::stopping, as::finished, as::unknown};
} // namespace

TEST_CASE("the job machine has exactly the edges of SPEC section 4") {
  std::set<std::pair<std::string, std::string>> want{
      {"queued", "starting"},    {"queued", "cancelled"},  {"queued", "failed"},
      {"starting", "running"},   {"starting", "stopping"}, {"starting", "queued"},
      {"starting", "succeeded"}, {"starting", "failed"},   {"starting", "cancelled"},
      {"running", "stopping"},   {"running", "queued"},    {"running", "succeeded"},
      {"running", "failed"},     {"running", "cancelled"}, {"stopping", "queued"},
      {"stopping", "succeeded"}, {"stopping", "failed"},   {"stopping", "cancelled"}};
  std::set<std::pair<std::string, std::string>> got;
  for (auto f : jobs)
    for (auto t : jobs)
      if (f != t && job_edge(f, t))
        got.emplace(bus::to_string(f), bus::to_string(t));
  CHECK(got == want);
}

TEST_CASE("a terminal job state and a finished allocation have no edge out") {
  for (auto f : {js::succeeded, js::failed, js::cancelled})
    for (auto t : jobs)
      CHECK(job_edge(f, t) == (f == t));
  for (auto t : allocs)
    CHECK(alloc_edge(as::finished, t) == (t == as::finished));
  // A running job never goes back to starting; an allocation never back to nothing.
  CHECK_FALSE(job_edge(js::running, js::starting));
  CHECK_FALSE(job_edge(js::stopping, js::running));
}

TEST_CASE("set_state writes the state and tells the observer of each change") {
  std::vector<std::string> seen;
  auto before = observe_transitions(
      [&](std::string_view m, const std::string& id, std::string_view f, std::string_view t) {
        seen.push_back(std::string(m) + " " + id + " " + std::string(f) + "->" + std::string(t));
      });
  bus::job_info j;
  j.id = "j1";
  set_state(j, js::queued); // no change: not told
  set_state(j, js::starting);
  set_state(j, js::running);
  bus::allocation_info a;
  a.id = "a1";
  set_state(a, as::unknown);
  set_state(a, as::finished);
  observe_transitions(before);
  CHECK(j.state == js::running);
  CHECK(a.state == as::finished);
  CHECK(seen == std::vector<std::string>{"job j1 queued->starting", "job j1 starting->running",
                                         "allocation a1 starting->unknown",
                                         "allocation a1 unknown->finished"});
}

TEST_CASE("the node machine: pending until approved, pending again when it joins anew") {
  CHECK(node_edge("", "pending"));
  CHECK(node_edge("pending", "approved"));
  CHECK(node_edge("approved", "pending"));
  CHECK_FALSE(node_edge("pending", "online"));
  CHECK_FALSE(node_edge("approved", ""));
  node_row n{"box", "", 0};
  set_state(n, "pending");
  set_state(n, "approved");
  CHECK(n.state == "approved");
}
