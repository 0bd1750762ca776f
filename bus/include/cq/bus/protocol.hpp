#pragma once
// The cq wire protocol: every message that crosses a socket, as plain structs.
//
// A frame is one msgpack map (the envelope):
//   request: {v: 1, id: u64, op: str, token: str, body: map}
//   reply:   {v: 1, id: u64, op: "reply", ok: true, body: map}
//            {v: 1, id: u64, op: "reply", ok: false, error: {code: u64, message: str}}
// `id` is chosen by the sender of a request and echoed by its reply. Orders
// from the coordinator to a node are requests too (no token: the node only
// accepts orders on the connection it authenticated itself).
//
// Each struct lists its fields once, in `fields()`; the codec (codec.cpp), the
// CLI's JSON output and the tests walk that list. Invariants of the schema:
//  1. A field of type std::optional may be absent; every other field is required.
//  2. Unknown keys are refused (a typo must not be silently ignored).
//  3. Sizes and lengths are bounded by `limits` below before any actor sees them.
// This header must stay free of msgpack, ZeroMQ and CAF.

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
/// reported its start), stopping (a stop is in flight), finished.
enum class alloc_state : std::uint8_t { starting, running, stopping, finished };

/// Why a job or an allocation ended the way it did, or why a node stopped
/// it: none ("": ran to its own end, or still live) or one of the names below.
/// Job reasons: cancelled, launch_failed, timeout, oom, vram_cap, signal,
/// exit_code, dependency_failed. Allocation and node-report reasons add
/// fault, checkpointed, refused and lost (see report_req).
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
  /// Largest job spec, as encoded on the wire (argv, cwd, environment and the
  /// rest). Everything a start order adds to a spec (ids, lanes, numbers) is
  /// bounded by start_order_extra_bytes, so a start order always fits a frame.
  static constexpr std::size_t spec_bytes = 1 << 20;
  static constexpr std::size_t start_order_extra_bytes = 64 << 10;
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
};
template <class F>
void fields(F&& f, job_spec& x) {
  f("name", x.name), f("argv", x.argv), f("cwd", x.cwd), f("env", x.env),
      f("ram_bytes", x.ram_bytes), f("node", x.node), f("priority", x.priority), f("gpus", x.gpus),
      f("vram_bytes", x.vram_bytes), f("cpus", x.cpus), f("est_ms", x.est_ms),
      f("timeout_ms", x.timeout_ms), f("after", x.after), f("profile", x.profile),
      f("ram_floor_bytes", x.ram_floor_bytes), f("ram_start_min_bytes", x.ram_start_min_bytes),
      f("preempt", x.preempt);
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
      f("effective_est_ms", x.effective_est_ms), f("lanes", x.lanes);
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
};
template <class F>
void fields(F&& f, allocation_info& x) {
  f("id", x.id), f("job", x.job), f("node", x.node), f("state", x.state), f("attempt", x.attempt),
      f("reason", x.reason), f("exit_code", x.exit_code), f("signal", x.signal),
      f("peak_ram_bytes", x.peak_ram_bytes), f("peak_vram_bytes", x.peak_vram_bytes),
      f("lanes", x.lanes), f("created_ms", x.created_ms), f("started_ms", x.started_ms),
      f("finished_ms", x.finished_ms), f("stop_requested_ms", x.stop_requested_ms),
      f("yield_requested_ms", x.yield_requested_ms), f("detail", x.detail);
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
  std::string state;   ///< pending|approved
  bool online = false; ///< heartbeat fresh
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
};
template <class F>
void fields(F&& f, node_info& x) {
  f("name", x.name), f("state", x.state), f("online", x.online),
      f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("running", x.running), f("last_heartbeat_ms", x.last_heartbeat_ms),
      f("ram_reserve_bytes", x.ram_reserve_bytes), f("ram_floor_bytes", x.ram_floor_bytes),
      f("vram_cap_bytes", x.vram_cap_bytes), f("lanes", x.lanes), f("mem_cap_mode", x.mem_cap_mode),
      f("fault", x.fault), f("holds", x.holds), f("outside_gpu_processes", x.outside_gpu_processes),
      f("busy_probes", x.busy_probes);
}

// ---- client -> coordinator --------------------------------------------------

