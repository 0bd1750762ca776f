#pragma once
// The cgroup file system of memory caps (memcap.hpp has the modes, the
// invariants and the group names): the `linux` platform's only, through
// host_probes (linux/host_probes.cpp) and the process host.

#include "cq/node/files.hpp"
#include "cq/node/memcap.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

/// Detects the mode for `cfg`. `self_cgroup` is the text of /proc/self/cgroup
/// (a parameter so that tests can use a fake tree). A forced cgroup mode that is
/// not usable is an error (errc::invalid_argument, naming what is missing).
bus::result<memcap_setup> detect_memcap(const memory_config& cfg, std::string_view self_cgroup);

/// Creates `<parent>/cq-<allocation>` with `cap_bytes` (no swap), or without a
/// limit when `cap_bytes` is absent (the group still gathers every process of
/// the allocation for cleanup, SPEC section 10). A group left over from an
/// earlier run of the same allocation is reused.
bus::result<mem_group> create_group(const memcap_setup& setup, const std::string& allocation,
                                    std::optional<std::uint64_t> cap_bytes);

/// Writes `cap_bytes` (no swap) into the existing group `dir` (create_group's
/// limits, for a group made ahead: a standby's, ADR 0048).
status write_limits(const memcap_setup& setup, const std::filesystem::path& dir,
                    std::uint64_t cap_bytes);

/// The pids in the group (cgroup.procs; v1 and v2 alike), or nullopt when the
/// file cannot be read (the group is gone). Every one of them belongs to the
/// allocation: its processes cannot leave the group, however they detach.
std::optional<std::vector<pid_t>> group_pids(const mem_group& g);

/// Opens the group's procs file for writing (close-on-exec), for the child to
/// join between fork and exec. -1 on failure (errno set).
int open_procs_file(const mem_group& g);

/// The group's directory, read-only and close-on-exec (clone3's
/// CLONE_INTO_CGROUP takes it); -1 with errno set on failure.
int open_group_dir(const mem_group& g);

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

} // namespace cq::node
