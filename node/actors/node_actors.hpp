#pragma once
// The node daemon's actors (ADR 0020), as typed interfaces with a comment per
// handler; INTERNAL marks what an actor sends itself.
//
//   link (adapter thread) --frame--> daemon --stop/yield/gpu stop--> supervisor
//   process host (adapter thread) --exited--> supervisor --finished--> daemon
//   watchdog --oom--> supervisor;  watchdog --usage--> daemon
//   daemon --record--> recorder (an exit record, answered once durable)
//   daemon --remove--> remover (a forgotten job's directories)
//
// The daemon owns what heartbeats report and what must change together with
// it: the registry of allocations, those whose exit record the recorder is
// writing, the outbox, the holds and the GPU side
// (lanes, lock, fault latch). One supervisor per allocation owns its
// workload from the launch to the end of its cleanup; the watchdog samples
// memory. Every timer is a delayed_send on the actor clock, so a
// deterministic scheduler drives them all.

#include "cq/bus/protocol.hpp"
#include "cq/node/config.hpp"
#include "cq/node/daemon.hpp"
#include "cq/node/seams.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cq::node {

using frame_atom = caf::atom_constant<caf::atom("frame")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using unsent_atom = caf::atom_constant<caf::atom("unsent")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using finished_atom = caf::atom_constant<caf::atom("finished")>;
using usage_atom = caf::atom_constant<caf::atom("usage")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using yield_atom = caf::atom_constant<caf::atom("yield")>;
using exited_atom = caf::atom_constant<caf::atom("exited")>;
using oom_atom = caf::atom_constant<caf::atom("oom")>;
using gpu_stop_atom = caf::atom_constant<caf::atom("gpustop")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using kill_atom = caf::atom_constant<caf::atom("kill")>;
using scan_atom = caf::atom_constant<caf::atom("scan")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using unwatch_atom = caf::atom_constant<caf::atom("unwatch")>;
using sample_atom = caf::atom_constant<caf::atom("sample")>;
using check_atom = caf::atom_constant<caf::atom("check")>;
using record_atom = caf::atom_constant<caf::atom("record")>;
using write_atom = caf::atom_constant<caf::atom("write")>;

/// The end of an allocation, from its supervisor once cleanup has ended: the
/// exit to record and report, and what cleanup could not confirm gone.
struct alloc_end {
  std::string allocation;
  std::string job;
  std::uint64_t attempt = 0;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  bus::reason reason = bus::reason::none;
  std::uint64_t wall_ms = 0;
  std::optional<std::uint64_t> peak_ram_bytes;
  std::string detail;
  /// Non-empty: processes (or a cgroup) remain; each lane of the allocation
  /// (or the node, for a job without lanes) goes into a hold with this reason.
  std::string hold_reason;
  std::string group_dir;  ///< the cgroup such a hold keeps ("" = none)
  bus::string_list lanes; ///< GPU lanes the allocation held
};

/// One allocation's memory use, from the watchdog (heartbeat telemetry).
struct usage_sample {
  std::string allocation;
  std::uint64_t rss_bytes = 0;
};

/// An allocation's supervisor (supervisor.cpp): running, stopping with TERM,
/// stopping with KILL, cleaning, done.
using supervisor_actor = caf::typed_actor<
    /// From the daemon: a stop order (already durable in control/stop): SIGTERM
    /// to the group now, SIGKILL at `kill_at_ms` (actor clock) unless it ends.
    caf::reacts_to<stop_atom, std::int64_t>,
    /// From the daemon: a yield order (already durable): exit 6 is a checkpoint.
    caf::reacts_to<yield_atom>,
    /// From the process host: the leader ended (its group got SIGKILL).
    caf::reacts_to<exited_atom, child_exit>,
    /// From the watchdog: the memory cap was hit and the group killed.
    caf::reacts_to<oom_atom>,
    /// From the daemon: the GPU side stops it (`reason` fault or vram_cap).
    caf::reacts_to<gpu_stop_atom, bus::reason, std::string>,
    /// From the watchdog, which forwards the job's timeout this supervisor
    /// armed there: the start order's timeout passed.
    caf::reacts_to<timeout_atom>,
    /// INTERNAL: a grace period ended (stale when `gen` is not the latest).
    caf::reacts_to<kill_atom, std::uint64_t>,
    /// INTERNAL: the next cleanup scan is due (stale when `gen` is not the
    /// latest: a scan's timer and its when_gone share one).
    caf::reacts_to<scan_atom, std::uint64_t>>;

/// What the watchdog watches of one allocation.
struct watch_entry {
  std::string allocation;
  pid_t pgid = 0;
  std::optional<std::uint64_t> ram_cap; ///< checked every sample_ms when set
  mem_group group;
  supervisor_actor supervisor;
};

/// The daemon (daemon.cpp): heartbeats, orders, approval, holds, the outbox.
using daemon_actor = caf::typed_actor<
    /// From the link: the frames from the coordinator waiting at one wake-up.
    caf::reacts_to<frame_atom, std::vector<std::string>>,
    /// INTERNAL: act on the next frame of the backlog (one per message).
    caf::reacts_to<drain_atom>,
    /// From the link: the frame of request `id` (0 = a reply) found no connection.
    caf::reacts_to<unsent_atom, std::uint64_t>,
    /// From a supervisor: its allocation ended and its cleanup is over.
    caf::reacts_to<finished_atom, alloc_end>,
    /// From the watchdog: the latest memory use of every watched allocation.
    caf::reacts_to<usage_atom, std::vector<usage_sample>>,
    /// INTERNAL: timed work due at the given time (heartbeat, reports, GPU).
    caf::reacts_to<tick_atom, std::int64_t>>;

