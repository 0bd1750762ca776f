#pragma once
// cq-sim's world: the real coordinator actors (spawn_coordinator, the real
// store on SQLite behind a wrapper that fails chosen commits) and N simulated
// nodes, each the real node daemon's actors over a simulated host
// (node_host.hpp), in one actor system on CAF's test scheduler, with a
// simulated network that carries the real msgpack frames.
//
// Everything is chosen by one seeded PRNG: which ready actor runs next (the
// test scheduler only offers them in order; the pick is ours), the workload,
// every fault and every delay. Virtual time moves only when nothing is ready:
// to the next CAF timer or the next world event, whichever is first. So a
// seed replays exactly (the trace hash proves it).
//
// Checkers (each named by its violation):
//   lane_twice          one GPU lane of a node named by the start orders of two
//                       workloads running there at once (lane identity)
//   ram_over            a node's live RAM caps above its allocatable RAM
//   cpu_over            the CPUs of a node's running workloads above its CPUs
//   vram_over           the VRAM reserved on one lane by its running workloads
//                       above the lane's VRAM
//   job_twice           two live allocations of one job, anywhere
//   ack_before_commit   a submit acknowledged, or an exit report acknowledged,
//                       before the store made it durable
//   job_missing         after a coordinator restart (a crash or a power loss)
//                       an acknowledged job is missing from its listing
//   latch_bypassed      a GPU start order sent to a node more than 2 s after
//                       the coordinator received a heartbeat with its fault
//   liveness            after the faults end, an accepted job that is not
//                       terminal within the bound
//   exactly_once        a submit retried with its client job id (or a cancel
//                       with its operation id) after a lost reply answered
//                       with another job, or refused as a conflict
//   outcome             a job ended in a state (and reason, exit code, signal)
//                       its workload script does not permit: exit 0 ->
//                       succeeded; exit N -> failed exit_code N; a crash ->
//                       failed signal; cancelled only when a client cancelled
//                       it; dependency_failed only when its dependency ended
//                       without success; timeout, oom and vram_cap only for a
//                       job with a timeout, a workload over its RAM cap, or
//                       one over its declared VRAM; lost only with
//                       --no-requeue. Checked on every committed job row and
//                       on every listing (every 30 s). One tolerance, for a
//                       known node defect: a job the node was stopping for
//                       a reason of its own (timeout, VRAM cap, RAM watchdog)
//                       when its daemon restarted may end `failed signal`
//                       with SIGTERM or SIGKILL (the reason is not durable).
//   terminal_changed    a job seen terminal (committed, or listed by ls) later
//                       seen in another state or with another reason
//   cancel_lost         a cancel was acknowledged, and the job then ended
//                       other than cancelled (a job that had ended before the
//                       acknowledgement is fine)
//   store_damaged       the coordinator's store does not reopen after a crash
//                       or a power loss (or recovery finds damaged rows)
//   role_bypassed       a submitter's cancel of another person's job was
//                       acknowledged
//   codec               a request or a reply does not decode
//   not_idle            once every job has ended, a node still runs a
//                       workload (or a process one left behind), or its daemon
//                       still lists an allocation or a hold, 180 s later

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace cq::sim {

/// Which faults a run injects; drawn per seed in a swarm.
struct fault_mix {
  double drop = 0;         ///< probability a frame is lost
  double dup = 0;          ///< probability a frame arrives twice
  bool reorder = false;    ///< frames of a connection may overtake each other
  bool partitions = false; ///< a node cut off both ways for a while
  bool reconnects = false; ///< a node's connection breaks (in-flight frames lost)
  bool node_crashes = false;
  bool coordinator_crashes = false;
  double commit_fail = 0; ///< probability a commit fails
  bool child_crashes = false;
  bool gpu_faults = false;
  bool ignore_term = false; ///< some workloads ignore SIGTERM
  /// Some workloads leave processes behind: marked escapees (cleanup finds
  /// and kills them) and processes whose environment cannot be read (never
  /// signalled; one that outlives cleanup's deadline makes a hold, which an
  /// operator releases later).
  bool escapees = false;
  /// Some workloads grow past their RAM cap: a cgroup node's kernel kills them
  /// (its OOM counter moves), a watchdog node's watchdog does.
  bool ooms = false;
  /// A machine loses power: the daemon and every workload die at once, and
  /// the daemon finds them gone when the machine is back.
  bool machine_crashes = false;
  /// Faults at any point: world events (deliveries, crashes, partitions) and
  /// due timers fire between any two actor messages, not only when every
  /// actor is idle, and handlers cost virtual time (a commit's fsync, an
  /// nvidia-smi call), so time passes while actors are busy.
  bool anywhere = false;
  /// Some coordinator crashes are power losses: the store's writes since its
  /// last sync are lost or torn (sim/vfs.hpp), then it reopens and recovers.
  bool power_loss = false;
  /// The coordinator dies right after a commit, before anyone hears of it
  /// (its reply is never sent): clients retry with the same ids.
  bool commit_crashes = false;
  /// Each node's wall clock has its own offset, and jumps when its machine
  /// restarts.
  bool clock_skew = false;
  /// The nodes' disks fail writes, appends and renames now and then (EIO,
  /// ENOSPC), and a power loss tears what was appended since the last sync.
  bool disk_faults = false;
  static fault_mix none();
  static fault_mix all();
  static fault_mix random(std::mt19937_64& rng);
  std::string describe() const;
  /// Turns off every kind `mask` turns on (cq-sim --without).
  void remove(const fault_mix& mask);
};

struct options {
  std::uint64_t seed = 1;
  int nodes = 4;
  int jobs = 100;
  fault_mix faults = fault_mix::all();
  std::vector<std::string> defects; ///< names of actors::config::defects fields
  std::size_t tail = 40;            ///< trace lines shown with a failure
  bool verbose = false;             ///< print the whole trace
  std::string workload_file;        ///< JSON lines instead of the generator
  /// A scheduling study (cq-sim --study): no faults, the coordinator's
  /// production leases and grace periods, and the nodes' periodic work
  /// (heartbeats, memory and GPU sampling) every `heartbeat_ms` of simulated
  /// time rather than every second, so that idle time costs nothing; the
  /// generator draws a GPU cluster's month instead of a fault run's minutes.
  bool study = false;
  std::int64_t heartbeat_ms = 0; ///< 0: 1 s, or 1 h in a study
  std::string fleet_file;        ///< nodes from a file instead of `nodes` drawn ones
  /// The coordinator's [retention] history_jobs (0: its default): a small
  /// bound forgets finished jobs during the run, and their nodes' directories
  /// with them (cq-sim --history-jobs).
  std::uint64_t history_jobs = 0;
  std::string report_file; ///< the per-job report and its summary, as JSON
  /// Seconds on a wall clock, for the report's figures (cq-sim's main has
  /// the clock; none: 0).
  std::function<double()> wall_clock;
};

struct level_stats {
  std::vector<std::int64_t> waits_ms; ///< submit to first start
};

struct result {
  bool ok = true;
  std::string violation; ///< checker name
  std::string message;
  std::vector<std::string> tail;     ///< the trace lines leading to it
  std::vector<std::string> subjects; ///< what the failure is about (job, allocation, node)
  std::vector<std::string> story;    ///< the trace lines that name a subject
  std::uint64_t trace_hash = 0;
  std::string parameters; ///< every drawn parameter, printed first
  // report
  std::int64_t sim_ms = 0;
  std::int64_t idle_after_ms = 0; ///< from the last job's end until every node was idle
  double wall_s = 0;
  std::uint64_t steps = 0; ///< actor runs
  int jobs_generated = 0, jobs_acked = 0, jobs_unknown = 0;
  int submit_retries = 0;              ///< retries (same client job id) of acknowledged submits
  std::map<std::string, int> outcomes; ///< terminal state -> jobs
  std::map<int, level_stats> levels;   ///< 0 high, 1 medium, 2 low
  double ram_util = 0, gpu_util = 0;   ///< time-averaged over the run
  double cpu_util = 0;
  /// Utilization over time: one row per minute of simulated time (RAM caps,
  /// CPUs and GPU lanes held by live allocations, as fractions of the fleet's).
  struct sample_row {
    std::int64_t t_ms = 0;
    double ram = 0, cpu = 0, gpu = 0;
  };
  std::vector<sample_row> series;
  int backfilled = 0;
  int yields = 0; ///< allocations asked to yield (preemption choices)
  int lost = 0;   ///< allocations lost after their node's lost-after
  /// A job started while an attempt given away after lost-after still ran on
  /// its cut-off node (allowed, docs/adr/0021).
  int overlaps_after_loss = 0;
  std::map<std::string, int> faults; ///< injected, by kind
  /// Every state change the coordinator made, by machine (job, allocation,
  /// node), seen through policy::observe_transitions.
  std::map<std::string, std::uint64_t> transitions;
};

/// Runs one seed. Never throws; a failure is in the result (violation
/// "input" when the options or the workload file are unusable).
result run(const options& opt);

/// The names accepted by options::defects.
std::vector<std::string> defect_names();

} // namespace cq::sim