struct submit_req {
  static constexpr std::string_view op = "submit";
  job_spec spec;
};
template <class F>
void fields(F&& f, submit_req& x) {
  f("spec", x.spec);
}

struct submit_rep {
  job_info job;
};
template <class F>
void fields(F&& f, submit_rep& x) {
  f("job", x.job);
}

/// One page of the job listing, in submission order. A page holds at most
/// `limit` jobs and at most limits::page_bytes of them; `next_cursor` in the
/// reply continues the listing where the page ended.
struct ls_req {
  static constexpr std::string_view op = "ls";
  bool all = false;                    ///< include terminal jobs
  std::optional<std::uint64_t> limit;  ///< at most this many jobs in this page
  std::optional<std::uint64_t> cursor; ///< continue after this position (a reply's next_cursor)
};
template <class F>
void fields(F&& f, ls_req& x) {
  f("all", x.all), f("limit", x.limit), f("cursor", x.cursor);
}

struct ls_rep {
  std::vector<job_info> jobs;         ///< matching jobs in submission order, from the cursor on
  std::optional<std::uint64_t> total; ///< how many jobs match in all (every page)
  std::optional<std::uint64_t> next_cursor; ///< more jobs follow: ask again with this cursor
};
template <class F>
void fields(F&& f, ls_rep& x) {
  f("jobs", x.jobs), f("total", x.total), f("next_cursor", x.next_cursor);
}

struct show_req {
  static constexpr std::string_view op = "show";
  std::string job;
};
template <class F>
void fields(F&& f, show_req& x) {
  f("job", x.job);
}

/// The most allocations a show reply lists (the latest ones), so it fits a frame.
inline constexpr std::size_t show_max_allocations = 1000;

struct show_rep {
  job_info job;
  std::vector<allocation_info> allocations; ///< the latest show_max_allocations, oldest first
  string_list waiting; ///< for a queued job: why it is not running, one line per cause
  std::optional<std::uint64_t> allocations_omitted; ///< earlier allocations not listed
};
template <class F>
void fields(F&& f, show_rep& x) {
  f("job", x.job), f("allocations", x.allocations), f("waiting", x.waiting),
      f("allocations_omitted", x.allocations_omitted);
}

struct logs_req {
  static constexpr std::string_view op = "logs";
  std::string job;
  std::uint64_t offset = 0;              ///< byte offset into the allocation's output.log
  std::uint64_t max_bytes = 0;           ///< at most limits::log_chunk_bytes
  std::optional<std::string> allocation; ///< default: the job's latest allocation
};
template <class F>
void fields(F&& f, logs_req& x) {
  f("job", x.job), f("offset", x.offset), f("max_bytes", x.max_bytes),
      f("allocation", x.allocation);
}

struct logs_rep {
  std::string allocation; ///< "" when the job never got one
  std::string data;
  std::uint64_t next_offset = 0;
  bool eof = false;      ///< data ends at the current end of the file
  bool terminal = false; ///< the job is terminal: no more output will come
};
template <class F>
void fields(F&& f, logs_rep& x) {
  f("allocation", x.allocation), f("data", x.data), f("next_offset", x.next_offset),
      f("eof", x.eof), f("terminal", x.terminal);
}

struct cancel_req {
  static constexpr std::string_view op = "cancel";
  std::string job;
};
template <class F>
void fields(F&& f, cancel_req& x) {
  f("job", x.job);
}

struct cancel_rep {
  job_info job;
};
template <class F>
void fields(F&& f, cancel_rep& x) {
  f("job", x.job);
}

/// Moves a job in the serving order (SPEC section 9). `placement` is one of
/// front|back|before|after, or "" for --priority alone; before/after need `target`.
struct move_req {
  static constexpr std::string_view op = "move";
  std::string job;
  std::string placement;
  std::optional<std::string> target;
  std::optional<std::string> priority;
};
template <class F>
void fields(F&& f, move_req& x) {
  f("job", x.job), f("placement", x.placement), f("target", x.target), f("priority", x.priority);
}

struct move_rep {
  job_info job;
};
template <class F>
void fields(F&& f, move_rep& x) {
  f("job", x.job);
}

