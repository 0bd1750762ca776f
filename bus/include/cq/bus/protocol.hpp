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

/// Bounds applied to every frame from the network.
struct limits {
  static constexpr std::size_t frame_bytes = 8 << 20;       ///< ZMQ_MAXMSGSIZE on every socket.
  static constexpr std::size_t string_bytes = 4 << 20;      ///< longest string (log chunks).
  static constexpr std::size_t array_items = 65536;         ///< longest array.
  static constexpr std::size_t map_items = 4096;            ///< largest map.
  static constexpr std::size_t depth = 8;                   ///< deepest nesting.
  static constexpr std::size_t name_bytes = 128;            ///< job/node names.
  static constexpr std::size_t arg_bytes = 128 << 10;       ///< one argv element or env value.
  static constexpr std::size_t argv_items = 4096;           ///< argv length and env entries.
  static constexpr std::uint32_t log_chunk_bytes = 1 << 20; ///< largest log read.
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
  std::string name;                       ///< display name; empty = derived from argv[0]
  string_list argv;                       ///< program and arguments, no shell
  std::string cwd;                        ///< absolute working directory on the node
  env_map env;                            ///< the complete environment (nothing inherited)
  std::optional<std::uint64_t> ram_bytes; ///< hard RAM cap
  std::optional<std::string> node;        ///< pinned node name
};
template <class F>
void fields(F&& f, job_spec& x) {
  f("name", x.name), f("argv", x.argv), f("cwd", x.cwd), f("env", x.env),
      f("ram_bytes", x.ram_bytes), f("node", x.node);
}

/// A job as reported to readers. Times are milliseconds since the Unix epoch, 0 = not yet.
struct job_info {
  std::string id;
  std::string name;
  std::string owner;  ///< identity that submitted it
  std::string state;  ///< queued|starting|running|stopping|succeeded|failed|cancelled
  std::string reason; ///< why it failed or was cancelled ("" while live or on success)
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
};
template <class F>
void fields(F&& f, job_info& x) {
  f("id", x.id), f("name", x.name), f("owner", x.owner), f("state", x.state), f("reason", x.reason),
      f("argv", x.argv), f("cwd", x.cwd), f("ram_bytes", x.ram_bytes),
      f("pinned_node", x.pinned_node), f("node", x.node), f("allocation", x.allocation),
      f("attempt", x.attempt), f("exit_code", x.exit_code), f("signal", x.signal),
      f("submitted_ms", x.submitted_ms), f("started_ms", x.started_ms),
      f("finished_ms", x.finished_ms);
}

/// One attempt of a job on one node.
struct allocation_info {
  std::string id;
  std::string job;
  std::string node;
  std::string state; ///< starting|running|stopping|finished
  std::uint64_t attempt = 0;
  std::string reason;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::optional<std::uint64_t> peak_ram_bytes;
  std::int64_t created_ms = 0;
  std::int64_t started_ms = 0;
  std::int64_t finished_ms = 0;
};
template <class F>
void fields(F&& f, allocation_info& x) {
  f("id", x.id), f("job", x.job), f("node", x.node), f("state", x.state), f("attempt", x.attempt),
      f("reason", x.reason), f("exit_code", x.exit_code), f("signal", x.signal),
      f("peak_ram_bytes", x.peak_ram_bytes), f("created_ms", x.created_ms),
      f("started_ms", x.started_ms), f("finished_ms", x.finished_ms);
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
};
template <class F>
void fields(F&& f, node_info& x) {
  f("name", x.name), f("state", x.state), f("online", x.online),
      f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("running", x.running), f("last_heartbeat_ms", x.last_heartbeat_ms);
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

struct ls_req {
  static constexpr std::string_view op = "ls";
  bool all = false; ///< include terminal jobs
};
template <class F>
void fields(F&& f, ls_req& x) {
  f("all", x.all);
}

struct ls_rep {
  std::vector<job_info> jobs;
};
template <class F>
void fields(F&& f, ls_rep& x) {
  f("jobs", x.jobs);
}

struct show_req {
  static constexpr std::string_view op = "show";
  std::string job;
};
template <class F>
void fields(F&& f, show_req& x) {
  f("job", x.job);
}

struct show_rep {
  job_info job;
  std::vector<allocation_info> allocations;
};
template <class F>
void fields(F&& f, show_rep& x) {
  f("job", x.job), f("allocations", x.allocations);
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

struct node_invite_req {
  static constexpr std::string_view op = "node_invite";
  std::string name;
};
template <class F>
void fields(F&& f, node_invite_req& x) {
  f("name", x.name);
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
  string_list allocations; ///< live allocations on the node
};
template <class F>
void fields(F&& f, heartbeat_req& x) {
  f("mem_total_bytes", x.mem_total_bytes), f("mem_available_bytes", x.mem_available_bytes),
      f("cpus", x.cpus), f("allocations", x.allocations);
}

struct heartbeat_rep {
  bool approved = false;
};
template <class F>
void fields(F&& f, heartbeat_rep& x) {
  f("approved", x.approved);
}

/// A persisted node report (kind started|exited), re-sent until acknowledged.
struct report_req {
  static constexpr std::string_view op = "report";
  std::uint64_t seq = 0; ///< node-local sequence number of the report
  std::string kind;      ///< started|exited
  std::string allocation;
  std::string job;
  std::optional<std::int64_t> exit_code; ///< exited: the exit status (125 = never started)
  std::optional<std::int64_t> signal;    ///< exited: the terminating signal
  std::string reason;                    ///< exited: "" or launch_failed|cancelled
  std::optional<std::uint64_t> peak_ram_bytes;
  std::uint64_t wall_ms = 0;
  std::int64_t at_ms = 0; ///< node clock when it happened
};
template <class F>
void fields(F&& f, report_req& x) {
  f("seq", x.seq), f("kind", x.kind), f("allocation", x.allocation), f("job", x.job),
      f("exit_code", x.exit_code), f("signal", x.signal), f("reason", x.reason),
      f("peak_ram_bytes", x.peak_ram_bytes), f("wall_ms", x.wall_ms), f("at_ms", x.at_ms);
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
};
template <class F>
void fields(F&& f, start_order& x) {
  f("allocation", x.allocation), f("job", x.job), f("attempt", x.attempt), f("argv", x.argv),
      f("cwd", x.cwd), f("env", x.env), f("ram_bytes", x.ram_bytes);
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

struct log_chunk {
  std::string data;
  std::uint64_t next_offset = 0;
  bool eof = false;
};
template <class F>
void fields(F&& f, log_chunk& x) {
  f("data", x.data), f("next_offset", x.next_offset), f("eof", x.eof);
}

/// Empty reply body (acknowledgements of orders).
struct empty_rep {};
template <class F>
void fields(F&&, empty_rep&) {}

/// Every request the coordinator accepts, decoded by op.
using coordinator_request =
    std::variant<submit_req, ls_req, show_req, logs_req, cancel_req, node_invite_req,
                 node_approve_req, node_ls_req, node_join_req, heartbeat_req, report_req>;

/// Every order a node accepts, decoded by op.
using node_order = std::variant<start_order, stop_order, read_log_order>;

} // namespace cq::bus
