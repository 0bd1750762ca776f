#pragma once
#include "cq/bus/curve.hpp"
// The production implementations of the node's seams (seams.hpp): the only
// code of cq-node that forks, signals, reads /proc or cgroups, runs
// nvidia-smi, follows the kernel log, locks files or owns the socket.

#include "cq/node/procscan.hpp"
#include "cq/node/seams.hpp"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

/// The node's platform layer (cq-node --platform): `linux` (cgroups, pidfds,
/// /proc) or `posix` (no cgroups, no pidfds: SIGCHLD and waitpid, a sampled
/// memory watchdog, and the primitives of posix/primitives.hpp). macOS has `posix` only.
enum class platform_kind { linux_native, posix };
/// "linux" / "posix"; parse_platform is its inverse (nullopt for anything else).
std::string_view to_string(platform_kind p);
std::optional<platform_kind> parse_platform(std::string_view name);
/// What a build runs when nothing is asked: linux on Linux, posix elsewhere.
platform_kind default_platform();
/// The posix platform learns of its children's ends by SIGCHLD: call this
/// before any thread starts, so that every thread but the process watcher's
/// has it blocked (a signal then interrupts no other thread's system call).
void block_child_signal();

/// Processes through launcher.cpp and cq-shim: linux with a pidfd watcher
/// thread, posix with a SIGCHLD watcher thread.
std::unique_ptr<process_host> make_process_host(platform_kind p = default_platform());
/// Memory, CPUs, memory caps (linux: cgroups; posix: the watchdog), flock,
/// cq-shim's path.
std::unique_ptr<host_probes> make_host_probes(platform_kind p = default_platform());
/// The live group leader among `procs` whose environment (read by `env`)
/// carries `marker` (process_host::find_leader). When none does and one was
/// between two programs (marker::changing), `*changing` is set: it may be
/// the one, a moment later.
std::optional<leader_id>
find_marked_leader(const std::vector<proc_entry>& procs,
                   const std::function<marker(pid_t, std::string_view)>& env,
                   const std::string& marker, bool* changing = nullptr);
/// `find` (a find_marked_leader over a fresh process list) again, up to 10
/// times 10 ms apart, while it finds none and a leader was between two
/// programs: a leader exec'ing its workload when a restarted node looks for
/// it is not taken for gone.
std::optional<leader_id>
find_marked_leader_settled(const std::function<std::optional<leader_id>(bool* changing)>& find);
/// One cleanup scan over `procs` (seams.hpp: process_host::cleanup_scan):
/// `members` are the pids of the allocation's cgroup (none without one);
/// `env` reads a process's environment for the marker and `kill` sends
/// SIGKILL after checking the process's start time.
scan_result scan_for_cleanup(const scan_request& req, const std::vector<proc_entry>& procs,
                             std::vector<pid_t> members,
                             const std::function<marker(pid_t, std::string_view)>& env,
                             const std::function<bool(const proc_entry&)>& kill);
/// Sum of RSS in bytes over the process group `pgid` and all descendants of its
/// members (processes that left the group with setsid included); the members
/// found are appended to `members` when given.
std::uint64_t tree_rss_bytes(const std::vector<proc_entry>& procs, pid_t pgid,
                             std::vector<const proc_entry*>* members = nullptr);
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
