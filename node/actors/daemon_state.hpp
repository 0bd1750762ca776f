#pragma once
// The daemon actor's state (daemon.cpp), shared with the start path
// (launch.cpp) and recovery at start (recovery.cpp). Not an interface: only
// node/actors/ includes it.

#include "cq/node/config.hpp"
#include "cq/node/daemon.hpp"
#include "cq/node/gpu.hpp"
#include "cq/node/holds.hpp"
#include "cq/node/outbox.hpp"
#include "node/actors/node_actors.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include <climits>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

namespace cq::bus {
struct frame; // cq/bus/codec.hpp
} // namespace cq::bus

namespace cq::node {

/// An allocation the daemon holds: launched (or re-adopted) and not yet
/// finished by its supervisor. Finished ones are held by the outbox until
/// the coordinator acknowledges their exit.
struct registry_entry {
  supervisor_actor supervisor;
  /// Kill deadline of the stop orders so far (wall ms, as control/stop keeps it).
  std::optional<std::int64_t> stop_kill_at_wall_ms;
};

enum class request_kind { heartbeat, report };

/// A request sent to the coordinator whose reply has not arrived.
struct pending_request {
  request_kind kind = request_kind::heartbeat;
  std::uint64_t seq = 0;    ///< report seq (kind == report)
  std::int64_t sent_ms = 0; ///< for expiry
};

struct daemon_state {
  node_setup setup;        ///< opened state dir and GPU side
  node_seams seams;        ///< the OS, behind interfaces
  watchdog_actor watchdog; ///< memory sampling and caps
  recorder_actor recorder; ///< writes exit records
  remover_actor remover;   ///< removes forgotten jobs' directories
  /// Allocations whose exit record the recorder is writing: off the
  /// registry, not yet in the outbox, still listed in heartbeats.
  std::set<std::string> recording;
  /// The directories the starts being handled made and have not synced
  /// yet, and their alloc.json files: synced after all of the records of
  /// the group, before any launch (launch.cpp, ADRs 0045 and 0068).
  node_disk::pending_syncs start_syncs;
  node_disk::pending_syncs start_files;
  /// A sync of the start being handled failed: its allocation's directory
  /// may not survive a power loss, so a refusal's exit report is persisted
  /// in the outbox rather than left to exit.json (launch.cpp).
  bool start_unsynced = false;
  /// Why a sync failed while the group's starts were prepared (a
  /// refusal's): it may have held the others' directories, so none of them
  /// launches (empty: none failed).
  std::string group_unsynced;
  std::map<std::string, registry_entry> registry;             ///< by allocation id
  std::vector<usage_sample> usage;                            ///< the watchdog's latest
  std::unordered_map<std::uint64_t, pending_request> pending; ///< by request id
  std::uint64_t next_request_id = 1;                          ///< id of our next request
  std::int64_t next_heartbeat_ms = 0;                         ///< actor clock; 0 = right away
  std::int64_t next_purge_ms = 0;                             ///< next expiry scan of `pending`
  std::int64_t next_leftover_ms = 0;                          ///< next retry of leftover cgroups
  std::int64_t next_sweep_ms = 0; ///< next [retention] sweep (retention.cpp)
  /// Wall ms before which a sweep would remove nothing (retention.cpp); 0:
  /// the next sweep reads the directories.
  std::int64_t sweep_quiet_until_ms = 0;
  /// What the [retention] sweeps read of each allocation directory: its job
  /// and, once its exit record is there, when it finished (retention.cpp).
  struct swept_allocation {
    std::string job;
    std::int64_t finished_ms = 0; ///< 0: no exit record yet
  };
  std::map<std::string, swept_allocation> swept;
  /// Allocations a forget order named while their exit was being recorded
  /// or not acknowledged yet, and their jobs: removed once it is
  /// (retention.cpp), each at most as long as its report waits.
  std::map<std::string, std::string> forget_on_ack;
  std::set<std::int64_t> armed; ///< times of ticks on their way
  /// Frames read (their stops already applied) and not yet acted on: one is
  /// acted on per message, or a run of start orders at its front as one
  /// group (at most 32, ADR 0068), so that a tick (a heartbeat) can come
  /// between two groups of a burst (invariant 14).
  std::deque<std::string> backlog;
  bool draining = false;        ///< a drain_atom is on its way
  std::optional<bool> approved; ///< last approval state the coordinator reported
  /// What <state>/status last said (tell_status): `cq-node install` waits on it.
  std::string status_told;
  std::int64_t auth_error_logged_ms = INT64_MIN / 2; ///< throttles the unauthenticated log
  std::int64_t refused_logged_ms = INT64_MIN / 2;    ///< throttles the second-daemon log
  caf::actor_clock::time_point steady0;              ///< the actor clock at spawn
  /// The node's clock on the wire (heartbeat_req::beat): this daemon's start
  /// (wall ms), and the number of the last heartbeat sent. Acknowledgements
  /// and reports carry it, so the coordinator never reconciles with an older
  /// heartbeat (ADR 0019).
  std::int64_t boot_ms = 0;
  std::uint64_t beat = 0;
  static inline const char* name = "cq.node.daemon";

