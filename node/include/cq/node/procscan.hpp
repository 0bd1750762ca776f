#pragma once
// The process table's vocabulary for the node's cleanup and memory watchdog:
// one process as both platforms read it, and the pure parsers of what the OS
// gives (Linux /proc/<pid>/stat and environ, macOS KERN_PROCARGS2). Reading
// the table is the adapters' (node/adapters/linux/procfs.hpp,
// node/adapters/posix/primitives.hpp): nothing here touches the OS.

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
  /// Owner of /proc/<pid>; unknown_uid where the scan did not need it (a
  /// node that reads every environment never has an unreadable suspect).
  uid_t uid = 0;
  static constexpr uid_t unknown_uid = static_cast<uid_t>(-1);
};

/// Parses /proc/<pid>/stat text into `out` (pid, ppid, pgrp, state, start, rss).
bool parse_stat_line(std::string_view text, proc_entry& out);

/// What a process's environment says of a marker. `changing`: the process
/// is between two programs (in execve, after its new memory replaced the old
/// and before its environment was copied in; or leaving, its memory gone):
/// the environment reads empty then, so it is read again later, never taken
/// for `absent` (a cleanup scan would miss a marked process exec'ing).
enum class marker { absent, present, unreadable, changing };

/// What /proc/<pid>/stat text says of a process's environment area (fields
/// 50 and 51, env_start and env_end), for a process whose environment read
/// empty:
/// - `none`: env_end is 0 and the process is not a kernel thread (field 9's
///   PF_KTHREAD) nor ended: it is between two programs (in execve) or leaving;
/// - `empty`: the area is empty (env_start == env_end): as after `env -i`,
///   or for an instant in execve, as it copies the environment in;
/// - `some`: the area holds an environment, so the empty read raced an exec
///   (it opened the old program's memory, gone by the time it read);
/// - `unknown`: a kernel thread, an ended process, or a kernel that does not
///   show the fields (before Linux 3.5).
enum class env_area { unknown, none, empty, some };
env_area stat_env_area(std::string_view text);

/// Whether `entries` ("K=V\0K=V\0...", as /proc/<pid>/environ) holds the
/// entry `needle` exactly; an empty entry ends the list.
bool environ_list_has(std::string_view entries, std::string_view needle);

/// Whether the text of macOS's sysctl KERN_PROCARGS2 for a process (int
/// argc, the executable's path, NUL padding, argc arguments, then the
/// environment and the kernel's apple[] strings, each NUL-terminated, with
/// or without an empty string between them) holds the environment entry
/// `needle`. Text that ends with argv is `unreadable` (the kernel withholds
/// a restricted process's environment). Pure, so that Linux tests it:
/// node/adapters/darwin/primitives.cpp reads the text.
marker procargs2_environ_has(std::string_view procargs, std::string_view needle);

} // namespace cq::node