/// What earlier runs sharing a profile key measured.
struct profile_info {
  std::string key;
  std::uint64_t runs = 0;            ///< finished allocations measured
  std::uint64_t ram_bytes = 0;       ///< effective RAM derived (percentile + margin); 0 = none
  std::uint64_t peak_ram_bytes = 0;  ///< largest measured peak
  std::uint64_t peak_vram_bytes = 0; ///< largest measured VRAM peak
  std::uint64_t est_ms = 0;          ///< wall time derived (percentile)
  std::int64_t updated_ms = 0;
};
template <class F>
void fields(F&& f, profile_info& x) {
  f("key", x.key), f("runs", x.runs), f("ram_bytes", x.ram_bytes),
      f("peak_ram_bytes", x.peak_ram_bytes), f("peak_vram_bytes", x.peak_vram_bytes),
      f("est_ms", x.est_ms), f("updated_ms", x.updated_ms);
}

struct profile_ls_req {
  static constexpr std::string_view op = "profile_ls";
};
template <class F>
void fields(F&&, profile_ls_req&) {}

struct profile_ls_rep {
  std::vector<profile_info> profiles;
};
template <class F>
void fields(F&& f, profile_ls_rep& x) {
  f("profiles", x.profiles);
}

/// Releases a hold by its exact id (after a person checked the machine).
struct release_req {
  static constexpr std::string_view op = "release";
  std::string hold;
};
template <class F>
void fields(F&& f, release_req& x) {
  f("hold", x.hold);
}

/// Owner only: clears a node's latched kernel GPU fault; the node archives the file.
struct node_clear_fault_req {
  static constexpr std::string_view op = "node_clear_fault";
  std::string name;
  std::string reason;
};
template <class F>
void fields(F&& f, node_clear_fault_req& x) {
  f("name", x.name), f("reason", x.reason);
}

/// A one-time join code for node `name`. A name that already joined is
/// refused (already_exists) unless `replace`: then its token is revoked at
/// once (the daemon behind it is refused from its next call) and the node is
/// pending approval again.
struct node_invite_req {
  static constexpr std::string_view op = "node_invite";
  std::string name;
  std::optional<bool> replace;
};
template <class F>
void fields(F&& f, node_invite_req& x) {
  f("name", x.name), f("replace", x.replace);
}

struct node_invite_rep {
  std::string code;
  std::int64_t expires_ms = 0;
};
template <class F>
void fields(F&& f, node_invite_rep& x) {
  f("code", x.code), f("expires_ms", x.expires_ms);
}

struct node_approve_req {
  static constexpr std::string_view op = "node_approve";
  std::string name;
};
template <class F>
void fields(F&& f, node_approve_req& x) {
  f("name", x.name);
}

struct node_rep {
  node_info node;
};
template <class F>
void fields(F&& f, node_rep& x) {
  f("node", x.node);
}

struct node_ls_req {
  static constexpr std::string_view op = "node_ls";
};
template <class F>
void fields(F&&, node_ls_req&) {}

struct node_ls_rep {
  std::vector<node_info> nodes;
};
template <class F>
void fields(F&& f, node_ls_rep& x) {
  f("nodes", x.nodes);
}

// ---- node -> coordinator ----------------------------------------------------

/// Trades a one-time invite code for the node's token. Sent without a token.
struct node_join_req {
  static constexpr std::string_view op = "node_join";
  std::string name;
  std::string code;
};
template <class F>
void fields(F&& f, node_join_req& x) {
  f("name", x.name), f("code", x.code);
}

struct node_join_rep {
  std::string token;
};
template <class F>
void fields(F&& f, node_join_rep& x) {
  f("token", x.token);
}

