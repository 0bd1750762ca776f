#pragma once
// Every job's id in sorted order, for prefix lookups (unique_prefix_of,
// resolve_job): an implementation detail of coordinator/api/.

#include <string>
#include <unordered_set>
#include <vector>

namespace cq::coord::api_impl {

/// Orders pointers to ids by the ids, and finds them by an id.
struct by_id {
  using is_transparent = void;
  bool operator()(const std::string* a, const std::string* b) const { return *a < *b; }
  bool operator()(const std::string* a, const std::string& b) const { return *a < b; }
  bool operator()(const std::string& a, const std::string* b) const { return a < *b; }
};

/// The ids of the read model's jobs (pointers to its keys), sorted when
/// asked for. A submit's commit appends its ids; the first lookup after it
/// sorts them and merges them in. Job ids are random, so a tree of them
/// (what this replaced) paid a walk of pointer-chasing string compares on
/// the api's one worker for every job submitted, asked for or not.
class id_index {
public:
  /// Adds an id whose string stays where it is until erase() names it.
  void add(const std::string* id) { added_.push_back(id); }
  /// Replaces every id with `ids`, in any order (recovery).
  void assign(std::vector<const std::string*> ids);
  /// Removes the ids at these addresses, compared as addresses: their
  /// strings may be gone already.
  void erase(const std::unordered_set<const std::string*>& gone);
  /// Every id, sorted (by_id).
  const std::vector<const std::string*>& sorted() const;
  std::size_t size() const { return sorted_.size() + added_.size(); }

private:
  /// Sorts `ids` as by_id would, comparing their first eight bytes as one
  /// integer first: the strings are read only where those tie.
  static void sort(std::vector<const std::string*>& ids);

  mutable std::vector<const std::string*> sorted_;
  mutable std::vector<const std::string*> added_; ///< not yet merged, in any order
};

} // namespace cq::coord::api_impl
