#pragma once
// What cq says to a mistyped command or a habit from another queue.

#include <string>
#include <string_view>
#include <vector>

namespace cq::cli {

/// The name of `names` nearest to `typed` (at most 2 edits away: insertions,
/// deletions, substitutions, a swap of neighbours), or "".
std::string nearest_name(std::string_view typed, const std::vector<std::string>& names);

/// What an option of Slurm (sbatch, srun) or pueue means in cq, for a
/// submit that used one: "" when `flag` is none of them.
std::string habit_hint(std::string_view flag);

} // namespace cq::cli