struct heartbeat_req {
  static constexpr std::string_view op = "heartbeat";
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t mem_available_bytes = 0;
  std::uint64_t cpus = 0;
  string_list allocations;                        ///< live allocations on the node
  std::optional<std::vector<lane_info>> lanes;    ///< GPU lanes (absent = none detected)
  std::optional<std::uint64_t> ram_reserve_bytes; ///< node config: RAM kept back from jobs
  std::optional<std::uint64_t> ram_floor_bytes;   ///< node config: MemAvailable floor
  std::optional<std::uint64_t> vram_cap_bytes;    ///< node config: largest VRAM per job
  std::optional<std::string> mem_cap_mode;        ///< cgroup_v2|cgroup_v1|watchdog
  std::optional<fault_info> fault;                ///< latched kernel GPU fault
  std::optional<std::vector<hold_info>> holds;    ///< current holds
  std::optional<std::vector<alloc_usage>> usage;  ///< per running allocation
  std::optional<std::vector<gpu_process>> outside_gpu_processes;
  std::optional<string_list> busy_probes; ///< lock probes held by outsiders
  /// The identity of the node's state dir (created there at its first start).
  /// A new connection with the same id is the same daemon restarted on its
  /// locked state dir and takes over at once; another id is a second daemon.
  std::optional<std::string> daemon;
  /// The node's clock: its daemon's start (wall ms) and the heartbeat's
  /// number since then. Acknowledgements and reports carry the latest pair
  /// sent before them, so the coordinator reconciles an allocation only with a
  /// heartbeat built after the node took it, whatever order frames arrive in.
  std::optional<std::int64_t> boot_ms;
  std::optional<std::uint64_t> beat;
};
template <class F>
void fields(F&& f, heartbeat_req& x) {
  f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("allocations", x.allocations), f("lanes", x.lanes),
      f("ram_reserve_bytes", x.ram_reserve_bytes), f("ram_floor_bytes", x.ram_floor_bytes),
      f("vram_cap_bytes", x.vram_cap_bytes), f("mem_cap_mode", x.mem_cap_mode), f("fault", x.fault),
      f("holds", x.holds), f("usage", x.usage), f("outside_gpu_processes", x.outside_gpu_processes),
      f("busy_probes", x.busy_probes), f("daemon", x.daemon), f("boot_ms", x.boot_ms),
      f("beat", x.beat);
}

struct heartbeat_rep {
  bool approved = false;
};
template <class F>
void fields(F&& f, heartbeat_rep& x) {
  f("approved", x.approved);
}

/// A persisted node report (kind started|exited), re-sent until acknowledged.
/// An exited report's reason: "" (ran to its own end), launch_failed (rc 125,
/// never started), cancelled (stopped by an order, or stopped before it
/// started), timeout, oom (memory cap hit: cgroup OOM kill or watchdog kill),
/// vram_cap (over its VRAM cap), fault (stopped because a kernel GPU fault
/// latched), checkpointed (exit 6 after a yield order), refused (never
/// started for a reason of the node's, not the job's: a latched fault, a busy
/// GPU lock), lost (the node lost track of it: its fate is unknown).
struct report_req {
  static constexpr std::string_view op = "report";
  std::uint64_t seq = 0; ///< node-local sequence number of the report
  std::string kind;      ///< started|exited
  std::string allocation;
  std::string job;
  std::optional<std::int64_t> exit_code;  ///< exited: the exit status (125 = never started)
  std::optional<std::int64_t> signal;     ///< exited: the terminating signal
  bus::reason reason = bus::reason::none; ///< exited: none or why (see above)
  std::optional<std::uint64_t> peak_ram_bytes;
  std::optional<std::uint64_t> peak_vram_bytes;
  std::uint64_t wall_ms = 0;
  std::int64_t at_ms = 0;              ///< node clock when it happened
  std::optional<std::string> detail;   ///< exited: the node's words (why a launch failed...)
  std::optional<std::int64_t> boot_ms; ///< the node's clock when sent (heartbeat_req)
  std::optional<std::uint64_t> beat;
};
template <class F>
void fields(F&& f, report_req& x) {
  f("seq", x.seq), f("kind", x.kind), f("allocation", x.allocation), f("job", x.job),
      f("exit_code", x.exit_code), f("signal", x.signal), f("reason", x.reason),
      f("peak_ram_bytes", x.peak_ram_bytes), f("peak_vram_bytes", x.peak_vram_bytes),
      f("wall_ms", x.wall_ms), f("at_ms", x.at_ms), f("detail", x.detail), f("boot_ms", x.boot_ms),
      f("beat", x.beat);
}

struct report_rep {
  std::uint64_t seq = 0;
};
template <class F>
void fields(F&& f, report_rep& x) {
  f("seq", x.seq);
}

