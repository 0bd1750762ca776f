#pragma once
// Arrays by id and by name, for the api's array lookups: an implementation
// detail of coordinator/api/.

#include "cq/bus/array_row.hpp"
#include "cq/growth.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cq::coord::api_impl {

/// The read model's array tasks (pointers to its nodes) by array id, each
/// array's in submission order, and the arrays by name. Built at the first
/// lookup from the jobs in submission order and kept up to date by submits,
/// as name_index is: a lookup reads the arrays a reference may name and
/// their tasks, where array_named read every job in memory (about 16 ms at
/// 101,000 jobs for each `cq show NAME`, `cq wait ARRAY` or `--after
/// ARRAY`). `Node` is the read model's std::pair<const std::string, entry>,
/// where entry is a bus::job_info.
template <class Node>
class array_index {
public:
  using task_list = std::vector<const Node*>;

  /// Adds a new job (a submit's, the newest). Nothing while not built.
  void add(const Node* n) {
    if (built_ && !n->second.array.empty())
      put(n);
  }
  /// Forgets everything: the next lookup rebuilds the index. When jobs leave
  /// the read model (their pointers would dangle).
  void reset() {
    built_ = false;
    tasks_.clear();
    named_.clear();
  }
  /// The tasks of array `id` in submission order; empty for no such array.
  /// `by_seq` is the read model's jobs in submission order.
  template <class BySeq>
  const task_list& tasks(const BySeq& by_seq, const std::string& id) {
    build(by_seq);
    static const task_list none;
    auto it = tasks_.find(id);
    return it == tasks_.end() ? none : it->second;
  }
  /// Calls `each` with every task of every array that `ref` may name as
  /// bus::array_named reads it (the array's id, a prefix of it of at least 4
  /// characters, or its name); it calls no other job.
  template <class BySeq, class Each>
  void each_candidate(const BySeq& by_seq, const std::string& ref, Each each) {
    build(by_seq);
    auto visit = [&](const task_list& tasks) {
      for (const Node* n : tasks)
        each(n->second);
    };
    if (ref.size() >= 4) {
      for (auto it = tasks_.lower_bound(ref); it != tasks_.end() && it->first.starts_with(ref);
           ++it)
        visit(it->second);
    } else if (auto it = tasks_.find(ref); it != tasks_.end()) {
      visit(it->second);
    }
    if (auto named = named_.find(ref); named != named_.end())
      for (auto array : named->second)
        if (ref.size() < 4 ? array->first != ref : !array->first.starts_with(ref)) // not above
          visit(array->second);
  }

private:
  template <class BySeq>
  void build(const BySeq& by_seq) {
    if (built_)
      return;
    for (const auto& [seq, node] : by_seq)
      if (!node->second.array.empty())
        put(node);
    built_ = true;
  }
  void put(const Node* n) {
    auto [it, fresh] = tasks_.try_emplace(n->second.array);
    make_room(it->second);
    it->second.push_back(n);
    // By the name each task gives its array (they share one, as cq ls draws
    // it; a task named otherwise is found under its own too).
    auto& arrays = named_[std::string(bus::array_name_of(n->second))];
    if (arrays.empty() || arrays.back() != it)
      arrays.push_back(it);
  }

  bool built_ = false;
  std::map<std::string, task_list> tasks_; ///< by array id, sorted: prefixes are ranges
  /// Arrays by name, each once (a task's array is the last one listed when
  /// its name was listed already).
  std::map<std::string, std::vector<typename std::map<std::string, task_list>::iterator>> named_;
};

} // namespace cq::coord::api_impl
