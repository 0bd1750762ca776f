#pragma once
// Serving-order arithmetic (SPEC sections 4 and 9): pure functions, no CAF.
//
// Each level (high, medium, low) orders its jobs by a sparse integer rank,
// ties broken by submission seq (docs/adr/0008). New jobs get the level's
// largest rank plus rank_step; a move takes a rank between its new
// neighbours. When two neighbours have no integer between them, the whole
// level is renumbered (rank_step apart, order kept) in the same commit as the
// move, so a crash never leaves half a renumbering behind.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cq::policy {

/// Gap between the ranks of consecutive jobs: room for about twenty moves
/// into the same gap before a renumbering.
inline constexpr std::int64_t rank_step = 1 << 20;

enum class placement { front, back, before, after };

/// A move's outcome: the moved job's new rank and, when the level had to be
/// renumbered, the new rank of every other job of the level (in the order of
/// `ranks` given to plan_move).
struct move_plan {
  std::int64_t rank = 0;
  std::optional<std::vector<std::int64_t>> renumbered;
};

/// Plans a move within one level. `ranks`: the ranks of the level's other
/// jobs in serving order (ascending, the moved job left out); `target`: the
/// index in `ranks` of the job to move before or after (required for before
/// and after, ignored otherwise); `max_rank`: the largest rank the level has
/// given so far (back places after it).
/// REQUIRES: ranks ascending; target < ranks.size() for before/after.
move_plan plan_move(const std::vector<std::int64_t>& ranks, placement p,
                    std::optional<std::size_t> target, std::int64_t max_rank);

} // namespace cq::policy
