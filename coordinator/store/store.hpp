#pragma once
// The coordinator's durable state in SQLite (WAL, synchronous=FULL).
//
// Writes are change records: each is a whole row to upsert (or an audit row
// to append). apply() commits a batch of records in ONE transaction: the
// store actor groups every write that arrives together into one batch (group
// commit), so many acknowledgements share one fsync. A call is acknowledged
// only after apply() returned true for the batch that carries its records.
//
// Invariants:
//  1. The schema version is PRAGMA user_version; migrations are additive and
//     run in order at open().
//  2. A row written here is never deleted by the coordinator (jobs and
//     allocations end in terminal states; the audit log only grows).
// No CAF and no clock in here: callers put every timestamp into the records.

#include "cq/records.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

struct sqlite3;

namespace cq::coord {

/// A job's keys and place in the serving order, as recovery walks them; its
/// fields are in snapshot::job_infos.
struct job_key {
  std::string id;
  std::uint64_t seq = 0;
  std::int64_t rank = 0;
  std::string spec_digest; ///< job_row::spec_digest
};

/// Everything recovery needs, loaded at start.
struct snapshot {
  std::vector<job_key> jobs; ///< every job, in seq order
  /// Every job's fields, in the same order: job_infos[i] is jobs[i]'s (the
  /// api's read model moves each one in; recovery copies no job). A deque:
  /// recovery frees each one as it moves it (a job_info is about 800 bytes,
  /// one block each), so the read model reuses that memory instead of the
  /// process holding both (78 MB more at 100k jobs, every page of it zeroed
  /// by the kernel at a restart; docs/adr/0036).
  std::deque<bus::job_info> job_infos;
  std::vector<bus::allocation_info> allocations; ///< every allocation
  std::vector<node_row> nodes;
  std::vector<token_row> tokens;   ///< revoked ones too (revoked_ms != 0)
  std::vector<invite_row> invites; ///< unused ones only
  std::vector<profile_row> profiles;
  /// Every stored idempotent operation; the result only of kind "submit"
  /// (a forgotten job's replay record): the others' replies are read when
  /// replayed (operation_result).
  std::vector<operation_row> operations;
  std::vector<bus::grant_info> grants; ///< every diagnostic grant, oldest first
  /// Each job's last event seq, as (the job's seq, its last event's seq) in
  /// job seq order: read from the events index alone, and merged with `jobs`
  /// (also in seq order) without a lookup by id.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> event_seqs;
  /// Rows that could not be read, each as "TABLE row KEY: what is wrong";
  /// they are missing from the vectors above. A coordinator does not start
  /// on a snapshot with damaged rows (SPEC section 10: damage is loud).
  std::vector<std::string> damaged;

  /// The fields of the i-th job in seq order.
  bus::job_info& info(std::size_t i) { return job_infos.at(i); }
};

/// How a store opens its file. Production uses the defaults; cq-sim opens
/// the store on its own file system (sim/vfs.hpp), and one of its deliberate
/// defects commits without syncing.
struct store_options {
  std::string vfs;                  ///< a registered SQLite VFS; empty: the default
  std::string synchronous = "FULL"; ///< PRAGMA synchronous (SPEC section 10: FULL)
};

/// Turns SQLite's memory statistics off: they take a global mutex around
/// every allocation and free SQLite makes (about 750,000 of each in a
/// 2,000-job cq-sim study), and nothing here reads them. It holds only
/// before SQLite initializes, so store's constructor calls it, and so must
/// anything that touches SQLite before the first store (cq-sim's VFS);
/// later it is refused, harmlessly.
void sqlite_without_memory_statistics();

class store {
public:
  /// Opens (creating if needed) `path` and migrates it. Throws std::runtime_error
  /// with the SQLite message when the file cannot be opened or migrated.
  explicit store(const std::string& path, const store_options& opts = {});
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// Commits all records in one transaction. On failure nothing is applied
  /// and the error text is returned.
  std::optional<std::string> apply(const change_batch& batch);
  /// The same for several batches, in order, in ONE transaction (the store
  /// actor's group commit), without copying them into one.
  std::optional<std::string> apply(std::span<const change_batch* const> batches);

  /// Reads everything recovery needs (not the jobs' environments: see
  /// load_payload). A row that cannot be read is listed in `damaged`.
  snapshot load();

  /// What a job's start order needs and memory does not hold.
  struct payload {
    bus::string_list argv;
    bus::env_map env;
  };
  /// Reads the argv and environment of job `job`, submitted as `seq`;
  /// not_found for an unknown job, internal (naming the row) for a damaged
  /// one.
  bus::result<payload> load_payload(std::uint64_t seq, const std::string& job);

  /// The stored result of idempotent operation `id`; not_found once it has
  /// expired (or was never stored).
  bus::result<std::string> operation_result(const std::string& id);

  /// Committed events after `cursor` (of the jobs with submission seqs
  /// `job_seqs` only, unless empty; with a per-job seq above `since`), oldest
  /// first, at most `limit`. The reply's cursor is the last event's when the
  /// page is full, else the newest committed event's (nothing up to it is
  /// left for this reader), and never below `cursor`.
  bus::result<bus::events_rep> events(const std::vector<std::uint64_t>& job_seqs,
                                      std::uint64_t cursor, std::uint64_t since,
                                      std::uint64_t limit);

  /// Audit rows after `cursor`, at or after `since_ms`, matching the filters
  /// that are set, oldest first, at most `limit`.
  bus::result<bus::audit_rep> audit(const audit_query& f);

  /// Every damaged row (as load() names them, environments included) and
  /// every complaint of SQLite's integrity check; empty when all is well.
  std::vector<std::string> check();

  /// Whether the file opened is still in place: nullopt when it is, else why
  /// not (deleted, or replaced by another file; likewise its -wal file).
  std::optional<std::string> check_file();

  /// The identity of the state this database holds (meta table), if set.
  std::optional<std::string> state_id();
  void set_state_id(const std::string& id);

  /// True when the database holds an owner token (used by --init-owner).
  bool has_owner();

private:
  void exec(const char* sql);
  void migrate();
  void check_rc(int rc, const char* what);
  sqlite3* db_ = nullptr;
  struct statements;
  std::unique_ptr<statements> st_;
  struct watched;
  std::unique_ptr<watched> watch_;
};

} // namespace cq::coord
