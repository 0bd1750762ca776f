#pragma once
// The parts of the wire schema every message shares: limits, states and
// reasons, and the records that replies and reports carry (see protocol.hpp
// for the envelope and the schema's invariants). Free of msgpack, ZeroMQ and CAF.

#include "cq/errc.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cq::bus {

inline constexpr std::uint64_t protocol_version = 1;

/// A job's state (SPEC section 3). In memory an enum; on the wire, in the
/// store and in the CLI's output its name (to_string), the one mapping.
enum class job_state : std::uint8_t {
  queued,
  starting,
  running,
  stopping,
  succeeded,
  failed,
  cancelled,
};

/// An allocation's state: starting (start ordered), running (the node
/// reported its start), stopping (a stop is in flight), finished, or unknown
/// (its node is down: the allocation may still run there; after the job's
/// lost-after it is finished with reason lost).
enum class alloc_state : std::uint8_t { starting, running, stopping, finished, unknown };

/// Why a job or an allocation ended the way it did, or why a node stopped
/// it: none ("": ran to its own end, or still live) or one of the names below.
/// Job reasons: cancelled, launch_failed, timeout, oom, vram_cap, signal,
/// exit_code, dependency_failed, lost. Allocation and node-report reasons add
/// fault, checkpointed, refused and preempted (see report_req).
enum class reason : std::uint8_t {
  none,
  cancelled,
  launch_failed,
  timeout,
  oom,
  vram_cap,
  fault,
  checkpointed,
  refused,
  lost,
  signal,
  exit_code,
  dependency_failed,
  preempted, ///< asked to yield, did not exit within the grace: stopped and requeued
};

std::string_view to_string(job_state s);
std::string_view to_string(reason r);
bool parse(std::string_view name, reason& out);
std::string_view to_string(alloc_state s);
/// False (and `out` unchanged) for a name that is not a state.
bool parse(std::string_view name, job_state& out);
bool parse(std::string_view name, alloc_state& out);

inline bool is_terminal(job_state s) {
  return s == job_state::succeeded || s == job_state::failed || s == job_state::cancelled;
}

/// Bounds applied to every frame from the network.
struct limits {
  static constexpr std::size_t frame_bytes = 8 << 20;       ///< ZMQ_MAXMSGSIZE on every socket.
  static constexpr std::size_t string_bytes = 4 << 20;      ///< longest string (log chunks).
  static constexpr std::size_t array_items = 65536;         ///< longest array.
  static constexpr std::size_t map_items = 4096;            ///< largest map.
  static constexpr std::size_t depth = 8;                   ///< deepest nesting.
  static constexpr std::size_t arg_bytes = 128 << 10;       ///< one argv element or env value.
  static constexpr std::size_t argv_items = 4096;           ///< argv length and env entries.
  static constexpr std::uint32_t log_chunk_bytes = 1 << 20; ///< largest log read.
  /// Most bytes one terminal request (cq run --pty) carries: one frame the
  /// node writes to cq-shim's FIFO at once (PIPE_BUF is 512 on macOS).
  static constexpr std::size_t terminal_input_bytes = 256;
  /// Largest job spec, as encoded on the wire (argv, cwd, environment and the
  /// rest). Everything a start order adds to a spec (ids, lanes, numbers) is
  /// bounded by start_order_extra_bytes, so a start order always fits a frame.
  static constexpr std::size_t spec_bytes = 1 << 20;
  static constexpr std::size_t start_order_extra_bytes = 64 << 10;
  /// Most tasks of one array (cq submit --array): one commit holds them all.
  static constexpr std::size_t array_tasks = 10000;
  /// Budget of one page of a listing (ls): a reply never comes near frame_bytes.
  static constexpr std::size_t page_bytes = 4 << 20;
  static_assert(spec_bytes + start_order_extra_bytes < frame_bytes);
  static_assert(page_bytes + spec_bytes + start_order_extra_bytes < frame_bytes);
};

/// An error as carried by a reply.
struct error_info {
  errc code = errc::internal;
  std::string message;
};

