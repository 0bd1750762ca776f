#pragma once
#include "cq/bus/curve.hpp"
// The production implementations of the node's seams (seams.hpp): the only
// code of cq-node that forks, signals, reads /proc or cgroups, runs
// nvidia-smi, follows the kernel log, locks files or owns the socket.

#include "cq/node/seams.hpp"

#include <memory>
#include <string>

namespace cq::node {

/// Processes through launcher.cpp and cq-shim, with a pidfd watcher thread.
std::unique_ptr<process_host> make_process_host();
/// /proc/meminfo, sched_getaffinity, memory cgroups, flock, cq-shim's path.
std::unique_ptr<host_probes> make_host_probes();
/// nvidia-smi, /proc, the kernel log and the GPU lock paths of `cfg`.
std::unique_ptr<gpu_probes> make_gpu_probes(const gpu_config& cfg);
/// A DEALER socket to `endpoint` on a thread of its own.
/// With `curve`, the link speaks CurveZMQ to the coordinator's key.
std::unique_ptr<coordinator_link> make_link(std::string endpoint,
                                            std::optional<bus::client_curve> curve = {});
/// The machine's file system, with durable writes (one for the process).
node_disk& machine_disk_instance();
/// Wall-clock milliseconds now (the epoch of the node's actor clock).
std::int64_t wall_clock_ms();

} // namespace cq::node
