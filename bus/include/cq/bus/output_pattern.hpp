#pragma once
// cq submit --output PATTERN: where a job's output is also written, as a path
// with Slurm's placeholders. The CLI and the coordinator check a pattern; the
// node expands it for each attempt (cq-shim then writes the file as the
// job's user, node/shim.cpp); cq show expands it for the job it shows.
//
//   %j  the job's id          %a  its array index ("" outside an array)
//   %x  the job's name        %n  the node's name
//   %%  a percent sign
//
// Any other character after % is refused, so a typo is caught at submit, not
// on the node. A value that holds '/' (a name) has it replaced by '_', so an
// expansion never adds a directory the pattern does not name.

#include <cstddef>
#include <string>
#include <string_view>

namespace cq::bus {

/// The longest pattern taken, in bytes.
inline constexpr std::size_t output_pattern_max = 1024;

/// What the placeholders stand for.
struct output_values {
  std::string_view job;
  std::string_view array_index; ///< "" for a job that is not an array task
  std::string_view name;
  std::string_view node;
};

/// Why `pattern` is not one (empty, too long, not absolute, a NUL or a
/// newline, an unknown or unfinished placeholder); "" when it is.
std::string output_pattern_problem(std::string_view pattern);

/// `pattern` with its placeholders replaced (a valid pattern: see above).
std::string expand_output(std::string_view pattern, const output_values& v);

} // namespace cq::bus