/// A value or an error_info; the CAF-free stand-in for caf::expected.
template <class T>
class result {
public:
  result(T value) : v_(std::move(value)) {}
  result(error_info e) : v_(std::move(e)) {}
  result(errc code, std::string message) : v_(error_info{code, std::move(message)}) {}
  explicit operator bool() const { return v_.index() == 0; }
  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  const error_info& error() const { return std::get<1>(v_); }

private:
  std::variant<T, error_info> v_;
};

using env_map = std::map<std::string, std::string>;
using string_list = std::vector<std::string>;

// ---- shared records ---------------------------------------------------------

/// What a user asks to run. Validated by validate_spec() on the coordinator.
struct job_spec {
  std::string name;                             ///< display name; empty = derived from argv[0]
  string_list argv;                             ///< program and arguments, no shell
  std::string cwd;                              ///< absolute working directory on the node
  env_map env;                                  ///< the complete environment (nothing inherited)
  std::optional<std::uint64_t> ram_bytes;       ///< hard RAM cap
  std::optional<std::string> node;              ///< pinned node name
  std::optional<std::string> priority;          ///< high|medium|low (default medium)
  std::optional<std::uint64_t> gpus;            ///< whole exclusive GPU lanes
  std::optional<std::uint64_t> vram_bytes;      ///< VRAM per lane
  std::optional<std::uint64_t> cpus;            ///< CPUs reserved
  std::optional<std::uint64_t> est_ms;          ///< expected wall time
  std::optional<std::uint64_t> timeout_ms;      ///< hard wall-time limit
  std::optional<string_list> after;             ///< start only after these jobs succeeded
  std::optional<std::string> profile;           ///< profile key (default: derived from argv)
  std::optional<std::uint64_t> ram_floor_bytes; ///< MemAvailable reserve after the cap
  std::optional<std::uint64_t> ram_start_min_bytes; ///< absolute MemAvailable to start
  std::optional<std::string> preempt;               ///< never|checkpoint (default never)
  std::optional<std::uint64_t> lease_ms;            ///< lease length (default: the coordinator's)
  /// How long an allocation on a down node stays unknown before it is lost
  /// (default: the coordinator's); 0 = never (wait for the node).
  std::optional<std::uint64_t> lost_after_ms;
  std::optional<bool> no_requeue;         ///< a lost allocation fails the job (reason lost)
  std::optional<std::uint64_t> retry_oom; ///< requeue an oom up to this many times, cap x1.5
  /// Also write the output to this file (cq submit --output): an absolute
  /// pattern with %j %a %x %n (output_pattern.hpp), expanded by the node.
  std::optional<std::string> output;
  /// cq run --pty: the workload gets a terminal on the node (its stdin,
  /// stdout and stderr, and its controlling terminal), typed into through
  /// the terminal op; what it shows is the job's output log.
  std::optional<bool> pty;
  /// cq submit --notify: the coordinator's per-job notify rules tell of
  /// this job (docs/operations.md, "Watching the fleet").
  std::optional<bool> notify;
};
template <class F>
void fields(F&& f, job_spec& x) {
  f("name", x.name), f("argv", x.argv), f("cwd", x.cwd), f("env", x.env),
      f("ram_bytes", x.ram_bytes), f("node", x.node), f("priority", x.priority), f("gpus", x.gpus),
      f("vram_bytes", x.vram_bytes), f("cpus", x.cpus), f("est_ms", x.est_ms),
      f("timeout_ms", x.timeout_ms), f("after", x.after), f("profile", x.profile),
      f("ram_floor_bytes", x.ram_floor_bytes), f("ram_start_min_bytes", x.ram_start_min_bytes),
      f("preempt", x.preempt), f("lease_ms", x.lease_ms), f("lost_after_ms", x.lost_after_ms),
      f("no_requeue", x.no_requeue), f("retry_oom", x.retry_oom), f("output", x.output),
      f("pty", x.pty), f("notify", x.notify);
}

