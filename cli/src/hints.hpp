#pragma once
// What cq says to a mistyped command or a habit from another queue.

#include "cq/bus/schema.hpp"

#include <functional>
#include <optional>
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

/// The same for the other commands: what cq says for option `flag` of
/// `cq cmd` that another queue has (pueue kill --all), or "".
std::string command_habit(std::string_view cmd, std::string_view flag);

/// What cq says to `cq CMD TYPED` when CMD is a command of `commands` (node,
/// token, profile) and TYPED names none of them: the nearest, else the list;
/// "" when TYPED is an option or one of them.
std::string unknown_subcommand(std::string_view cmd, std::string_view typed,
                               const std::vector<std::string>& commands);

/// The job's command of `cq CMD` (submit or run) into `argv`: `rest`, what
/// the option parser left (the command's first word and every word after
/// it), or `after_dashes`, what followed `--`. A refusal when a word before
/// the command looks like an option cq lacks (naming what was meant: a habit
/// from another queue, or `suggest`'s option for a one-dash word), or when
/// words came both before and after `--`.
std::optional<bus::error_info>
take_command(std::string_view cmd, std::vector<std::string> rest,
             std::optional<std::vector<std::string>> after_dashes,
             const std::function<std::string(std::string_view)>& suggest,
             std::vector<std::string>& argv);

} // namespace cq::cli
