// The never-fits group of placement: whether a job could run on a node
// however empty it were (submit refuses what no node could ever run), and a
// node's capacity as placement sees it.
#include "never_fits.hpp"

namespace cq::policy {

namespace detail {

namespace {
using u64 = std::uint64_t;
u64 lanes_with_vram(const node_view& n, u64 vram) {
  u64 k = 0;
  for (auto& l : n.lanes)
    k += l.vram_total_bytes >= vram ? 1 : 0;
  return k;
}

} // namespace

never never_fits(const node_view& n, const job_view& j) {
  if (j.ram_bytes > sub(n.mem_total_bytes, n.ram_reserve_bytes))
    return never::ram;
  if (n.cpus != 0 && j.cpus > n.cpus)
    return never::cpus;
  if (j.gpus > 0) {
    if (j.gpus > n.lanes.size())
      return never::gpus;
    if (n.vram_cap_bytes && j.vram_bytes > *n.vram_cap_bytes)
      return never::vram_cap;
    if (lanes_with_vram(n, j.vram_bytes) < j.gpus)
      return never::vram;
  }
  // MemAvailable never exceeds the node's memory: rule 4 needs at least
  // cap + combined floor, and the start minimum, of it. Floors of other
  // allocations end with them; the node's and the job's own do not.
  // (ram <= allocatable <= total here.)
  auto floor = std::max(n.ram_floor_bytes, j.ram_floor_bytes);
  if (floor > 0 && floor > n.mem_total_bytes - j.ram_bytes)
    return never::floor;
  if (j.ram_start_min_bytes > n.mem_total_bytes)
    return never::start_min;
  return never::none;
}

std::string never_words(const node_view& n, const job_view& j, never why) {
  switch (why) {
  case never::none:
    break;
  case never::ram:
    return fmt::format("needs {} RAM, the node has {} allocatable", gib(j.ram_bytes),
                       gib(sub(n.mem_total_bytes, n.ram_reserve_bytes)));
  case never::cpus:
    return fmt::format("needs {} CPUs, the node has {}", j.cpus, n.cpus);
  case never::gpus:
    return fmt::format("needs {} GPU{}, the node has {}", j.gpus, j.gpus == 1 ? "" : "s",
                       n.lanes.size());
  case never::vram_cap:
    return fmt::format("needs {} VRAM per GPU, over the node's VRAM cap of {}", gib(j.vram_bytes),
                       gib(*n.vram_cap_bytes));
  case never::vram: {
    u64 largest = 0;
    for (auto& l : n.lanes)
      largest = std::max(largest, l.vram_total_bytes);
    auto k = lanes_with_vram(n, j.vram_bytes);
    if (k == 0)
      return fmt::format("needs {} VRAM per GPU, the node's largest lane has {}", gib(j.vram_bytes),
                         gib(largest));
    return fmt::format("needs {} GPUs with {} VRAM each, {} of the node's lanes {} that much",
                       j.gpus, gib(j.vram_bytes), k, k == 1 ? "has" : "have");
  }
  case never::floor: {
    bool node_floor = n.ram_floor_bytes > j.ram_floor_bytes;
    return fmt::format("needs {} cap + {} RAM floor{}, the node has {}", gib(j.ram_bytes),
                       gib(std::max(n.ram_floor_bytes, j.ram_floor_bytes)),
                       node_floor ? " (the node's)" : "", gib(n.mem_total_bytes));
  }
  case never::start_min:
    return fmt::format("needs {} available to start (its start minimum), the node has {}",
                       gib(j.ram_start_min_bytes), gib(n.mem_total_bytes));
  }
  return {};
}

} // namespace detail

using namespace detail;

node_view capacity_of(const bus::node_info& n) {
  node_view v;
  v.name = n.name;
  v.enabled = n.enabled;
  v.run_as = n.run_as;
  v.mem_total_bytes = n.mem_total_bytes;
  v.mem_available_bytes = n.mem_available_bytes;
  v.ram_reserve_bytes = n.ram_reserve_bytes;
  v.ram_floor_bytes = n.ram_floor_bytes;
  v.cpus = n.cpus;
  v.vram_cap_bytes = n.vram_cap_bytes;
  for (auto& l : n.lanes)
    v.lanes.push_back({l.name, l.vram_total_bytes, l.vram_outside_bytes, false, {}});
  for (auto& h : n.holds) {
    if (h.lane.empty())
      v.held = true, v.hold = h.id;
    for (auto& l : v.lanes)
      if (l.name == h.lane)
        l.held = true, l.hold = h.id;
  }
  return v;
}

std::vector<std::string> never_runnable(const std::vector<node_view>& nodes, const job_view& j) {
  return never_runnable(
      nodes.size(), [&](std::size_t i) { return nodes[i]; }, j);
}

std::vector<std::string> never_runnable(std::size_t count,
                                        const std::function<node_view(std::size_t)>& view_at,
                                        const job_view& j) {
  // First whether some node could run it (every submit asks), then, only
  // for a job that none can, the words for each node.
  bool pinned_found = false;
  for (std::size_t i = 0; i < count; ++i) {
    auto n = view_at(i);
    if (j.pinned_node && *j.pinned_node != n.name)
      continue;
    pinned_found = true;
    if (!n.approved)
      continue;
    if (n.mem_total_bytes == 0)
      return {}; // no heartbeat yet: its capacity is unknown
    if (maps(n, j) && never_fits(n, j) == never::none)
      return {};
  }
  if (j.pinned_node && !pinned_found)
    return {fmt::format("{}: no such node", *j.pinned_node)};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    auto n = view_at(i);
    if ((j.pinned_node && *j.pinned_node != n.name) || !n.approved)
      continue;
    if (!maps(n, j))
      out.push_back(fmt::format("{}: runs no job of identity {} (no run-as mapping for it)", n.name,
                                j.owner));
    else
      out.push_back(fmt::format("{}: {}", n.name, never_words(n, j, never_fits(n, j))));
  }
  return out;
}

} // namespace cq::policy
