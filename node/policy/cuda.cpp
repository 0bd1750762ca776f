#include "node/policy/cuda.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cq::node {

bus::result<std::optional<std::string>>
cuda_visible_devices(const bus::string_list& lanes, const std::vector<bus::lane_info>& node_lanes) {
  std::vector<const bus::lane_info*> held;
  for (auto& name : lanes) {
    auto it = std::find_if(node_lanes.begin(), node_lanes.end(),
                           [&](const bus::lane_info& l) { return l.name == name; });
    if (it == node_lanes.end())
      return bus::error_info{errc::invalid_argument,
                             fmt::format("lane '{}' is not a lane of this node", name)};
    for (auto* other : held) {
      if (other->name == name)
        return bus::error_info{errc::invalid_argument,
                               fmt::format("lane '{}' is given twice", name)};
      if (other->index && it->index && *other->index == *it->index)
        return bus::error_info{
            errc::invalid_argument,
            fmt::format("lanes '{}' and '{}' are both device {}", other->name, name, *it->index)};
    }
    held.push_back(&*it);
  }
  auto indexed =
      std::count_if(held.begin(), held.end(), [](auto* l) { return l->index.has_value(); });
  if (indexed == 0)
    return std::optional<std::string>{}; // no CUDA device: the variable is removed
  if (static_cast<std::size_t>(indexed) != held.size()) {
    auto with =
        std::find_if(held.begin(), held.end(), [](auto* l) { return l->index.has_value(); });
    auto without =
        std::find_if(held.begin(), held.end(), [](auto* l) { return !l->index.has_value(); });
    return bus::error_info{errc::invalid_argument,
                           fmt::format("lane '{}' has a device index and lane '{}' has none: "
                                       "CUDA_VISIBLE_DEVICES cannot name both",
                                       (*with)->name, (*without)->name)};
  }
  std::string out;
  for (auto* l : held)
    out += fmt::format("{}{}", out.empty() ? "" : ",", *l->index);
  return std::optional<std::string>{std::move(out)};
}

} // namespace cq::node
