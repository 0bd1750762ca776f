#include "id_index.hpp"

#include "cq/growth.hpp"

#include <algorithm>
#include <cstdint>

namespace cq::coord::api_impl {

namespace {

/// The first eight bytes of `s` as a big-endian integer (zeros past its
/// end): ordered as the strings' first eight bytes are.
std::uint64_t head_of(const std::string& s) {
  std::uint64_t head = 0;
  for (std::size_t i = 0; i < 8; ++i)
    head = (head << 8) | (i < s.size() ? static_cast<unsigned char>(s[i]) : 0u);
  return head;
}

} // namespace

void id_index::sort(std::vector<const std::string*>& ids) {
  // Job ids are random: a compare through two pointers is two cache misses
  // on a large read model. Sorting 101,000 of them so took about 60 ms of a
  // restart on the CI kind of VM.
  std::vector<std::pair<std::uint64_t, const std::string*>> keyed;
  keyed.reserve(ids.size());
  for (const auto* id : ids)
    keyed.emplace_back(head_of(*id), id);
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  });
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = keyed[i].second;
}

void id_index::assign(std::vector<const std::string*> ids) {
  sort(ids);
  sorted_ = std::move(ids);
  added_.clear();
}

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
  sort(added_);
  // A few new ids go in where they belong; many are merged in one pass that
  // compares each new id with log(n) old ones, not every old one.
  constexpr std::size_t in_place = 16;
  if (added_.size() <= in_place) {
    make_room(sorted_, added_.size()); // no insert below can fail
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
