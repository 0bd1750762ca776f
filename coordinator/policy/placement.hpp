#pragma once
// Placement policy: pure functions over values. No CAF, no I/O, no clock.
//
// This is the walking skeleton's first-fit rule (RAM and node liveness only);
// the scheduling issue replaces it with the full policy behind the same call.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cq::policy {

/// What placement knows about a node.
struct node_view {
  std::string name;
  bool approved = false;
  std::int64_t last_heartbeat_ms = 0; ///< 0 = never
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t reserved_bytes = 0; ///< sum of the effective RAM of live allocations
};

/// A queued, startable job in serving order.
struct queued_job {
  std::string id;
  std::uint64_t ram_bytes = 0; ///< effective RAM cap
  std::optional<std::string> pinned_node;
};

struct cluster_view {
  std::vector<node_view> nodes;
  std::int64_t heartbeat_fresh_ms = 5000; ///< a node is live if it beat within this
};

struct start {
  std::string job;
  std::string node;
};

struct plan {
  std::vector<start> starts;
};

/// True if `n` may receive work at `now_ms`.
bool node_live(const node_view& n, const cluster_view& c, std::int64_t now_ms);

/// First fit in serving order: each job goes to the first live node (or its
/// pinned node) whose RAM minus reservations (including starts planned earlier
/// in this pass) holds the job's effective RAM. A job that fits nowhere is
/// skipped and does not block the ones behind it.
plan place(const cluster_view& cluster, const std::vector<queued_job>& queue, std::int64_t now_ms);

} // namespace cq::policy
