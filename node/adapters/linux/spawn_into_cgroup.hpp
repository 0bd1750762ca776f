#pragma once
// Starting cq-shim inside its allocation's cgroup v2 group (docs/adr/0050):
// clone3 with CLONE_INTO_CGROUP, so the child is born in the group and never
// migrates into it (a migration takes cgroup_threadgroup_rwsem for writing,
// which after a quiet spell waits for an RCU grace period: 15-20 ms).
//
// The child shares the daemon's memory until its exec (CLONE_VM |
// CLONE_VFORK, on a stack of its own), as posix_spawn's does, and keeps the
// launch contract (cq/node/launcher.hpp): its own process group, every
// signal at its default and none blocked, `in_fd` as stdin, `out_fd` as
// stdout and stderr, nothing else open, in `cwd`.

#include "cq/bus/protocol.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace cq::node {

struct spawned_into_cgroup {
  pid_t pid = -1;           ///< the child (exec'ed), when started
  bool unsupported = false; ///< the kernel or this build cannot: join the group another way
  int error = 0;            ///< errno of what failed, when neither
};

/// Starts `exe` with `args` (argv[1..]) and `env` ("KEY=VALUE") in the cgroup
/// v2 directory `cgroup_fd`. Where clone3 or CLONE_INTO_CGROUP is missing
/// (kernels before 5.7, architectures other than x86-64), `unsupported`
/// says so and nothing was started.
spawned_into_cgroup spawn_into_cgroup(const std::string& exe, const std::vector<std::string>& args,
                                      const std::vector<std::string>& env, int in_fd, int out_fd,
                                      const char* cwd, int cgroup_fd);

} // namespace cq::node