  const daemon_config& cfg() const { return setup.cfg; }
};

using daemon_ptr = daemon_actor::stateful_pointer<daemon_state>;

/// recovery.cpp: this start's boot_ms: `wall_ms`, or one more than the last
/// start's (<state>/boot) when the wall clock stepped back; recorded there.
std::int64_t next_boot_ms(daemon_ptr self, std::int64_t wall_ms);
/// Milliseconds on the actor clock since the daemon started (timers, durations).
std::int64_t now_ms(daemon_ptr self);
/// Wall-clock milliseconds (records): the epoch plus the actor clock.
std::int64_t wall_now_ms(daemon_ptr self);

/// The node's disk (seams.hpp).
inline node_disk& disk_of(daemon_ptr self) {
  return *self->state.seams.disk;
}
/// A small JSON file of ours, or nullopt when it is missing or unreadable.
std::optional<nlohmann::json> read_json(node_disk& disk, const std::filesystem::path& p);
/// Pretty JSON; invalid UTF-8 (argv may hold any bytes) is replaced, never thrown on.
std::string to_text(const nlohmann::json& j);
/// MemTotal and MemAvailable as this node reports them: measured, with the
/// [capacity] overrides applied (not measured when both are overridden).
std::optional<mem_info> sample_memory(daemon_ptr self);
/// The heartbeat goes out at the next tick (a GPU refusal, a cleared fault).
void heartbeat_now(daemon_ptr self);

/// Longest timeout honoured (larger ones are clamped; keeps deadlines far from overflow).
inline constexpr std::uint64_t max_timeout_ms = 100ull * 365 * 24 * 3600 * 1000;

/// The end of allocation `id` decided here, without a supervisor (a
/// tombstone, a refused launch).
alloc_end local_end(std::string id, std::string job, std::uint64_t attempt,
                    std::optional<std::int64_t> exit_code, bus::reason reason, std::string why);

/// Queues `r` in the outbox (persisted there with `persist`, for a report
/// that has no durable record of its own); the next tick sends it.
void queue_report(daemon_ptr self, bus::report_req r, bool persist);
/// Records and reports an allocation's exit (daemon.hpp, invariant 2), the
/// record written before it returns: an order's end (a refused launch, a
/// tombstone) is durable before the order is acknowledged (invariant 13).
/// With `persist`, the report is persisted in the outbox too (its exit.json
/// may be in a directory that did not sync).
void finish(daemon_ptr self, const alloc_end& end, bool persist = false);
/// The same for a supervised allocation's end, with the record written by
/// the recorder while the daemon goes on; the report is queued once the
/// record is durable (recorder.cpp).
void finish_recorded(daemon_ptr self, const alloc_end& end);
/// exit.json of an exited report, written now.
bool write_exit_record(daemon_ptr self, const bus::report_req& r, std::uint64_t attempt);
/// Schedules a tick for the earliest timed work, unless one is on its way.
void arm(daemon_ptr self);

/// retention.cpp: when the next [retention] sweep is due (INT64_MAX: never),
/// and the sweep itself when it is.
std::int64_t retention_due(daemon_ptr self);
/// An exit record finished at `finished_ms` was written: the sweep that can
/// first remove its directory reads the directories again.
void retention_note_exit(daemon_ptr self, std::int64_t finished_ms);
void sweep_if_due(daemon_ptr self, std::int64_t now);
/// Hands the remover what a crash left in the trash (<state>/trash): at start.
void empty_trash(daemon_ptr self);
/// The forget order (ADR 0072): removes the directories of the allocations
/// it names and the state dirs of its jobs, but never one the sweep would
/// keep; the reply to order `id`.
std::string forget_allocations(daemon_ptr self, std::uint64_t id, const bus::forget_order& o);
/// The coordinator acknowledged (`acked`) or refused for good `allocation`'s
/// exit report: with `acked` its `reported` mark is written; if a forget
/// order named it, its directory is removed instead.
void note_reported(daemon_ptr self, const std::string& allocation, bool acked);

/// A start order and its allocation's directory, just made (its sync pending
/// in start_syncs).
struct start_item {
  const bus::start_order* order = nullptr;
  std::filesystem::path dir;
};
/// A start order's id, and the order.
using numbered_start = std::pair<std::uint64_t, const bus::start_order*>;
/// launch.cpp: start orders that waited together, handled as one group (ADR
/// 0068): each checked and its directory made in turn (a repeat of an
/// earlier one is then known), their records synced together, then each
/// launched; the replies, one per order, in order, once every launch is done
/// (invariant 13).
std::vector<std::string> on_starts(daemon_ptr self, const std::vector<numbered_start>& orders);
/// Frame `f` as a start order, or nullopt for any other frame (or a start
/// order that does not decode: handle_frame answers it).
std::optional<bus::start_order> start_of(const bus::frame& f);
/// The acknowledgement of order `id`, stamped with the node's clock.
std::string ack(daemon_ptr self, std::uint64_t id);
/// launch.cpp: start orders handled together (one, or a burst's): checks
/// each and writes its record, syncs every record and directory of the group
/// once, then launches and supervises each, or ends it as launch_failed.
void start_allocations(daemon_ptr self, const std::vector<start_item>& starts);
/// Queues allocation `allocation`'s start report, in memory only (alloc.json
/// is the start's durable record; recovery queues it again).
void queue_started(daemon_ptr self, const std::string& allocation, const std::string& job);
/// The reply to a terminal order (cq run --pty): its frames are in the
/// allocation's terminal FIFO, or an error (launch.cpp).
std::string write_terminal(daemon_ptr self, std::uint64_t id, const bus::terminal_order& o);
/// Spawns the supervisor of `s` and registers it (launch and recovery).
void supervise(daemon_ptr self, supervised s);

/// recovery.cpp: re-adopts or finishes every allocation found in the state
/// dir at start, then removes stale memory groups (daemon.hpp, invariants 2, 11
/// and 15).
void readopt(daemon_ptr self);
/// Kills what is left in a cgroup of ours and removes it; true once it is gone.
bool remove_leftover_group(daemon_ptr self, const std::string& dir);

} // namespace cq::node