/// A job as reported to readers. Times are milliseconds since the Unix epoch, 0 = not yet.
struct job_info {
  std::string id;
  std::string name;
  std::string owner; ///< identity that submitted it
  job_state state = job_state::queued;
  bus::reason reason = bus::reason::none; ///< why it failed or was cancelled
  string_list argv;
  std::string cwd;
  std::optional<std::uint64_t> ram_bytes;
  std::optional<std::string> pinned_node;
  std::string node;          ///< node of the current or last allocation
  std::string allocation;    ///< current or last allocation id
  std::uint64_t attempt = 0; ///< number of allocations so far
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::int64_t submitted_ms = 0;
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
  std::string priority = "medium"; ///< high|medium|low
  std::uint64_t position = 0;      ///< 1-based slot within its level (0 once terminal)
  std::uint64_t gpus = 0;
  std::optional<std::uint64_t> vram_bytes;
  std::uint64_t cpus = 0;
  std::optional<std::uint64_t> est_ms;
  std::optional<std::uint64_t> timeout_ms;
  string_list after;
  std::string profile; ///< profile key
  std::uint64_t ram_floor_bytes = 0;
  std::uint64_t ram_start_min_bytes = 0;
  std::string preempt = "never";         ///< never|checkpoint
  std::uint64_t effective_ram_bytes = 0; ///< the cap placement uses (--ram, profile or default)
  std::uint64_t effective_est_ms = 0;    ///< the estimate placement uses
  string_list lanes;                     ///< GPU lanes of the current allocation
  std::uint64_t lease_ms = 0;            ///< effective lease length
  std::uint64_t lost_after_ms = 0;       ///< effective lost-after; 0 = never
  bool no_requeue = false;               ///< a lost allocation fails the job
  std::uint64_t retry_oom = 0;           ///< oom retries allowed
  std::uint64_t oom_retries = 0;         ///< oom retries used (each raised the cap x1.5)
  /// Authorized by a one-job diagnostic grant (cq node diagnostic): it never
  /// requeues (exit 6 and a lost allocation fail it).
  bool diagnostic = false;
  /// A task of an array (cq submit --array): the array's id, this task's
  /// index, and how many of the array's tasks may hold allocations at once
  /// (0 = no limit). "" = not in an array.
  std::string array;
  std::optional<std::uint64_t> array_index;
  std::uint64_t array_limit = 0;
  /// Kept from starting by a person (cq hold) until cq release; queued only.
  bool on_hold = false;
  std::string output;       ///< --output pattern (output_pattern.hpp); "" = cq logs only
  bool pty = false;         ///< cq run --pty: it runs on a terminal (job_spec::pty)
  std::string cancelled_by; ///< the identity whose cq cancel ended it ("" = none)
  bool notify = false;      ///< per-job notify rules tell of it (job_spec::notify)
  /// effective_est_ms is the coordinator's default: no --est, and no run of
  /// the command measured yet when it was submitted. A time that waits on it
  /// is a guess, and cq says so rather than count it down.
  bool est_default = false;
};
template <class F>
void fields(F&& f, job_info& x) {
  f("id", x.id), f("name", x.name), f("owner", x.owner), f("state", x.state), f("reason", x.reason),
      f("argv", x.argv), f("cwd", x.cwd), f("ram_bytes", x.ram_bytes),
      f("pinned_node", x.pinned_node), f("node", x.node), f("allocation", x.allocation),
      f("attempt", x.attempt), f("exit_code", x.exit_code), f("signal", x.signal),
      f("submitted_ms", x.submitted_ms), f("started_ms", x.started_ms),
      f("finished_ms", x.finished_ms), f("priority", x.priority), f("position", x.position),
      f("gpus", x.gpus), f("vram_bytes", x.vram_bytes), f("cpus", x.cpus), f("est_ms", x.est_ms),
      f("timeout_ms", x.timeout_ms), f("after", x.after), f("profile", x.profile),
      f("ram_floor_bytes", x.ram_floor_bytes), f("ram_start_min_bytes", x.ram_start_min_bytes),
      f("preempt", x.preempt), f("effective_ram_bytes", x.effective_ram_bytes),
      f("effective_est_ms", x.effective_est_ms), f("lanes", x.lanes), f("lease_ms", x.lease_ms),
      f("lost_after_ms", x.lost_after_ms), f("no_requeue", x.no_requeue),
      f("retry_oom", x.retry_oom), f("oom_retries", x.oom_retries), f("diagnostic", x.diagnostic),
      f("array", x.array), f("array_index", x.array_index), f("array_limit", x.array_limit),
      f("on_hold", x.on_hold), f("output", x.output), f("pty", x.pty),
      f("cancelled_by", x.cancelled_by), f("notify", x.notify), f("est_default", x.est_default);
}

