#pragma once
// Memory caps of allocations (SPEC section 5): one kernel-enforced cgroup per
// allocation where the machine allows it, else a sampled watchdog (done by the
// daemon through process_host::tree_rss). This header is the vocabulary and
// the pure parts; the cgroup file system is node/adapters/linux/cgroups.hpp's.
//
// Modes, detected once at start (or forced by node.toml [memory] mode):
//  - cgroup_v2: a cgroup v2 hierarchy whose parent group (the node's own group,
//    or [memory] cgroup_parent) offers the memory controller to its children.
//    Each group gets memory.max = cap, memory.swap.max = 0, memory.oom.group = 1.
//    (Where systemd runs, a transient scope would be the delegated parent; this
//    code takes the parent as given, so a systemd variant only has to supply it.)
//  - cgroup_v1: the v1 memory controller (hybrid machines such as the ones this
//    project is built on). Each group gets memory.limit_in_bytes = cap and, when
//    swap accounting exists, memory.memsw.limit_in_bytes = cap (no swap).
//  - watchdog: no usable controller (macOS, unprivileged containers).
//
// Invariants:
//  1. Groups are created only below the parent, never at the hierarchy root
//     unless the parent is configured to be it, and are named cq-<allocation>.
//  2. create_group() either returns a group whose limit is written or fails and
//     leaves nothing behind: a workload never runs in a half-configured group.
//  3. Every path here is built from a valid allocation id (files.hpp).

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace cq::node {

enum class memcap_mode { cgroup_v2, cgroup_v1, watchdog };

std::string_view to_string(memcap_mode m);

/// `[memory]` of node.toml.
struct memory_config {
  std::string mode = "auto";                  ///< auto|cgroup_v2|cgroup_v1|watchdog
  std::optional<std::string> cgroup_parent;   ///< absolute path of the parent group
  std::string cgroup_root = "/sys/fs/cgroup"; ///< where the hierarchies are mounted
  std::uint64_t sample_ms = 150;              ///< watchdog and OOM-counter sampling period
};

/// The result of detection: the mode, the parent group (cgroup modes) and, when
/// a cgroup mode was wanted but is not usable, why (for the log).
struct memcap_setup {
  memcap_mode mode = memcap_mode::watchdog;
  std::filesystem::path parent; ///< cgroup modes: where the allocations' groups go
  std::string note;             ///< why a cgroup mode was not taken ("" if none)
  /// Names this daemon's groups: cq-<owner>-<allocation> (owner: the start
  /// of the state dir's daemon id), so that a daemon tells its own stale
  /// groups from another node's on the same machine. "" = cq-<allocation>.
  std::string owner;
};

/// The group name of `allocation` under `setup` (no path).
std::string group_name(const memcap_setup& setup, const std::string& allocation);
/// The allocation a group name of `setup`'s owner names; "" if not ours.
std::string allocation_of_group(const memcap_setup& setup, const std::string& name);

/// The group of one allocation.
struct mem_group {
  memcap_mode mode = memcap_mode::watchdog;
  std::filesystem::path dir; ///< the group's directory (empty in watchdog mode)
};

/// Parses "oom_kill N" (or "under_oom N" when `fallback_under_oom`) from the
/// text of memory.oom_control / memory.events.
std::optional<std::uint64_t> parse_oom_kill(std::string_view text, bool fallback_under_oom);

} // namespace cq::node
