#include "order.hpp"

#include <cassert>
#include <cstdlib>

namespace cq::policy {

namespace {

/// A rank strictly between lo and hi, if there is one.
std::optional<std::int64_t> between(std::int64_t lo, std::int64_t hi) {
  if (hi - lo < 2)
    return std::nullopt;
  return lo + (hi - lo) / 2;
}

std::optional<std::int64_t> rank_in(const std::vector<std::int64_t>& r, placement p,
                                    std::optional<std::size_t> t, std::int64_t max_rank) {
  switch (p) {
  case placement::front:
    return (r.empty() ? std::int64_t{0} : r.front()) - rank_step;
  case placement::back:
    return std::max(max_rank, r.empty() ? max_rank : r.back()) + rank_step;
  case placement::before: {
    auto hi = r[*t];
    auto lo = *t > 0 ? r[*t - 1] : hi - 2 * rank_step;
    return between(lo, hi);
  }
  case placement::after: {
    auto lo = r[*t];
    auto hi = *t + 1 < r.size() ? r[*t + 1] : lo + 2 * rank_step;
    return between(lo, hi);
  }
  }
  return std::nullopt;
}

} // namespace

move_plan plan_move(const std::vector<std::int64_t>& ranks, placement p,
                    std::optional<std::size_t> target, std::int64_t max_rank) {
  if ((p == placement::before || p == placement::after) && (!target || *target >= ranks.size()))
    std::abort(); // REQUIRES violated: a caller bug
  if (auto r = rank_in(ranks, p, target, max_rank))
    return {*r, std::nullopt};
  // No gap left: renumber the level, then place on the new ranks (which
  // always leave a gap of rank_step).
  std::vector<std::int64_t> fresh(ranks.size());
  for (std::size_t i = 0; i < fresh.size(); ++i)
    fresh[i] = static_cast<std::int64_t>(i + 1) * rank_step;
  auto r = rank_in(fresh, p, target, fresh.empty() ? 0 : fresh.back());
  assert(r);
  return {*r, std::move(fresh)};
}

} // namespace cq::policy
