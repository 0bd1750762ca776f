#pragma once
#include "cq/node/launcher.hpp"
// The node daemon: CAF actors (node/actors/, ADR 0020) over the seams of
// seams.hpp, which node/adapters/ implements with the real OS.
//
// Files under the state dir (SPEC section 5):
//   node.toml                         identity (config.hpp)
//   node.lock                         flock held for the daemon's life (one daemon per dir)
//   daemon.id                         this state dir's identity, sent in heartbeats
//   outbox/next_seq, outbox/<seq>.json the next report seq; an exit report only when its
//                                     exit.json could not be written (outbox.hpp)
//   holds.json                        holds (Attention) until released (holds.hpp)
//   allocations/<id>/alloc.json       job, attempt, lanes, limits, memory group: written
//                                     once, durable before the launch (ADR 0045)
//   allocations/<id>/leader           the leader's pid and start ticks (not synced)
//   allocations/<id>/status           the workload's exit status, written by cq-shim
//   allocations/<id>/control/yield    created by a yield order (CQ_YIELD_FILE)
//   allocations/<id>/control/yield-ordered  the yield order came (exit 6 = checkpoint)
//   allocations/<id>/control/stop     a stop order and its kill deadline (wall ms)
//   allocations/<id>/reported         the coordinator acknowledged the exit
//   allocations/<id>/output.log       the child's stdout and stderr (and why a launch failed)
//   allocations/<id>/exit.json        exit record (rc, signal, reason, wall, peak RAM, detail),
//                                     written before the exit is reported
//   jobs/<job>/state/                 CQ_STATE_DIR of the job (shared by attempts)
//
// Invariants:
//  1. Every allocation the node accepted ends in exactly one "exited" report
//     (exit code 125, reason launch_failed, if it never started), durable
//     before it is first sent (exit.json, or the outbox when exit.json cannot
//     be written) and re-sent until acknowledged.
//  2. exit.json is written before the exited report is queued (in memory: the
//     outbox persists it only when exit.json could not be written); at start,
//     an outbox report without exit.json gets its file, and an exit.json
//     neither acknowledged (reported) nor queued is reported again.
//  3. When an allocation's leader (cq-shim) has exited, its process group has
//     been sent SIGKILL before the leader is reaped (while the pgid cannot be
//     reused). Then cleanup runs: every process of the group and every process
//     whose environment carries CQ_ALLOCATION_ID=<id> (started at or after the
//     leader) is killed through a pidfd after a start-time check, rescanning
//     every [cleanup] poll_ms, and as soon as every process a scan killed
//     has ended (pidfds, where the host has them: seams.hpp when_gone), until
//     two consecutive scans are empty (the second at once; with a cgroup it
//     reads only the cgroup, where every process forked by one of the
//     allocation's lands). A process
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
//  9. peak_ram_bytes of an exit is the largest of: the samples taken once per
//     heartbeat interval (an allocation in a cgroup: its cgroup's usage; the
//     others: the sum of RSS over the allocation's process group, one /proc
//     scan for all of them), the leader's own maximum RSS from its rusage
//     (the workload's own, from cq-shim's status), and the cgroup's peak
//     (memory.max_usage_in_bytes / memory.peak, which counts page cache
//     too). Processes that leave the group are not counted by the sampler
//     (the watchdog counts descendants), and pages shared between processes
//     are counted once per process.
// 10. Every allocation runs in its own memory cgroup in the cgroup modes
//     (memcap.hpp), with ram_bytes (the job's effective RAM) as its limit,
//     created before the workload starts and joined by the child between fork
//     and exec; cleanup kills every process in it, and a group that cannot be
//     removed by the cleanup deadline is a hold that owns it (released: its
//     removal is retried until it succeeds); the group's
//     OOM-kill counter is read every [memory] sample_ms and, once it moves, the
//     whole group is killed and the exit is "oom". In watchdog mode the RSS of
//     the process group plus descendants is sampled as often and the tree is
//     killed over the cap ("oom"). The group is removed after cleanup.
// 11. Restarting cq-node does not stop workloads: at start every allocation
//     with alloc.json and no exit.json is re-adopted if its leader is still the
//     same process (pid and start time; found by its marker if the record has
//     no pid yet), with its timeout, cap checks, sampling, stop request and kill
//     deadline; one that ended meanwhile is finished from cq-shim's status file
//     (or as lost when there is none). The workload is launched only after
//     alloc.json is durable (else launch_failed, saying why).
// 12. The job's environment has CQ_RESUME ("1" if the start order says resume),
//     CQ_YIELD_FILE (absolute; its directory exists, the file does not until a
//     yield order) and CQ_STATE_DIR. Exit code 6 after a yield order is reported
//     as "checkpointed" (the yield file alone proves nothing).
// 13. Every order is durable before it is acknowledged (alloc.json, control/),
//     and a stop for an allocation never seen leaves a tombstone (its dir and
//     exit.json) that makes a later start a no-op, and an exited report
//     (cancelled). Heartbeats list every allocation held: live, cleaning, or
//     with an exit not yet acknowledged.
// 14. No stale start launches (docs/adr/0023): the frames that waited in the
//     socket together are all read before any is acted on, stop orders
//     first; and a start order read after its expires_ms (the node's wall
//     clock) ends refused (exit 125, "start order expired") without starting.
//     Start orders that waited in a row (at most 32) are one group: each
//     checked in turn, their records synced together, then each launched,
//     and none launches when a sync of the group failed (ADR 0068).
// 15. The memory groups of allocations are named cq-<owner>-<allocation>
//     (owner: the start of daemon.id); at start, a group of this owner that no
//     re-adopted allocation or hold owns is emptied and removed.