/// One attempt of a job on one node.
struct allocation_info {
  std::string id;
  std::string job;
  std::string node;
  alloc_state state = alloc_state::starting;
  std::uint64_t attempt = 0;
  bus::reason reason = bus::reason::none;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::optional<std::uint64_t> peak_ram_bytes;
  std::optional<std::uint64_t> peak_vram_bytes;
  string_list lanes;
  std::int64_t created_ms = 0;
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
  std::int64_t stop_requested_ms = 0;  ///< when a stop (cancel) was requested; 0 = none
  std::int64_t yield_requested_ms = 0; ///< when the coordinator asked it to yield; 0 = never
  std::string detail;                  ///< the node's words on how it ended ("" = none)
  /// Why the coordinator asked it to stop: "" (it was not), cancel, yield
  /// (a preemption whose grace ran out), or fence (no connection of its node
  /// took the start order in time: it is given up once the node takes the stop).
  std::string stop_cause;
  std::int64_t unknown_since_ms = 0; ///< when its node was found down (state unknown); 0 = not
};
template <class F>
void fields(F&& f, allocation_info& x) {
  f("id", x.id), f("job", x.job), f("node", x.node), f("state", x.state), f("attempt", x.attempt),
      f("reason", x.reason), f("exit_code", x.exit_code), f("signal", x.signal),
      f("peak_ram_bytes", x.peak_ram_bytes), f("peak_vram_bytes", x.peak_vram_bytes),
      f("lanes", x.lanes), f("created_ms", x.created_ms), f("started_ms", x.started_ms),
      f("finished_ms", x.finished_ms), f("stop_requested_ms", x.stop_requested_ms),
      f("yield_requested_ms", x.yield_requested_ms), f("detail", x.detail),
      f("stop_cause", x.stop_cause), f("unknown_since_ms", x.unknown_since_ms);
}

/// One GPU lane of a node, as the node reports it.
struct lane_info {
  std::string name;                  ///< gpu0, gpu1, ...
  std::optional<std::int64_t> index; ///< CUDA device index (absent on macOS)
  std::string uuid;
  std::uint64_t vram_total_bytes = 0;
  std::uint64_t vram_used_bytes = 0;    ///< by everything, cq's jobs included
  std::uint64_t vram_outside_bytes = 0; ///< by processes that are not cq's
};
template <class F>
void fields(F&& f, lane_info& x) {
  f("name", x.name), f("index", x.index), f("uuid", x.uuid),
      f("vram_total_bytes", x.vram_total_bytes), f("vram_used_bytes", x.vram_used_bytes),
      f("vram_outside_bytes", x.vram_outside_bytes);
}

/// A hold (Attention): a lane, or the whole node (lane ""), that cq could not
/// clean up safely. It stays until a person releases this exact id.
struct hold_info {
  std::string id;         ///< fresh random id
  std::string lane;       ///< "" = the whole node
  std::string allocation; ///< the allocation whose cleanup failed
  std::string reason;     ///< what could not be confirmed (pids, ...)
  std::int64_t at_ms = 0;
};
template <class F>
void fields(F&& f, hold_info& x) {
  f("id", x.id), f("lane", x.lane), f("allocation", x.allocation), f("reason", x.reason),
      f("at_ms", x.at_ms);
}

