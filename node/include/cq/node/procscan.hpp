#pragma once
// Process-table reads for the node's cleanup and memory watchdog (Linux /proc).
//
// Invariants:
//  1. signal_same_process() signals a pid only through a pidfd opened before
//     the identity check (start time), so a pid reused after the check is
//     never signalled: the pidfd keeps naming the process that was checked.
//  2. Nothing here allocates per process except scan_processes()' result.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace cq::node {

struct proc_entry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = '?';              ///< R, S, D, Z, T, ...
  std::uint64_t start_ticks = 0; ///< field 22: start time in clock ticks since boot
  std::uint64_t rss_pages = 0;   ///< field 24
  uid_t uid = 0;                 ///< owner of /proc/<pid>
};

/// Parses /proc/<pid>/stat text into `out` (pid, ppid, pgrp, state, start, rss).
bool parse_stat_line(std::string_view text, proc_entry& out);

/// Reads /proc/<pid>/stat (and the owner); nullopt when the process is gone.
std::optional<proc_entry> read_process(pid_t pid);

/// Every process now (threads excluded), by reading /proc.
std::vector<proc_entry> scan_processes();

enum class marker { absent, present, unreadable };

/// Whether /proc/<pid>/environ holds the entry `needle` ("NAME=value") exactly.
marker environ_has(pid_t pid, std::string_view needle);

/// Whether `entries` ("K=V\0K=V\0...", as /proc/<pid>/environ) holds the
/// entry `needle` exactly; an empty entry ends the list.
bool environ_list_has(std::string_view entries, std::string_view needle);

/// Whether the text of macOS's sysctl KERN_PROCARGS2 for a process (int
/// argc, the executable's path, NUL padding, argc arguments, then the
/// environment and the kernel's apple[] strings, each NUL-terminated, with
/// or without an empty string between them) holds the environment entry
/// `needle`. Text that ends with argv is `unreadable` (the kernel withholds
/// a restricted process's environment). Pure, so that Linux tests it:
/// platform_darwin.cpp reads the text.
marker procargs2_environ_has(std::string_view procargs, std::string_view needle);

/// Sends `sig` to `pid` only if it is still the process that started at
/// `start_ticks` (pidfd_open, then the check, then pidfd_send_signal). True if
/// the signal was sent.
bool signal_same_process(pid_t pid, std::uint64_t start_ticks, int sig);

/// Sum of RSS in bytes over the process group `pgid` and all descendants of its
/// members (processes that left the group with setsid included); the members
/// found are appended to `members` when given.
std::uint64_t tree_rss_bytes(const std::vector<proc_entry>& procs, pid_t pgid,
                             std::vector<const proc_entry*>* members = nullptr);

} // namespace cq::node
