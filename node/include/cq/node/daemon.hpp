#pragma once
// The node daemon's event loop: one thread, one ZeroMQ DEALER socket to the
// coordinator, one pidfd per running child (see src/daemon.cpp for why there
// is no CAF here).
//
// Files under the state dir (SPEC section 5):
//   node.toml                         identity (config.hpp)
//   outbox/<seq>.json, outbox/next_seq unacknowledged reports (outbox.hpp)
//   holds.json                        holds (Attention) until released (holds.hpp)
//   allocations/<id>/alloc.json       job, attempt, pid, its start time in clock ticks,
//                                     lanes, limits, memory group (at launch)
//   allocations/<id>/status           the workload's exit status, written by cq-shim
//   allocations/<id>/control/yield    created by a yield order (CQ_YIELD_FILE)
//   allocations/<id>/output.log       the child's stdout and stderr (and why a launch failed)
//   allocations/<id>/exit.json        exit record (rc, signal, reason, wall, peak RAM, detail),
//                                     written before the exit is reported
//   jobs/<job>/state/                 CQ_STATE_DIR of the job (shared by attempts)
//
// Invariants:
//  1. Every allocation the node accepted ends in exactly one "exited" report
//     (exit code 125, reason launch_failed, if it never started), persisted in
//     the outbox before it is first sent and re-sent until acknowledged.
//  2. exit.json exists before the exited report is queued.
//  3. When an allocation's leader (cq-shim) has exited, its process group has
//     been sent SIGKILL before the leader is reaped (while the pgid cannot be
//     reused). Then cleanup runs: every process of the group and every process
//     whose environment carries CQ_ALLOCATION_ID=<id> (started at or after the
//     leader) is killed through a pidfd after a start-time check, rescanning
//     every [cleanup] poll_ms until two consecutive scans are empty. A process
//     of our own user whose environment is unreadable is a suspect: never
//     signalled, but it keeps the scan non-empty. What remains after
//     [cleanup] max_wait_ms puts each lane of the allocation (or the node,
//     lane "", for a job without GPUs) into a hold with a fresh id, reported
//     in every heartbeat until a release order names that id. The exit is
//     recorded and reported only when cleanup has ended (either way).
//  4. No order, however malformed, crashes the loop; every decodable order
//     gets exactly one reply.
//  5. Allocation and job ids are validated (is_valid_id) before any path is
//     built from them.
//  6. A job runs with CUDA_VISIBLE_DEVICES naming exactly the device indexes
//     of its start order's lanes, in that order (cuda.hpp; never a number
//     from a lane's name), and without the variable when it holds no lanes or
//     only lanes without an index; a lane this node does not have, one given
//     twice, or a mix of lanes with and without an index fails the launch.
//  7. A start order with a nonzero ram_floor_bytes or ram_start_min_bytes
//     launches only if a fresh MemAvailable sample (with the [capacity]
//     override) is >= ram_start_min_bytes and, minus ram_bytes, >=
//     ram_floor_bytes; otherwise (or without usable telemetry) nothing is
//     started and the allocation ends as 125 / launch_failed.
//  8. A start order's timeout_ms (0 = none) is measured from the launch; when it
//     passes, the group gets SIGTERM, then SIGKILL 10 s later, and the exit is
//     reported with reason "timeout" (unless a stop order came first).
//  9. peak_ram_bytes of an exit is the largest sum of RSS over the allocation's
//     process group, sampled once per heartbeat interval (one /proc scan for
//     all allocations), or the leader's own maximum RSS from its rusage if that
//     is larger (the workload's own, from cq-shim's status), or the cgroup's
//     peak (memory.max_usage_in_bytes / memory.peak, which counts page cache
//     too). Processes that leave the group are not counted by the sampler
//     (the watchdog counts descendants), and pages shared between processes
//     are counted once per process.
// 10. A start order with ram_bytes runs in its own memory cgroup (cgroup_v1 or
//     cgroup_v2 mode, memcap.hpp), created with the limit before the workload
//     starts and joined by the child between fork and exec; the group's
//     OOM-kill counter is read every [memory] sample_ms and, once it moves, the
//     whole group is killed and the exit is "oom". In watchdog mode the RSS of
//     the process group plus descendants is sampled as often and the tree is
//     killed over the cap ("oom"). The group is removed after cleanup.
// 11. Restarting cq-node does not stop workloads: at start every allocation
//     with alloc.json and no exit.json is re-adopted if its leader is still the
//     same process (pid and start time), with its timeout, cap checks and
//     sampling; one that ended meanwhile is finished from cq-shim's status file.
// 12. The job's environment has CQ_RESUME ("1" if the start order says resume),
//     CQ_YIELD_FILE (absolute; its directory exists, the file does not until a
//     yield order) and CQ_STATE_DIR. Exit code 6 with the yield file present is
//     reported as "checkpointed".

#include "cq/node/config.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace cq::node {

struct daemon_config {
  std::filesystem::path state_dir;      ///< absolute; created if missing
  node_config identity;                 ///< endpoint, name, token
  std::int64_t heartbeat_ms = 1000;     ///< heartbeat interval
  std::int64_t report_resend_ms = 1000; ///< resend interval of unacknowledged reports
};

class node_daemon {
public:
  explicit node_daemon(daemon_config cfg);
  ~node_daemon();
  node_daemon(const node_daemon&) = delete;
  node_daemon& operator=(const node_daemon&) = delete;

  /// Runs the loop until `stop_fd` (an eventfd or pipe, written by a signal
  /// handler) becomes readable. Returns 0 after a clean stop, 1 if the state
  /// dir or the socket could not be set up (logged). Running children are left
  /// running (a later start re-adopts them, invariant 11).
  int run(int stop_fd);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cq::node