// ---- coordinator -> node (orders) -------------------------------------------

struct start_order {
  static constexpr std::string_view op = "start";
  std::string allocation;
  std::string job;
  std::uint64_t attempt = 0;
  string_list argv;
  std::string cwd;
  env_map env;
  std::optional<std::uint64_t> ram_bytes;
  std::optional<string_list> lanes;                 ///< GPU lanes held (CUDA_VISIBLE_DEVICES)
  std::optional<std::uint64_t> ram_floor_bytes;     ///< combined floor for pre-launch admission
  std::optional<std::uint64_t> ram_start_min_bytes; ///< pre-launch MemAvailable minimum
  std::optional<std::uint64_t> vram_bytes;          ///< VRAM cap per lane
  std::optional<std::uint64_t> timeout_ms;          ///< hard wall-time limit
  std::optional<bool> resume; ///< CQ_RESUME=1: an earlier attempt checkpointed
};
template <class F>
void fields(F&& f, start_order& x) {
  f("allocation", x.allocation), f("job", x.job), f("attempt", x.attempt), f("argv", x.argv),
      f("cwd", x.cwd), f("env", x.env), f("ram_bytes", x.ram_bytes), f("lanes", x.lanes),
      f("ram_floor_bytes", x.ram_floor_bytes), f("ram_start_min_bytes", x.ram_start_min_bytes),
      f("vram_bytes", x.vram_bytes), f("timeout_ms", x.timeout_ms), f("resume", x.resume);
}

struct stop_order {
  static constexpr std::string_view op = "stop";
  std::string allocation;
  std::uint64_t grace_ms = 0;
};
template <class F>
void fields(F&& f, stop_order& x) {
  f("allocation", x.allocation), f("grace_ms", x.grace_ms);
}

struct read_log_order {
  static constexpr std::string_view op = "read_log";
  std::string allocation;
  std::uint64_t offset = 0;
  std::uint64_t max_bytes = 0;
};
template <class F>
void fields(F&& f, read_log_order& x) {
  f("allocation", x.allocation), f("offset", x.offset), f("max_bytes", x.max_bytes);
}

/// Asks a running allocation to yield: the node creates its yield file.
struct yield_order {
  static constexpr std::string_view op = "yield";
  std::string allocation;
};
template <class F>
void fields(F&& f, yield_order& x) {
  f("allocation", x.allocation);
}

/// Removes the hold with exactly this id; not_found when the node has no such hold.
struct release_order {
  static constexpr std::string_view op = "release";
  std::string hold;
};
template <class F>
void fields(F&& f, release_order& x) {
  f("hold", x.hold);
}

/// Clears the latched fault: the node archives KERNEL-FAULT.json with the reason.
struct clear_fault_order {
  static constexpr std::string_view op = "clear_fault";
  std::string reason;
  std::string by; ///< the identity that cleared it
};
template <class F>
void fields(F&& f, clear_fault_order& x) {
  f("reason", x.reason), f("by", x.by);
}

struct log_chunk {
  std::string data;
  std::uint64_t next_offset = 0;
  bool eof = false;
};
template <class F>
void fields(F&& f, log_chunk& x) {
  f("data", x.data), f("next_offset", x.next_offset), f("eof", x.eof);
}

/// Empty reply body.
struct empty_rep {};
template <class F>
void fields(F&&, empty_rep&) {}

/// A node's acknowledgement of an order: the node's clock when it took it
/// (see heartbeat_req::beat).
struct order_ack {
  std::optional<std::int64_t> boot_ms;
  std::optional<std::uint64_t> beat;
};
template <class F>
void fields(F&& f, order_ack& x) {
  f("boot_ms", x.boot_ms), f("beat", x.beat);
}

/// Every request the coordinator accepts, decoded by op.
using coordinator_request =
    std::variant<submit_req, ls_req, show_req, logs_req, cancel_req, move_req, profile_ls_req,
                 release_req, node_clear_fault_req, node_invite_req, node_approve_req, node_ls_req,
                 node_join_req, heartbeat_req, report_req>;

/// Every order a node accepts, decoded by op.
using node_order = std::variant<start_order, stop_order, read_log_order, yield_order, release_order,
                                clear_fault_order>;

} // namespace cq::bus
