#pragma once
// Memory caps of allocations (SPEC section 5): one kernel-enforced cgroup per
// allocation where the machine allows it, else a sampled watchdog (done by the
// daemon with procscan.hpp).
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

/// Detects the mode for `cfg`. `self_cgroup` is the text of /proc/self/cgroup
/// (a parameter so that tests can use a fake tree). A forced cgroup mode that is
/// not usable is an error (errc::invalid_argument, naming what is missing).
bus::result<memcap_setup> detect_memcap(const memory_config& cfg, std::string_view self_cgroup);

/// The group of one allocation.
struct mem_group {
  memcap_mode mode = memcap_mode::watchdog;
  std::filesystem::path dir; ///< the group's directory (empty in watchdog mode)
};

/// Creates `<parent>/cq-<allocation>` with `cap_bytes` (no swap), or without a
/// limit when `cap_bytes` is absent (the group still gathers every process of
/// the allocation for cleanup, SPEC section 10). A group left over from an
/// earlier run of the same allocation is reused.
bus::result<mem_group> create_group(const memcap_setup& setup, const std::string& allocation,
                                    std::optional<std::uint64_t> cap_bytes);

/// The pids in the group (cgroup.procs; v1 and v2 alike), or nullopt when the
/// file cannot be read (the group is gone). Every one of them belongs to the
/// allocation: its processes cannot leave the group, however they detach.
std::optional<std::vector<pid_t>> group_pids(const mem_group& g);

/// Opens the group's procs file for writing (close-on-exec), for the child to
/// join between fork and exec. -1 on failure (errno set).
int open_procs_file(const mem_group& g);

/// Reads the group's OOM-kill counter (v1: the oom_kill line of
/// memory.oom_control, or under_oom on kernels without it; v2: oom_kill of
/// memory.events). nullopt when unreadable.
std::optional<std::uint64_t> oom_kills(const mem_group& g);

/// Peak usage of the group (v1 memory.max_usage_in_bytes, v2 memory.peak);
/// nullopt when the kernel does not provide it.
std::optional<std::uint64_t> peak_usage(const mem_group& g);

/// Current usage (v1 memory.usage_in_bytes, v2 memory.current).
std::optional<std::uint64_t> current_usage(const mem_group& g);

/// Removes the group (rmdir). Fails while processes remain in it.
status remove_group(const mem_group& g);

/// Parses "oom_kill N" (or "under_oom N" when `fallback_under_oom`) from the
/// text of memory.oom_control / memory.events.
std::optional<std::uint64_t> parse_oom_kill(std::string_view text, bool fallback_under_oom);

} // namespace cq::node
