#pragma once
// Jobs by name, for resolve_job: an implementation detail of coordinator/api/.

#include "cq/growth.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace cq::coord::api_impl {

/// The read model's named jobs (pointers to its nodes) sorted by a hash of
/// their names, built at the first lookup and kept up to date by submits: a
/// lookup reads the few jobs whose names hash alike, where resolve_job read
/// every job in memory for each id prefix or name a person typed (20 ms per
/// `cq show PREFIX` at 101,000 jobs). `Node` is the read model's
/// std::pair<const std::string, entry>, where entry has a `name`.
template <class Node>
class name_index {
public:
  /// Adds a new job (a submit's). Nothing while the index is not built.
  void add(const Node* n) {
    if (built_ && !n->second.name.empty()) {
      make_room(added_);
      added_.emplace_back(hash(n->second.name), n);
    }
  }
  /// Forgets every job: the next lookup rebuilds the index from the read
  /// model. After a recovery, and when jobs leave the read model (their
  /// pointers would dangle).
  void reset() {
    built_ = false;
    sorted_ = {};
    added_ = {};
  }
  /// Calls `each` with every job of `jobs` (the read model) named `name`.
  template <class Map, class Each>
  void each_named(const Map& jobs, std::string_view name, Each each) {
    if (name.empty())
      return;
    if (!built_) {
      for (auto& n : jobs)
        if (!n.second.name.empty())
          sorted_.emplace_back(hash(n.second.name), &n);
      std::sort(sorted_.begin(), sorted_.end(), by_hash);
      built_ = true;
    } else if (!added_.empty()) {
      std::sort(added_.begin(), added_.end(), by_hash);
      auto mid = sorted_.size();
      make_room(sorted_, added_.size());
      sorted_.insert(sorted_.end(), added_.begin(), added_.end());
      std::inplace_merge(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(mid),
                         sorted_.end(), by_hash);
      added_.clear();
    }
    std::pair<std::uint64_t, const Node*> key{hash(name), nullptr};
    auto [lo, hi] = std::equal_range(sorted_.begin(), sorted_.end(), key, by_hash);
    for (auto it = lo; it != hi; ++it)
      if (it->second->second.name == name) // names may hash alike
        each(*it->second);
  }

private:
  using entry = std::pair<std::uint64_t, const Node*>;
  static std::uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static bool by_hash(const entry& a, const entry& b) { return a.first < b.first; }

  bool built_ = false;
  std::vector<entry> sorted_;
  std::vector<entry> added_; ///< since the last lookup, in any order
};

} // namespace cq::coord::api_impl