/// A latched kernel GPU fault (KERNEL-FAULT.json on the node).
struct fault_info {
  std::int64_t xid = 0;
  std::string device;  ///< PCI id or GPU name from the kernel line
  std::string message; ///< the kernel log line
  std::int64_t at_ms = 0;
};
template <class F>
void fields(F&& f, fault_info& x) {
  f("xid", x.xid), f("device", x.device), f("message", x.message), f("at_ms", x.at_ms);
}

/// What a running allocation uses now (heartbeat telemetry).
struct alloc_usage {
  std::string allocation;
  std::uint64_t ram_bytes = 0;
  std::uint64_t vram_bytes = 0;
};
template <class F>
void fields(F&& f, alloc_usage& x) {
  f("allocation", x.allocation), f("ram_bytes", x.ram_bytes), f("vram_bytes", x.vram_bytes);
}

/// A GPU process that is not cq's.
struct gpu_process {
  std::int64_t pid = 0;
  std::string lane;
  std::uint64_t vram_bytes = 0;
  std::string name;
};
template <class F>
void fields(F&& f, gpu_process& x) {
  f("pid", x.pid), f("lane", x.lane), f("vram_bytes", x.vram_bytes), f("name", x.name);
}

/// A node as reported to readers.
struct node_info {
  std::string name;
  std::string state;           ///< pending|approved
  bool enabled = true;         ///< a disabled node finishes what runs and gets no new work
  std::string disabled_reason; ///< why, and by whom (cq node disable --reason)
  bool online = false;         ///< heartbeat fresh
  bool down = false;           ///< no heartbeat for the node timeout: its allocations are unknown
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t mem_available_bytes = 0;
  std::uint64_t cpus = 0;
  std::uint64_t running = 0; ///< live allocations
  std::int64_t last_heartbeat_ms = 0;
  std::uint64_t ram_reserve_bytes = 0; ///< kept back from jobs: allocatable = total - reserve
  std::uint64_t ram_floor_bytes = 0;   ///< node's MemAvailable floor
  std::optional<std::uint64_t> vram_cap_bytes;
  std::vector<lane_info> lanes;
  std::string mem_cap_mode; ///< cgroup_v2|cgroup_v1|watchdog ("" = not reported)
  std::optional<fault_info> fault;
  std::vector<hold_info> holds;
  std::vector<gpu_process> outside_gpu_processes;
  string_list busy_probes; ///< GPU lock probe paths held by outside processes
  /// Identities the node maps to local users (run-as); absent: every
  /// identity's jobs run as the node daemon's user.
  std::optional<string_list> run_as;
};
template <class F>
void fields(F&& f, node_info& x) {
  f("name", x.name), f("state", x.state), f("enabled", x.enabled),
      f("disabled_reason", x.disabled_reason), f("online", x.online), f("down", x.down),
      f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("running", x.running), f("last_heartbeat_ms", x.last_heartbeat_ms),
      f("ram_reserve_bytes", x.ram_reserve_bytes), f("ram_floor_bytes", x.ram_floor_bytes),
      f("vram_cap_bytes", x.vram_cap_bytes), f("lanes", x.lanes), f("mem_cap_mode", x.mem_cap_mode),
      f("fault", x.fault), f("holds", x.holds), f("outside_gpu_processes", x.outside_gpu_processes),
      f("busy_probes", x.busy_probes), f("run_as", x.run_as);
}

/// A one-job diagnostic grant (SPEC section 6, the compute-queue seed): job
/// `job`, queued and pinned to `node`, may start there while the node stays
/// disabled. Consumed when the job starts; revoked when it is cancelled.
struct grant_info {
  std::string node;
  std::string job;
  std::string reason;
  std::string who; ///< the Owner who granted it
  std::int64_t created_ms = 0;
  std::string state; ///< active|consumed|revoked
  std::int64_t ended_ms = 0;
};
template <class F>
void fields(F&& f, grant_info& x) {
  f("node", x.node), f("job", x.job), f("reason", x.reason), f("who", x.who),
      f("created_ms", x.created_ms), f("state", x.state), f("ended_ms", x.ended_ms);
}

} // namespace cq::bus
