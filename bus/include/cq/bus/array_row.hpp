#pragma once
// Counting an array's tasks into the one row cq ls draws for it (array_row):
// the coordinator's rows listing and the CLI's folding of a job list share it.

#include "cq/bus/protocol.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace cq::bus {

/// Adds task `t` to `a`; `live_nodes` collects the nodes of its live tasks
/// (finish_tasks sets the row's nodes from it).
inline void count_task(array_row& a, const job_info& t, std::set<std::string>& live_nodes) {
  if (a.tasks++ == 0) {
    a.array = t.array;
    a.name = t.name;
    if (t.array_index)
      if (auto suffix = "-" + std::to_string(*t.array_index); a.name.ends_with(suffix))
        a.name.resize(a.name.size() - suffix.size());
    a.limit = t.array_limit;
    a.submitted_ms = t.submitted_ms;
  }
  switch (t.state) {
  case job_state::queued:
    ++a.queued;
    break;
  case job_state::succeeded:
    ++a.succeeded;
    break;
  case job_state::failed:
    ++a.failed;
    break;
  case job_state::cancelled:
    ++a.cancelled;
    break;
  default:
    ++a.running;
    if (!t.node.empty())
      live_nodes.insert(t.node);
  }
  a.submitted_ms = std::min(a.submitted_ms, t.submitted_ms);
  if (t.started_ms)
    a.started_ms = a.started_ms ? std::min(a.started_ms, t.started_ms) : t.started_ms;
  a.finished_ms = std::max(a.finished_ms, t.finished_ms);
}

/// The row's nodes once every task is counted: at most two named, all counted.
inline void finish_tasks(array_row& a, const std::set<std::string>& live_nodes) {
  a.node_count = live_nodes.size();
  a.nodes.clear();
  for (const auto& n : live_nodes)
    if (a.nodes.size() < 2)
      a.nodes.push_back(n);
}

} // namespace cq::bus
