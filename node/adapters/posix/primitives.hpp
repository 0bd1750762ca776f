#pragma once
// The node's platform primitives: the few questions about processes and
// memory that the `posix` platform (posix/process_host.cpp,
// posix/host_probes.cpp) asks of the OS. Two implementations, one per build:
// linux/primitives.cpp over /proc, darwin/primitives.cpp over libproc and sysctl
// (compiled only on Apple). The `linux` platform (linux/process_host.cpp,
// linux/host_probes.cpp) uses pidfds and cgroups instead and does not go through
// here.
//
// Start times identify a process across pid reuse: Linux gives clock ticks
// since boot (/proc/<pid>/stat field 22), macOS microseconds since the epoch
// (proc_bsdinfo). Either is only ever compared with a value read the same way
// on the same machine.

#include "cq/node/meminfo.hpp"
#include "cq/node/procscan.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node::platform {

/// Which primitives this build has ("linux" or "darwin").
std::string_view name();

/// Every process now (threads excluded). rss_pages: resident pages (Linux),
/// the physical footprint in pages (macOS: what Activity Monitor shows as
/// Memory, and what jetsam counts).
std::vector<proc_entry> processes();

/// One process; nullopt when it is gone (or unreadable).
std::optional<proc_entry> process(pid_t pid);

/// Whether the environment of `pid` holds `needle` ("NAME=value") exactly.
marker environ_has(pid_t pid, std::string_view needle);

/// The short name of `pid`'s program (comm), for an outside GPU process.
std::optional<std::string> process_name(pid_t pid);

/// Physical memory and what is available for new work.
std::optional<mem_info> memory();

/// Number of CPUs (at least 1).
std::uint64_t cpus();

/// The absolute path of this program ("" when unknown).
std::string self_exe();

/// This boot of the machine (process_host::boot_id): the kernel's random
/// boot id on Linux, the boot time (kern.boottime) on macOS; "" when unknown.
std::string boot_id();

} // namespace cq::node::platform
