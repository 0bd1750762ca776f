#pragma once
// What starting a workload means (launch_request) and what comes back. The
// launching itself is node/adapters/launcher.hpp's, called by both platforms'
// process hosts; this header is the vocabulary the seams (seams.hpp) share.
//
// A launched child:
//  1. runs `argv` exactly (no shell), argv[0] resolved against the job's own PATH;
//  2. has exactly the given environment, the given working directory, stdin
//     from /dev/null and stdout+stderr appended to the log file;
//  3. leads a new process group (pgid == pid), so that signals to the group
//     reach everything it starts;
//  4. inherits no descriptor of the daemon other than 0, 1 and 2;
//  5. starts with an empty signal mask and every signal at its default
//     disposition, whatever the daemon itself inherited.
// The caller owns the returned pidfd and must reap the child itself with
// waitid(P_PIDFD, ...) or waitpid (Boost's wait_for is unreliable; see
// docs/dependencies.md).

#include "cq/bus/protocol.hpp"

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

/// A local UNIX user a job runs as (a node's run-as mapping).
struct credential {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; ///< supplementary groups (getgrouplist)
};

struct launch_request {
  bus::string_list argv;          ///< program and arguments; argv[0] may be a bare name
  std::string cwd;                ///< absolute working directory
  bus::env_map env;               ///< the complete environment of the child
  std::filesystem::path log_path; ///< stdout and stderr are appended here
  /// When set, the child execs this shim (cq-shim: STATUS_FILE PROGRAM ARGV...)
  /// which runs the workload as its own child and records its exit status.
  std::string shim;
  std::filesystem::path status_path; ///< the shim's STATUS_FILE
  /// cq submit --output, expanded: the shim also copies the output to this
  /// file, which it opens as the job's user (node/shim.cpp). "" = none.
  std::string output_path;
  /// cq run --pty: the FIFO (made here, in the allocation's directory) that
  /// the shim reads typed keys and window sizes from; the shim gives the
  /// workload a terminal (node/shim.cpp). Empty = no terminal.
  std::filesystem::path terminal;
  /// When >= 0: a cgroup procs file (opened by the caller, close-on-exec) that
  /// the child writes its own pid to between fork and exec, so that the
  /// workload never runs outside its memory group. A failed write fails the
  /// launch (the child never execs).
  int cgroup_procs_fd = -1;
  /// When >= 0 (Linux, cgroup v2, with `shim`): the group's directory. The
  /// shim is created in it (clone3 with CLONE_INTO_CGROUP), and joins by
  /// cgroup_procs_fd only where the kernel cannot (docs/adr/0050).
  int cgroup_dir_fd = -1;
  /// When >= 0: the socket of a standby cq-shim (shim_standby.cpp, already in
  /// the job's cgroup) that is handed the exec instead of a new process
  /// being started; launched_child's pid is then -1 (the caller knows the
  /// standby's). Needs `shim`.
  int standby_sock = -1;
  /// Run-as: the workload runs as this user (cq-shim drops supplementary
  /// groups, gid and uid before exec); `owned` paths are chowned to it first.
  std::optional<credential> as;
  std::vector<std::filesystem::path> owned;
  /// Open a pidfd for the child (the `linux` platform watches by it). When
  /// false, and always off Linux (no pidfds), launched_child::pidfd is -1 and
  /// the caller learns of the child's end by SIGCHLD and waitpid (the
  /// `posix` platform, node/adapters/posix/process_host.cpp).
  bool pidfd = true;
};

struct launched_child {
  pid_t pid = -1; ///< the child's pid, also its process group id
  int pidfd = -1; ///< pidfd of the child (close-on-exec; -1 without one); the caller closes it
};

/// The PATH used when the job's environment has none.
inline constexpr std::string_view default_path = "/usr/local/bin:/usr/bin:/bin";

} // namespace cq::node
