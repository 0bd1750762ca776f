#pragma once
// Counting an array's tasks into the one row cq ls draws for it (array_row):
// the coordinator's rows listing and the CLI's folding of a job list share it.

#include "cq/bus/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace cq::bus {

/// An array's name, as its row in cq ls shows it (NAME[TASKS]): task `t`'s
/// name without its -INDEX suffix.
inline std::string_view array_name_of(const job_info& t) {
  std::string_view name = t.name;
  if (t.array_index)
    if (auto suffix = "-" + std::to_string(*t.array_index); name.ends_with(suffix))
      name.remove_suffix(suffix.size());
  return name;
}

/// The array that `ref`, as a person typed it, names among the jobs `each`
/// walks (it calls its argument with every job): the array's id, a prefix
/// of it of at least 4 characters, or its name (the one array of that name,
/// else the one of that name with a task not yet ended). "" when it names
/// no array; an error when it names several.
template <class Each>
result<std::string> array_named(const std::string& ref, Each each) {
  std::map<std::string, bool> by_id, by_name; // array -> a task not ended
  each([&](const job_info& j) {
    if (j.array.empty())
      return;
    bool live = !is_terminal(j.state);
    if (j.array == ref || (ref.size() >= 4 && j.array.starts_with(ref)))
      by_id[j.array] |= live;
    else if (array_name_of(j) == ref)
      by_name[j.array] |= live;
  });
  // Each id as long as it takes to tell the listed ones apart (at least 8
  // characters), the first six of them.
  auto several = [&](const std::map<std::string, bool>& arrays, std::string_view what,
                     std::string_view hint) {
    constexpr std::size_t shown = 6;
    std::size_t cut = 8;
    for (auto a = arrays.begin(), b = std::next(a); b != arrays.end(); ++a, ++b)
      cut = std::max<std::size_t>(
          cut,
          std::mismatch(a->first.begin(), a->first.end(), b->first.begin(), b->first.end()).first -
              a->first.begin() + 1);
    std::string list;
    std::size_t n = 0;
    for (const auto& [array, live] : arrays)
      if (n++ < shown)
        list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", array.substr(0, cut),
                            live ? "not ended" : "ended");
    if (arrays.size() > shown)
      list += fmt::format(" and {} more", arrays.size() - shown);
    return error_info{errc::invalid_argument,
                      fmt::format("job: '{}' {} {} arrays: {}; {}", ref.substr(0, 64), what,
                                  arrays.size(), list, hint)};
  };
  if (by_id.size() == 1)
    return by_id.begin()->first;
  if (by_id.size() > 1)
    return several(by_id, "begins the ids of", "give more of the id");
  if (by_name.size() == 1)
    return by_name.begin()->first;
  std::size_t live = 0; // arrays of that name with tasks not ended
  const std::string* meant = nullptr;
  for (const auto& [array, not_ended] : by_name)
    if (not_ended)
      ++live, meant = &array;
  if (live == 1)
    return *meant;
  if (by_name.size() > 1)
    return several(by_name, "is the name of", "give the array's id");
  return std::string();
}

/// The nodes an array's tasks are on (live ones) and ran on (ended ones),
/// gathered by count_task for finish_tasks.
struct task_nodes {
  std::set<std::string> live;
  std::set<std::string> ended;
};

/// Adds task `t` to `a`; `nodes` gathers where its tasks are and were
/// (finish_tasks sets the row's nodes from it).
inline void count_task(array_row& a, const job_info& t, task_nodes& nodes) {
  if (a.tasks++ == 0) {
    a.array = t.array;
    a.name = array_name_of(t);
    a.limit = t.array_limit;
    a.submitted_ms = t.submitted_ms;
  }
  switch (t.state) {
  case job_state::queued:
    ++(t.on_hold ? a.held : a.queued);
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
      nodes.live.insert(t.node);
  }
  if (is_terminal(t.state) && !t.node.empty())
    nodes.ended.insert(t.node);
  a.submitted_ms = std::min(a.submitted_ms, t.submitted_ms);
  if (t.started_ms)
    a.started_ms = a.started_ms ? std::min(a.started_ms, t.started_ms) : t.started_ms;
  a.finished_ms = std::max(a.finished_ms, t.finished_ms);
}

/// The row's nodes once every task is counted, at most two named, all
/// counted: those of its live tasks; once every task has ended, those they
/// ran on (as a finished job shows its last node).
inline void finish_tasks(array_row& a, const task_nodes& nodes) {
  bool ended = a.running == 0 && a.queued == 0 && a.held == 0;
  const auto& shown = ended ? nodes.ended : nodes.live;
  a.node_count = shown.size();
  a.nodes.clear();
  for (const auto& n : shown)
    if (a.nodes.size() < 2)
      a.nodes.push_back(n);
}

} // namespace cq::bus