#include "cq/node/config.hpp"
#include "cq/node/gpu.hpp"
#include "cq/node/holds.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/outbox.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace cq::node {

class process_host;
class host_probes;
class coordinator_link;
class node_disk;

struct daemon_config {
  std::filesystem::path state_dir;      ///< absolute; created if missing
  node_config identity;                 ///< endpoint, name, token
  std::int64_t heartbeat_ms = 1000;     ///< heartbeat interval
  std::int64_t report_resend_ms = 1000; ///< resend interval of unacknowledged reports
  /// The platform layer (cq-node --platform): "linux", "posix", or "" for
  /// the build's own (node/adapters/adapters.hpp: platform_kind).
  std::string platform;
  /// identity.run_as resolved to users at start (adapters: the passwd and
  /// group databases); empty: jobs run as the daemon's user.
  std::map<std::string, credential> run_as;
};

/// The OS behind the node's seams (seams.hpp), for one daemon; not owned.
struct node_seams {
  process_host* processes = nullptr;
  host_probes* probes = nullptr;
  coordinator_link* link = nullptr;
  node_disk* disk = nullptr;
  std::int64_t epoch_ms = 0; ///< wall-clock ms when the daemon is spawned
  /// The wall clock's rate against the monotonic clock: 1 in production;
  /// cq-sim's nodes drift (fault kind clock_skew).
  double clock_rate = 1.0;
};

/// A state dir opened for one daemon: locked, its folders made, its identity,
/// outbox and holds loaded, the memory-cap mode detected, the GPU side set up.
struct node_setup {
  daemon_config cfg;
  std::filesystem::path alloc_root; ///< <state>/allocations
  std::filesystem::path jobs_root;  ///< <state>/jobs
  /// <state>/trash: directories being removed (moved here first, ADR 0072)
  std::filesystem::path trash_root;
  std::string daemon_id; ///< <state>/daemon.id
  std::optional<outbox> box;
  std::optional<hold_store> holds;
  memcap_setup memcap;
  std::unique_ptr<gpu_supervisor> gpu;
  std::string shim; ///< path of cq-shim ("" = workloads are launched directly)
};

/// Opens the state dir of `cfg` (logs what it does). errc::already_exists when
/// another daemon holds it (one state dir, one daemon: SPEC section 10).
bus::result<node_setup> open_node(daemon_config cfg, host_probes& probes, node_disk& disk);

/// cq-node's daemon with the production adapters: runs until `stop_fd` (a
/// bus::wakeup notified by a signal handler) becomes readable. Returns 0 after a
/// clean stop, 5 when another daemon holds the state dir, 1 when the state
/// dir or the link cannot be set up (logged). Running children are left
/// running (a later start re-adopts them, invariant 11).
int run_node_daemon(daemon_config cfg, int stop_fd);

} // namespace cq::node
