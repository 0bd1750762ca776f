#include "id_index.hpp"

#include <algorithm>

namespace cq::coord::api_impl {

void id_index::erase(const std::unordered_set<const std::string*>& gone) {
  if (gone.empty())
    return;
  auto named = [&](const std::string* id) { return gone.count(id) > 0; };
  std::erase_if(sorted_, named);
  std::erase_if(added_, named);
}

const std::vector<const std::string*>& id_index::sorted() const {
  if (added_.empty())
    return sorted_;
  std::sort(added_.begin(), added_.end(), by_id{});
  // A few new ids go in where they belong; many are merged in one pass that
  // compares each new id with log(n) old ones, not every old one.
  constexpr std::size_t in_place = 16;
  if (added_.size() <= in_place) {
    auto from = sorted_.begin();
    for (const auto* id : added_) {
      from = std::lower_bound(from, sorted_.end(), *id, by_id{});
      from = std::next(sorted_.insert(from, id));
    }
  } else {
    std::vector<const std::string*> merged;
    merged.reserve(sorted_.size() + added_.size());
    auto from = sorted_.begin();
    for (const auto* id : added_) {
      auto at = std::lower_bound(from, sorted_.end(), *id, by_id{});
      merged.insert(merged.end(), from, at);
      merged.push_back(id);
      from = at;
    }
    merged.insert(merged.end(), from, sorted_.end());
    sorted_ = std::move(merged);
  }
  added_.clear();
  return sorted_;
}

} // namespace cq::coord::api_impl
