#pragma once
// Linux's /proc and sysconf for the node: the process table, one process's
// environment, signals through a pidfd after a start-time check, the
// machine's memory and CPUs, and RSS per process group. The `linux`
// platform's process host and host probes use it, and so do the `posix`
// platform's Linux primitives (linux/primitives.cpp).
//
// Invariants:
//  1. signal_same_process() signals a pid only through a pidfd opened before
//     the identity check (start time), so a pid reused after the check is
//     never signalled: the pidfd keeps naming the process that was checked.
//  2. Nothing here allocates per process except the scans' results and
//     scan_processes_since()'s start times (one entry per live process).

#include "cq/node/meminfo.hpp"
#include "cq/node/procscan.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace cq::node {

/// Reads /proc/<pid>/stat (and the owner); nullopt when the process is gone.
std::optional<proc_entry> read_process(pid_t pid);

/// Every process now (threads excluded), by reading /proc.
std::vector<proc_entry> scan_processes();

/// The processes that started at or after `min_start_ticks`, and those of
/// `always` whatever their age: what a cleanup scan looks at. A process an
/// earlier call saw start before `min_start_ticks` is not read again (its
/// start time is kept by pid and /proc inode), so a scan on a busy machine
/// reads only the processes started since the allocation's. Thread-safe.
std::vector<proc_entry> scan_processes_since(std::uint64_t min_start_ticks,
                                             const std::vector<pid_t>& always);

/// Whether /proc/<pid>/environ holds the entry `needle` ("NAME=value")
/// exactly; `changing` when it reads empty because the process is between
/// two programs, again and again (stat_env_area).
marker environ_has(pid_t pid, std::string_view needle);

/// Sends `sig` to `pid` only if it is still the process that started at
/// `start_ticks` (pidfd_open, then the check, then pidfd_send_signal). True if
/// the signal was sent.
bool signal_same_process(pid_t pid, std::uint64_t start_ticks, int sig);

/// Reads and parses /proc/meminfo; nullopt when it cannot (not Linux, say).
std::optional<mem_info> read_meminfo();

/// Number of CPUs this process may use (at least 1).
std::uint64_t cpu_count();

/// One process group to measure: its id, and where the sum goes.
struct group_rss {
  pid_t pgid = 0;
  std::uint64_t rss_bytes = 0; ///< out: sum of RSS over the group's processes
};

/// Scans /proc once and sums the RSS of every process whose process group is
/// one of `groups` (each entry's rss_bytes is set; 0 when none was found).
/// Costs one small read per process on the machine; no allocation.
void sample_group_rss(std::span<group_rss> groups);

} // namespace cq::node
