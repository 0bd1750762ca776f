#pragma once
// `cq-node doctor`: the truth about this machine before it takes work, through
// the same seams the daemon uses (host_probes, process_host, gpu_probes): the
// cgroup version and memory-cap mode, delegation, GPUs, the kernel log, the
// GPU lock paths, run-as readiness, and two self-tests (a job over a small cap
// must be killed; a child that leaves its session must be found and killed).

#include "node/adapters/adapters.hpp"

#include <filesystem>

namespace cq::node {

struct doctor_options {
  std::filesystem::path state_dir; ///< node.toml's [memory], [gpu], [run_as] if present
  bool json = false;
  bool self_tests = true;
  platform_kind platform = default_platform(); ///< cq-node --platform
};

/// Prints the findings (each with what to do about it); 0 when every check
/// and self-test passed, 1 when one failed.
int run_doctor(const doctor_options& o);

} // namespace cq::node
