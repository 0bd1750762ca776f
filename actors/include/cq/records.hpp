#pragma once
// Change records: the rows the coordinator commits to SQLite. An actor builds
// records, the store actor commits them (grouped with whatever else arrived
// together), and only then does the actor apply the change in memory and
// reply. Recovery loads the same rows. No CAF, no SQLite here.

#include "cq/bus/protocol.hpp"

#include <memory>
#include <variant>
#include <vector>

namespace cq {

/// What a job asks of a node, in the figures placement plans with and the
/// node enforces: declared once, fixed at submit (effective figures), and
/// carried whole into the scheduler's queue entry and the placement policy's
/// job view.
struct job_resources {
  std::uint64_t ram_bytes = 0;  ///< effective RAM: the hard cap on the node
  std::uint64_t vram_bytes = 0; ///< per lane
  std::uint64_t gpus = 0;
  std::uint64_t cpus = 0;
  std::uint64_t ram_floor_bytes = 0;
  std::uint64_t ram_start_min_bytes = 0;
  std::int64_t est_ms = 0;  ///< effective estimate
  bool est_default = false; ///< est_ms is the default, not a figure of its own (a guess)
  std::optional<std::string> pinned_node;
  /// The identity it runs as: a node that maps identities to UNIX users
  /// (run-as) takes only jobs of the identities it maps.
  std::string owner;
  /// An array's tasks share a group; at most group_limit of them hold
  /// allocations at once (0 = no limit).
  std::string group;
  std::uint64_t group_limit = 0;
};

/// A job row: the reader view plus what only the node needs (environment).
///
/// Written whole when the job is submitted. Later writes of the same row
/// (state changes by the job actor) leave alone what never changes after
/// submission (argv, env, seq) and the serving order (priority, rank), which
/// only order_row changes, so that a job actor never needs to hold its
/// environment in memory and never overwrites a move it has not seen yet.
struct job_row {
  bus::job_info info;
  /// The environment, shared by the rows of one submit (an array's tasks
  /// have the same one); null is empty.
  std::shared_ptr<const bus::env_map> env;
  std::uint64_t seq = 0; ///< submission order: unique, breaks ties between equal ranks
  std::int64_t rank = 0; ///< order within the job's level (sparse; positions are derived)
  /// Digest of the canonical spec of a job submitted with a client job id
  /// ("" otherwise): a resubmit with that id must carry the same spec.
  std::string spec_digest;
};

/// A job's place in the serving order (a move, or a renumbered level).
struct order_row {
  std::string job;
  std::uint64_t seq = 0; ///< the job's (its row's key)
  std::string priority;  ///< high|medium|low
  std::int64_t rank = 0;
};

/// Measurements of finished allocations that share a profile key.
struct profile_row {
  std::string key;
  std::uint64_t runs = 0;
  /// The most recent samples (at most profile_samples), oldest first.
  std::vector<std::uint64_t> peak_ram_bytes;
  std::vector<std::uint64_t> peak_vram_bytes;
  std::vector<std::uint64_t> wall_ms;
  std::int64_t updated_ms = 0;
};
inline constexpr std::size_t profile_samples = 32;

struct node_row {
  std::string name;
  std::string state; ///< pending|approved
  std::int64_t created_ms = 0;
  bool enabled = true;         ///< false: no new work (cq node disable)
  std::string disabled_reason; ///< who disabled it and why
  /// The CURVE public key (Z85) its daemon joined with ("" = joined over
  /// plain loopback): node calls from any other key are refused.
  std::string curve_key;
};

struct token_row {
  std::string hash;     ///< hex BLAKE2b of the token; the token itself is never stored
  std::string identity; ///< identity (user or node) name
  std::string role;     ///< owner|node
  std::int64_t created_ms = 0;
  std::int64_t revoked_ms = 0; ///< 0 = valid; else refused from then on
};

struct invite_row {
  std::string hash; ///< hex BLAKE2b of the invite code
  std::string node;
  std::int64_t expires_ms = 0;
  bool used = false;
};

/// One audited mutating call; committed in the same transaction as its effect.
struct audit_row {
  std::int64_t at_ms = 0;
  std::string who;
  std::string role;
  std::string op;
  std::string target;
  std::string outcome; ///< "ok", a state, or the error code of a refusal
  std::string args;    ///< digest of the request's arguments ("" for internal rows)
};

/// An idempotent operation's stored outcome (SPEC section 9): committed in
/// the same transaction as its effect; a refused request stores none.
struct operation_row {
  std::string id;     ///< the client's operation id (a UUID)
  std::string kind;   ///< the op
  std::string digest; ///< of the arguments, without the operation id
  /// The reply body (bus::encode_body); for kind "submit", the replay
  /// record of a forgotten job, its job_info as bus::encode_record (ADR 0073).
  std::string result;
  std::int64_t at_ms = 0;
};

/// Forgets the idempotent operations stored before `before_ms` (their
/// window has passed): a retry with one of their ids runs anew.
struct operation_expiry {
  std::int64_t before_ms = 0;
};

/// Forgets the finished jobs that ended before `before_ms` (their history
/// window has passed), and of those that ended at `before_ms` the ones
/// submitted before seq `before_seq` (0: none; the oldest beyond [retention]
/// history_jobs, ADR 0071): their rows, events and allocations. With
/// `leftovers`, also what earlier passes left, found by reading whole
/// tables: the events and allocations of jobs no longer stored, and the
/// environments no job names.
struct history_expiry {
  std::int64_t before_ms = 0;
  std::uint64_t before_seq = 0;
  bool leftovers = true;
};

/// One event of a job's stream (SPEC section 8): committed with the change
/// that causes it; `seq` counts from 1 per job, without gaps.
struct event_row {
  std::string job;
  std::uint64_t job_seq = 0; ///< the job's submission seq (job_row::seq): the index key
  std::uint64_t seq = 0;
  std::string kind; ///< submitted, placed, started, ... (docs/protocol.md)
  std::int64_t at_ms = 0;
  std::string detail; ///< a short line: the node, the reason, the blockers
};

/// A read of the audit log (audit_req): rows after `cursor`, at or after
/// `since_ms`, matching the filters that are set, oldest first.
struct audit_query {
  std::uint64_t cursor = 0;
  std::int64_t since_ms = 0;
  std::optional<std::string> who, op, target;
  std::uint64_t limit = 1000;
};

using change = std::variant<job_row, bus::allocation_info, node_row, token_row, invite_row,
                            audit_row, profile_row, order_row, event_row, operation_row,
                            operation_expiry, history_expiry, bus::grant_info>;
using change_batch = std::vector<change>;

/// States are enums with one string mapping (bus/protocol.hpp).
using bus::alloc_state;
using bus::is_terminal;
using bus::job_state;

} // namespace cq
