#pragma once
// A listing's filters on one job. The coordinator's rows listing (ls_req's
// states, name_pattern, owner, node) and `cq ls --json` (which filters the
// jobs it fetched) apply this one rule.

#include "cq/bus/schema.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace cq::bus {

/// Whether `j` is in `states` (any state when empty), its name matches the
/// glob `name_pattern`, and it belongs to `owner` and is on `node` (each
/// when given).
inline bool passes_filters(const job_info& j, const std::vector<job_state>& states,
                           const std::optional<std::string>& name_pattern,
                           const std::optional<std::string>& owner,
                           const std::optional<std::string>& node) {
  if (!states.empty() && std::find(states.begin(), states.end(), j.state) == states.end())
    return false;
  if (name_pattern && fnmatch(name_pattern->c_str(), j.name.c_str(), 0) != 0)
    return false;
  if (owner && j.owner != *owner)
    return false;
  return !node || j.node == *node;
}

} // namespace cq::bus
