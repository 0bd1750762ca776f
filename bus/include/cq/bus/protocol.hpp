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

#include "cq/bus/listing.hpp"
#include "cq/bus/node_protocol.hpp"
#include "cq/bus/schema.hpp"

#include <variant>

namespace cq::bus {

// ---- client -> coordinator --------------------------------------------------

/// `job_id` (a UUID chosen by the client) makes the submit idempotent: the
/// same id with the same canonical spec returns the stored job, even a
/// terminal one; another spec is job_conflict (SPEC section 9).
struct submit_req {
  static constexpr std::string_view op = "submit";
  job_spec spec;
  std::optional<std::string> job_id;
  /// Queue it even when no node could ever run it (one yet to join will):
  /// without it such a submit is refused, naming each node's reason.
  std::optional<bool> hold_for_node;
  /// Queued on hold (cq submit --hold): it waits until cq release lets it
  /// start, as after cq hold. Every task of an array is held.
  std::optional<bool> on_hold;
  /// An array (cq submit --array): one task per index, each a job of its own
  /// with CQ_ARRAY_ID and CQ_ARRAY_INDEX in its environment, all committed
  /// at once. The array's id is job_id (required); each task's id derives
  /// from it and the index, so a replay finds the same tasks.
  std::optional<std::vector<std::uint64_t>> array_indexes;
  std::optional<std::uint64_t> array_limit; ///< at most this many tasks hold allocations at once
  /// With array_indexes: task i runs array_argvs[i] instead of spec.argv
  /// (cq submit --from FILE: one command per line), sized by its own profile.
  std::optional<std::vector<string_list>> array_argvs;
};
template <class F>
void fields(F&& f, submit_req& x) {
  f("spec", x.spec), f("job_id", x.job_id), f("hold_for_node", x.hold_for_node),
      f("on_hold", x.on_hold), f("array_indexes", x.array_indexes), f("array_limit", x.array_limit),
      f("array_argvs", x.array_argvs);
}

struct show_req {
  static constexpr std::string_view op = "show";
  std::string job;
  /// Also the job's environment (cq retry), for its owner, operators and
  /// the Owner; the reply then has no waiting lines.
  std::optional<bool> env;
};
template <class F>
void fields(F&& f, show_req& x) {
  f("job", x.job), f("env", x.env);
}

/// The most allocations a show reply lists (the latest ones), so it fits a frame.
inline constexpr std::size_t show_max_allocations = 1000;

struct show_rep {
  job_info job;
  std::vector<allocation_info> allocations; ///< the latest show_max_allocations, oldest first
  string_list waiting; ///< for a queued job: why it is not running, one line per cause
  std::optional<std::uint64_t> allocations_omitted; ///< earlier allocations not listed
  std::optional<env_map> env; ///< the job's environment, when asked for (show_req::env)
};
template <class F>
void fields(F&& f, show_rep& x) {
  f("job", x.job), f("allocations", x.allocations), f("waiting", x.waiting),
      f("allocations_omitted", x.allocations_omitted), f("env", x.env);
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

/// cq run --pty: keys typed into the job's terminal (at most
/// limits::terminal_input_bytes) and, when the window changed, its size.
/// The job's owner only; unavailable while the terminal is not open yet or
/// is full: the caller sends the same bytes again.
struct terminal_req {
  static constexpr std::string_view op = "terminal";
  std::string job;
  std::string data;
  std::optional<std::uint64_t> rows;
  std::optional<std::uint64_t> cols;
};
template <class F>
void fields(F&& f, terminal_req& x) {
  f("job", x.job), f("data", x.data), f("rows", x.rows), f("cols", x.cols);
}

struct terminal_rep {
  std::string job; ///< the job's full id
};
template <class F>
void fields(F&& f, terminal_rep& x) {
  f("job", x.job);
}

/// `operation_id` (a UUID, on every request kind that has one) makes the
/// call idempotent (SPEC section 9): a replay returns the stored result and
/// applies nothing; the same id with other arguments is operation_conflict.
struct cancel_req {
  static constexpr std::string_view op = "cancel";
  std::string job;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, cancel_req& x) {
  f("job", x.job), f("operation_id", x.operation_id);
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
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, move_req& x) {
  f("job", x.job), f("placement", x.placement), f("target", x.target), f("priority", x.priority),
      f("operation_id", x.operation_id);
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

struct submit_rep {
  job_info job;
  /// Present when cq chose the RAM cap (no --ram): the profile it looked at
  /// (runs 0: none measured yet, so the default cap), for the submitter's
  /// "how was this sized" line.
  std::optional<profile_info> sizing;
  std::optional<std::uint64_t> array_size; ///< an array: how many tasks (`job` is the first)
  /// A dependency (--after) that had already ended without succeeding, and
  /// how it ended: the new job fails (dependency_failed) without running.
  std::optional<std::string> failed_after;
  std::optional<job_state> failed_after_state;
};
template <class F>
void fields(F&& f, submit_rep& x) {
  f("job", x.job), f("sizing", x.sizing), f("array_size", x.array_size),
      f("failed_after", x.failed_after), f("failed_after_state", x.failed_after_state);
}

struct profile_ls_req {
  static constexpr std::string_view op = "profile_ls";
};
template <class F>
void fields(F&&, profile_ls_req&) {}

/// Forgets one profile: the next job with its key is sized as if new (the
/// default cap). Replies with the profile as it was.
struct profile_rm_req {
  static constexpr std::string_view op = "profile_rm";
  std::string key;
};
template <class F>
void fields(F&& f, profile_rm_req& x) {
  f("key", x.key);
}

struct profile_ls_rep {
  std::vector<profile_info> profiles;
};
template <class F>
void fields(F&& f, profile_ls_rep& x) {
  f("profiles", x.profiles);
}

/// Owner and operator: forgets now the finished jobs that ended more than
/// `older_than_ms` ago (0: every finished job), as the history window would
/// later: their events, allocations and unused environments go too. With
/// `dry_run`, only counts them: nothing changes and nothing is audited.
struct clean_req {
  static constexpr std::string_view op = "clean";
  std::uint64_t older_than_ms = 0;
  std::optional<bool> dry_run; ///< sent only when true (an older coordinator refuses it)
};
template <class F>
void fields(F&& f, clean_req& x) {
  f("older_than_ms", x.older_than_ms);
  f("dry_run", x.dry_run);
}

struct clean_rep {
  std::uint64_t forgotten = 0; ///< finished jobs forgotten (with dry_run: that would be)
  std::optional<bool> dry_run; ///< true: a dry run's count (nothing was forgotten)
};
template <class F>
void fields(F&& f, clean_rep& x) {
  f("forgotten", x.forgotten);
  f("dry_run", x.dry_run);
}

/// Releases a hold by its exact id (after a person checked the machine).
struct release_req {
  static constexpr std::string_view op = "release";
  std::string hold;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, release_req& x) {
  f("hold", x.hold), f("operation_id", x.operation_id);
}

/// Owner only: clears a node's latched kernel GPU fault; the node archives the file.
struct node_clear_fault_req {
  static constexpr std::string_view op = "node_clear_fault";
  std::string name;
  std::string reason;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, node_clear_fault_req& x) {
  f("name", x.name), f("reason", x.reason), f("operation_id", x.operation_id);
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
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, node_approve_req& x) {
  f("name", x.name), f("operation_id", x.operation_id);
}

/// Lets a disabled node take new work again (Owner, Operator).
struct node_enable_req {
  static constexpr std::string_view op = "node_enable";
  std::string name;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, node_enable_req& x) {
  f("name", x.name), f("operation_id", x.operation_id);
}

/// A disabled node finishes what runs and gets no new work (Owner, Operator).
struct node_disable_req {
  static constexpr std::string_view op = "node_disable";
  std::string name;
  std::optional<std::string> reason;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, node_disable_req& x) {
  f("name", x.name), f("reason", x.reason), f("operation_id", x.operation_id);
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

/// Asks a running checkpointing job to yield now (not waiting for its lease
/// boundary): the node creates its yield file; an exit 6 within the grace
/// is a checkpoint.
struct preempt_req {
  static constexpr std::string_view op = "preempt";
  std::string job;
};
template <class F>
void fields(F&& f, preempt_req& x) {
  f("job", x.job);
}

struct preempt_rep {
  job_info job;
};
template <class F>
void fields(F&& f, preempt_rep& x) {
  f("job", x.job);
}

/// One event of a job's stream (SPEC section 8). `cursor` orders every event
/// of every job (it is the store's row id); `seq` counts from 1 per job.
struct event_info {
  std::uint64_t cursor = 0;
  std::string job;
  std::uint64_t seq = 0;
  std::string kind;
  std::int64_t at_ms = 0;
  std::string detail;
};
template <class F>
void fields(F&& f, event_info& x) {
  f("cursor", x.cursor), f("job", x.job), f("seq", x.seq), f("kind", x.kind), f("at_ms", x.at_ms),
      f("detail", x.detail);
}

/// Events after `cursor` (every job's, or only those of `jobs`; with `since`,
/// only those with a larger per-job seq), oldest first, at most `limit`
/// (default and maximum events_page). With `wait_ms`, a reply with no event
/// is held until one comes or wait_ms passes (at most events_wait_max_ms).
struct events_req {
  static constexpr std::string_view op = "events";
  string_list jobs;
  std::optional<std::uint64_t> cursor;
  std::optional<std::uint64_t> since;
  std::optional<std::uint64_t> limit;
  std::optional<std::uint64_t> wait_ms;
};
template <class F>
void fields(F&& f, events_req& x) {
  f("jobs", x.jobs), f("cursor", x.cursor), f("since", x.since), f("limit", x.limit),
      f("wait_ms", x.wait_ms);
}
inline constexpr std::uint64_t events_page = 1000;
inline constexpr std::uint64_t events_wait_max_ms = 60000;
inline constexpr std::size_t events_max_jobs = 1000;

struct events_rep {
  std::vector<event_info> events;
  std::uint64_t cursor = 0; ///< ask again with this cursor for what follows
};
template <class F>
void fields(F&& f, events_rep& x) {
  f("events", x.events), f("cursor", x.cursor);
}

/// Owner: grants job `job` (queued, attempt 0, never started, pinned to
/// exactly `name`) one start on the disabled node `name`, which has no
/// allocations. The node stays disabled.
struct node_diagnostic_req {
  static constexpr std::string_view op = "node_diagnostic";
  std::string name;
  std::string job;
  std::string reason;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, node_diagnostic_req& x) {
  f("name", x.name), f("job", x.job), f("reason", x.reason), f("operation_id", x.operation_id);
}

/// Owner: node `name`'s grant (its active one, else its latest).
struct node_diagnostic_show_req {
  static constexpr std::string_view op = "node_diagnostic_show";
  std::string name;
};
template <class F>
void fields(F&& f, node_diagnostic_show_req& x) {
  f("name", x.name);
}

struct grant_rep {
  std::optional<grant_info> grant; ///< absent: the node never had one
};
template <class F>
void fields(F&& f, grant_rep& x) {
  f("grant", x.grant);
}

/// A token as `token_ls` shows it (never the secret).
struct token_info {
  std::string name;
  std::string role;
  std::int64_t created_ms = 0;
  std::int64_t revoked_ms = 0; ///< 0 = valid
};
template <class F>
void fields(F&& f, token_info& x) {
  f("name", x.name), f("role", x.role), f("created_ms", x.created_ms),
      f("revoked_ms", x.revoked_ms);
}

/// Owner: a new token for identity `name` with role owner|operator|submitter
/// (nodes join with invite codes). The reply carries the secret, once.
struct token_add_req {
  static constexpr std::string_view op = "token_add";
  std::string name;
  std::string role;
};
template <class F>
void fields(F&& f, token_add_req& x) {
  f("name", x.name), f("role", x.role);
}

struct token_add_rep {
  token_info info;
  std::string token;
};
template <class F>
void fields(F&& f, token_add_rep& x) {
  f("info", x.info), f("token", x.token);
}

struct token_ls_req {
  static constexpr std::string_view op = "token_ls";
};
template <class F>
void fields(F&&, token_ls_req&) {}

struct token_ls_rep {
  std::vector<token_info> tokens;
};
template <class F>
void fields(F&& f, token_ls_rep& x) {
  f("tokens", x.tokens);
}

/// Keeps a queued job from starting (cq hold), or lets it start again
/// (release: cq release JOB). The reply is the job, as cancel's.
struct job_hold_req {
  static constexpr std::string_view op = "job_hold";
  std::string job;
  bool release = false;
  std::optional<std::string> operation_id;
};
template <class F>
void fields(F&& f, job_hold_req& x) {
  f("job", x.job), f("release", x.release), f("operation_id", x.operation_id);
}
using job_hold_rep = cancel_rep;

/// Anyone with a token: the identity and role the call's token stands for
/// (cq whoami, cq ls --mine).
struct whoami_req {
  static constexpr std::string_view op = "whoami";
};
template <class F>
void fields(F&&, whoami_req&) {}

struct whoami_rep {
  std::string name;
  std::string role;
};
template <class F>
void fields(F&& f, whoami_rep& x) {
  f("name", x.name), f("role", x.role);
}

/// Owner: revokes every valid token of identity `name`; it is refused from
/// its next call on.
struct token_revoke_req {
  static constexpr std::string_view op = "token_revoke";
  std::string name;
};
template <class F>
void fields(F&& f, token_revoke_req& x) {
  f("name", x.name);
}

/// One audited call.
struct audit_info {
  std::uint64_t id = 0;
  std::int64_t at_ms = 0;
  std::string who;
  std::string role;
  std::string op;
  std::string target;
  std::string args; ///< digest of the request's arguments
  std::string outcome;
};
template <class F>
void fields(F&& f, audit_info& x) {
  f("id", x.id), f("at_ms", x.at_ms), f("who", x.who), f("role", x.role), f("op", x.op),
      f("target", x.target), f("args", x.args), f("outcome", x.outcome);
}

/// Owner, Operator: audit rows after `cursor` (a row id), oldest first, at
/// most `limit` (default and maximum audit_page); filters match exactly.
struct audit_req {
  static constexpr std::string_view op = "audit";
  std::optional<std::uint64_t> cursor;
  std::optional<std::int64_t> since_ms;
  std::optional<std::string> who;
  std::optional<std::string> op_name;
  std::optional<std::string> target;
  std::optional<std::uint64_t> limit;
};
template <class F>
void fields(F&& f, audit_req& x) {
  f("cursor", x.cursor), f("since_ms", x.since_ms), f("who", x.who), f("op", x.op_name),
      f("target", x.target), f("limit", x.limit);
}
inline constexpr std::uint64_t audit_page = 1000;

struct audit_rep {
  std::vector<audit_info> rows;
  std::uint64_t cursor = 0; ///< ask again with this cursor for what follows
};
template <class F>
void fields(F&& f, audit_rep& x) {
  f("rows", x.rows), f("cursor", x.cursor);
}

/// Every request the coordinator accepts, decoded by op.
using coordinator_request =
    std::variant<submit_req, ls_req, show_req, logs_req, cancel_req, move_req, profile_ls_req,
                 profile_rm_req, release_req, node_clear_fault_req, node_invite_req,
                 node_approve_req, node_ls_req, node_join_req, heartbeat_req, report_req,
                 preempt_req, events_req, node_enable_req, node_disable_req, token_add_req,
                 token_ls_req, token_revoke_req, audit_req, node_diagnostic_req,
                 node_diagnostic_show_req, whoami_req, job_hold_req, terminal_req, clean_req>;

/// Every order a node accepts, decoded by op.
using node_order = std::variant<start_order, stop_order, read_log_order, yield_order, release_order,
                                clear_fault_order, terminal_order, forget_order>;

} // namespace cq::bus
