#include "policy/transitions.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace cq::policy {

namespace {

using bus::alloc_state;
using bus::job_state;

transition_observer& observer() {
  static transition_observer o;
  return o;
}

[[noreturn]] void refuse(std::string_view machine, const std::string& id, std::string_view from,
                         std::string_view to) {
  std::fputs(fmt::format("cq: BUG: {} {} has no edge {} -> {} (policy/transitions.cpp)\n", machine,
                         id, from, to)
                 .c_str(),
             stderr);
  std::abort();
}

bool terminal(job_state s) {
  return s == job_state::succeeded || s == job_state::failed || s == job_state::cancelled;
}

} // namespace

bool job_edge(job_state from, job_state to) {
  if (from == to)
    return true;
  switch (from) {
  case job_state::queued: // placed; cancelled or failed (a dependency) before it starts
    return to == job_state::starting || to == job_state::cancelled || to == job_state::failed;
  case job_state::starting: // the node reported the start; or as from running
  case job_state::running:  // a stop (cancel, yield); requeued (loss, checkpoint); its end
    return (from == job_state::starting && to == job_state::running) || to == job_state::stopping ||
           to == job_state::queued || terminal(to);
  case job_state::stopping: // requeued (preempted, lost) or ended
    return to == job_state::queued || terminal(to);
  case job_state::succeeded:
  case job_state::failed:
  case job_state::cancelled:
    return false;
  }
  return false;
}

bool alloc_edge(alloc_state from, alloc_state to) {
  if (from == to)
    return true;
  switch (from) {
  case alloc_state::starting: // started; its node down or its start fenced; ended
    return to == alloc_state::running || to == alloc_state::unknown ||
           to == alloc_state::stopping || to == alloc_state::finished;
  case alloc_state::running:
    return to == alloc_state::unknown || to == alloc_state::stopping || to == alloc_state::finished;
  case alloc_state::stopping:
    return to == alloc_state::unknown || to == alloc_state::finished;
  case alloc_state::unknown: // found again (started or not yet); ended; lost
    return to == alloc_state::running || to == alloc_state::starting ||
           to == alloc_state::stopping || to == alloc_state::finished;
  case alloc_state::finished:
    return false;
  }
  return false;
}

bool node_edge(std::string_view from, std::string_view to) {
  auto known = [](std::string_view s) { return s == "pending" || s == "approved"; };
  return known(to) && (from == to || known(from) || from.empty());
}

namespace {
/// The one transition step of every machine: check the edge, write, tell.
template <class State, class Name>
void transit(std::string_view machine, const std::string& id, State& field, State to,
             bool (*edge)(State, State), Name name) {
  State from = field;
  if (!edge(from, to))
    refuse(machine, id, name(from), name(to));
  field = to;
  if (from != to)
    if (auto& o = observer())
      o(machine, id, name(from), name(to));
}
} // namespace

void set_state(node_row& node, std::string_view to) {
  std::string_view from = node.state;
  transit<std::string_view>("node", node.name, from, to, node_edge, [](std::string_view s) {
    return s.empty() ? std::string_view("(new)") : s;
  });
  node.state = std::string(to);
}

void set_state(bus::job_info& job, job_state to) {
  transit("job", job.id, job.state, to, job_edge, [](job_state s) { return bus::to_string(s); });
}

void set_state(bus::allocation_info& alloc, alloc_state to) {
  transit("allocation", alloc.id, alloc.state, to, alloc_edge,
          [](alloc_state s) { return bus::to_string(s); });
}

transition_observer observe_transitions(transition_observer o) {
  return std::exchange(observer(), std::move(o));
}

} // namespace cq::policy
