#include "placement.hpp"

namespace cq::policy {

bool node_live(const node_view& n, const cluster_view& c, std::int64_t now_ms) {
  return n.approved && n.last_heartbeat_ms > 0 &&
         now_ms - n.last_heartbeat_ms <= c.heartbeat_fresh_ms;
}

plan place(const cluster_view& cluster, const std::vector<queued_job>& queue, std::int64_t now_ms) {
  plan out;
  std::vector<std::uint64_t> free(cluster.nodes.size());
  std::vector<bool> live(cluster.nodes.size());
  std::size_t live_count = 0;
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    auto& n = cluster.nodes[i];
    live[i] = node_live(n, cluster, now_ms);
    live_count += live[i] ? 1 : 0;
    free[i] = n.mem_total_bytes > n.reserved_bytes ? n.mem_total_bytes - n.reserved_bytes : 0;
  }
  if (live_count == 0)
    return out;
  for (auto& job : queue) {
    for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
      if (!live[i] || free[i] < job.ram_bytes)
        continue;
      if (job.pinned_node && *job.pinned_node != cluster.nodes[i].name)
        continue;
      free[i] -= job.ram_bytes;
      out.starts.push_back({job.id, cluster.nodes[i].name});
      break;
    }
  }
  return out;
}

} // namespace cq::policy
