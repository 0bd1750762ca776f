#pragma once
// A listing's filters on one job. The coordinator's listings (ls_req's
// states, name_pattern, owner or mine, node) and `cq ls --json` (which
// filters again what an older coordinator sent unfiltered) apply this one
// rule.

#include "cq/bus/listing.hpp"
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

/// A listing request's filters as one test of a job (passes_filters).
struct listing_filter {
  std::vector<job_state> states;
  std::optional<std::string> name_pattern, owner, node;
  bool any = false; ///< the request names a filter at all
  bool operator()(const job_info& j) const {
    return passes_filters(j, states, name_pattern, owner, node);
  }
};

/// The filters `q` names, `mine` being `caller`'s jobs; invalid_argument
/// for a state that is none.
inline result<listing_filter> listing_filter_of(const ls_req& q, const std::string& caller) {
  listing_filter f;
  for (const auto& w : q.states.value_or(string_list{})) {
    job_state s{};
    if (!parse(w, s))
      return error_info{errc::invalid_argument,
                        "states: '" + w.substr(0, 32) + "' is not a job state"};
    f.states.push_back(s);
  }
  f.name_pattern = q.name_pattern;
  f.owner = q.mine.value_or(false) ? std::optional<std::string>(caller) : q.owner;
  f.node = q.node;
  f.any = !f.states.empty() || f.name_pattern || f.owner || f.node;
  return f;
}

} // namespace cq::bus
