#pragma once
// The node protocol: what a node sends the coordinator (heartbeats, reports)
// and the orders the coordinator sends a node (see protocol.hpp for the
// envelope). Free of msgpack, ZeroMQ and CAF.

#include "cq/bus/schema.hpp"

namespace cq::bus {

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
  /// The identities this node maps to local UNIX users (run-as): when
  /// present, it runs only their jobs.
  std::optional<string_list> run_as;
  /// The node's clock: its daemon's start (wall ms) and the heartbeat's
  /// number since then. Acknowledgements and reports carry the latest pair
  /// sent before them, so the coordinator reconciles an allocation only with a
  /// heartbeat built after the node took it, whatever order frames arrive in.
  std::optional<std::int64_t> boot_ms;
  std::optional<std::uint64_t> beat;
  /// The node's wall clock when it built the heartbeat (ms since the epoch):
  /// the coordinator learns the node's clock offset from it, and states a
  /// start order's expiry on the node's clock.
  std::optional<std::int64_t> wall_ms;
};
template <class F>
void fields(F&& f, heartbeat_req& x) {
  f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("allocations", x.allocations), f("lanes", x.lanes),
      f("ram_reserve_bytes", x.ram_reserve_bytes), f("ram_floor_bytes", x.ram_floor_bytes),
      f("vram_cap_bytes", x.vram_cap_bytes), f("mem_cap_mode", x.mem_cap_mode), f("fault", x.fault),
      f("holds", x.holds), f("usage", x.usage), f("outside_gpu_processes", x.outside_gpu_processes),
      f("busy_probes", x.busy_probes), f("daemon", x.daemon), f("boot_ms", x.boot_ms),
      f("beat", x.beat), f("run_as", x.run_as), f("wall_ms", x.wall_ms);
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
  std::optional<bool> resume;       ///< CQ_RESUME=1: an earlier attempt checkpointed
  std::optional<std::string> owner; ///< the identity that submitted it (run-as mapping)
  /// The node's wall clock (ms) after which the order must not launch: the
  /// coordinator gives an unacknowledged start up then (docs/adr/0023). A
  /// node that reads it later (it was paused, its socket held the order)
  /// ends the allocation refused without starting it.
  std::optional<std::int64_t> expires_ms;
  std::optional<std::string> name; ///< the job's name (CQ_JOB_NAME)
  /// How an earlier attempt ended, when that is why this one differs (an
  /// OOM under a cap cq chose): the node writes it as the first line of this
  /// attempt's output.
  std::optional<std::string> previous;
  /// cq submit --output: the pattern (output_pattern.hpp) the node expands
  /// for this attempt; cq-shim copies the output there as the job's user.
  std::optional<std::string> output;
  /// cq run --pty: cq-shim gives the workload a terminal and reads what is
  /// typed from the allocation's terminal FIFO (terminal_order).
  std::optional<bool> pty;
};
template <class F>
void fields(F&& f, start_order& x) {
  f("allocation", x.allocation), f("job", x.job), f("attempt", x.attempt), f("argv", x.argv),
      f("cwd", x.cwd), f("env", x.env), f("ram_bytes", x.ram_bytes), f("lanes", x.lanes),
      f("ram_floor_bytes", x.ram_floor_bytes), f("ram_start_min_bytes", x.ram_start_min_bytes),
      f("vram_bytes", x.vram_bytes), f("timeout_ms", x.timeout_ms), f("resume", x.resume),
      f("owner", x.owner), f("expires_ms", x.expires_ms), f("name", x.name),
      f("previous", x.previous), f("output", x.output), f("pty", x.pty);
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

/// What was typed into a --pty allocation's terminal, and its window size:
/// the node passes both to cq-shim, in order. unavailable when the terminal
/// is not open (not yet, or no longer) or is full (the sender tries again).
struct terminal_order {
  static constexpr std::string_view op = "write_terminal";
  std::string allocation;
  std::string data; ///< at most limits::terminal_input_bytes
  std::optional<std::uint64_t> rows;
  std::optional<std::uint64_t> cols;
};
template <class F>
void fields(F&& f, terminal_order& x) {
  f("allocation", x.allocation), f("data", x.data), f("rows", x.rows), f("cols", x.cols);
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

/// The coordinator forgot these finished jobs (its history's window or
/// bound, or `cq clean`): the node removes their allocations' directories and
/// their state dirs now, by the rules of its own [retention] sweep, rather
/// than a window later (ADR 0072). At most forget_order_items of each.
struct forget_order {
  static constexpr std::string_view op = "forget";
  string_list jobs;        ///< the jobs forgotten that ran here
  string_list allocations; ///< their allocations on this node
};
template <class F>
void fields(F&& f, forget_order& x) {
  f("jobs", x.jobs), f("allocations", x.allocations);
}
/// The most jobs, and allocations, one forget order names.
constexpr std::size_t forget_order_items = 1000;

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

} // namespace cq::bus