/// The memory watchdog (watchdog.cpp): peak RSS once per heartbeat interval,
/// cap checks every [memory] sample_ms (a cgroup's OOM-kill counter, or the
/// process tree's RSS in watchdog mode).
using watchdog_actor = caf::typed_actor<
    /// From the daemon or a supervisor: watch an allocation.
    caf::reacts_to<watch_atom, watch_entry>,
    /// From a supervisor whose leader ended: stop watching; answers the peak
    /// RSS sampled (0 if none).
    caf::replies_to<unwatch_atom, std::string>::with<std::uint64_t>,
    /// From a supervisor, delayed and without a sender: its job's timeout is
    /// due. Forwarded to it while its allocation is watched (its leader has
    /// not ended), dropped after: a delayed message to the supervisor itself
    /// would keep it for the whole timeout, however soon the job ended.
    caf::reacts_to<timeout_atom, std::string>,
    /// INTERNAL: cap checks due.
    caf::reacts_to<check_atom>,
    /// INTERNAL: peak sampling due.
    caf::reacts_to<sample_atom>>;

/// The exit recorder (recorder.cpp): writes exit records for the daemon, so
/// that their fsyncs do not hold up the next order (ADR 0044), and writes
/// the records asked for together in one group (ADR 0053).
using recorder_actor = caf::typed_actor<
    /// From the daemon: `text` into `file`, atomically and durably
    /// (node_disk::write_atomic_all); answers whether it was written.
    caf::replies_to<record_atom, std::string, std::string>::with<bool>,
    /// INTERNAL: write the records asked for so far, as one group.
    caf::reacts_to<write_atom>>;

using remove_atom = caf::atom_constant<caf::atom("remove")>;

/// The remover (retention.cpp): removes the directory trees the daemon hands
/// it, so that a large one (a job's state dir full of checkpoints) does not
/// hold up the daemon's heartbeats and orders (ADR 0072).
using remover_actor = caf::typed_actor<
    /// From the daemon: remove `path` and everything under it.
    caf::reacts_to<remove_atom, std::string>>;

/// What a supervisor starts with: a launched (or re-adopted) allocation.
struct supervised {
  std::string allocation;
  std::string job;
  std::uint64_t attempt = 0;
  leader_id leader;                          ///< the workload's leader (cq-shim)
  bool adopted = false;                      ///< re-adopted after a restart: not our child
  std::int64_t started_ms = 0;               ///< actor clock, for wall_ms
  bus::string_list lanes;                    ///< GPU lanes held
  std::optional<std::uint64_t> ram_cap;      ///< RAM cap in bytes
  mem_group group;                           ///< its memory cgroup (cgroup modes)
  std::optional<std::int64_t> timeout_at_ms; ///< actor clock: the hard wall-time limit
  bool stop_requested = false;               ///< a stop order came before a restart
  std::optional<std::int64_t> kill_at_ms;    ///< actor clock: SIGKILL then
  bool yield_ordered = false;                ///< a yield order came: exit 6 is a checkpoint
  /// Why the node itself stopped it before a restart (control/stop-reason:
  /// timeout, oom, vram_cap or fault; none = it did not), so that the exit
  /// keeps its reason across the restart.
  bus::reason own_stop = bus::reason::none;
  /// Recovery: the leader ended while cq-node was down; cleanup starts at
  /// once, without the process group (its id may be in use by now).
  bool ended_while_down = false;
};

/// What every supervisor of one daemon shares.
struct supervisor_deps {
  process_host* processes = nullptr;
  host_probes* probes = nullptr;
  node_disk* disk = nullptr;
  daemon_actor daemon;
  watchdog_actor watchdog;
  std::filesystem::path alloc_root; ///< <state>/allocations
  cleanup_config cleanup;           ///< [cleanup] poll_ms, max_wait_ms
};

/// Spawns the supervisor of `s` (supervisor.cpp); it registers with the
/// process host and the watchdog itself.
supervisor_actor spawn_supervisor(caf::actor_system& sys, supervisor_deps deps, supervised s);

/// Spawns the watchdog (watchdog.cpp), which reports usage to `daemon`.
watchdog_actor spawn_watchdog(caf::actor_system& sys, process_host* processes, host_probes* probes,
                              daemon_actor daemon, std::int64_t sample_ms,
                              std::int64_t heartbeat_ms);

/// Spawns the exit recorder (recorder.cpp) over `disk`.
recorder_actor spawn_recorder(caf::actor_system& sys, node_disk* disk);

/// Spawns the remover (retention.cpp) over `disk`.
remover_actor spawn_remover(caf::actor_system& sys, node_disk* disk);

/// Spawns a daemon over `setup` and `seams` (daemon.cpp); it re-adopts what
/// the state dir holds, then heartbeats. Frames reach it through the link's
/// handlers, which it installs.
daemon_actor spawn_daemon(caf::actor_system& sys, node_setup setup, node_seams seams);

} // namespace cq::node

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::alloc_end)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::usage_sample)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<cq::node::usage_sample>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::watch_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::child_exit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::supervised)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cq::node::supervisor_deps)
