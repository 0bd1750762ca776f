// The store's schema history (schema.hpp). Each entry migrates from version
// i to i + 1. Only ever append: a released entry never changes.
#include "store/schema.hpp"

namespace cq::coord {

namespace {
const migration all[] = {
    {R"sql(
  CREATE TABLE jobs(
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, name TEXT NOT NULL, owner TEXT NOT NULL,
    state TEXT NOT NULL, reason TEXT NOT NULL, argv TEXT NOT NULL, cwd TEXT NOT NULL,
    env TEXT NOT NULL, ram_bytes INTEGER, pinned_node TEXT, node TEXT NOT NULL,
    allocation TEXT NOT NULL, attempt INTEGER NOT NULL, exit_code INTEGER, signal INTEGER,
    submitted_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL);
  CREATE INDEX jobs_state ON jobs(state);
  CREATE TABLE allocations(
    id TEXT PRIMARY KEY, job TEXT NOT NULL, node TEXT NOT NULL, state TEXT NOT NULL,
    attempt INTEGER NOT NULL, reason TEXT NOT NULL, exit_code INTEGER, signal INTEGER,
    peak_ram_bytes INTEGER, created_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL);
  CREATE INDEX allocations_job ON allocations(job);
  CREATE TABLE nodes(name TEXT PRIMARY KEY, state TEXT NOT NULL, created_ms INTEGER NOT NULL);
  CREATE TABLE tokens(hash TEXT PRIMARY KEY, identity TEXT NOT NULL, role TEXT NOT NULL,
                      created_ms INTEGER NOT NULL);
  CREATE TABLE invites(hash TEXT PRIMARY KEY, node TEXT NOT NULL, expires_ms INTEGER NOT NULL,
                       used INTEGER NOT NULL);
  CREATE TABLE audit(id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL,
                     who TEXT NOT NULL, role TEXT NOT NULL, op TEXT NOT NULL,
                     target TEXT NOT NULL, outcome TEXT NOT NULL);
    )sql"},
    // v2: scheduling (issue 3): levels and ranks, resources, dependencies, profiles.
    {R"sql(
  ALTER TABLE jobs ADD COLUMN priority TEXT NOT NULL DEFAULT 'medium';
  ALTER TABLE jobs ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
  UPDATE jobs SET rank = seq * 1024;
  ALTER TABLE jobs ADD COLUMN gpus INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN vram_bytes INTEGER;
  ALTER TABLE jobs ADD COLUMN cpus INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN est_ms INTEGER;
  ALTER TABLE jobs ADD COLUMN timeout_ms INTEGER;
  ALTER TABLE jobs ADD COLUMN after TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE jobs ADD COLUMN profile TEXT NOT NULL DEFAULT '';
  ALTER TABLE jobs ADD COLUMN ram_floor_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN ram_start_min_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN preempt TEXT NOT NULL DEFAULT 'never';
  ALTER TABLE jobs ADD COLUMN effective_ram_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN effective_est_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN lanes TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE allocations ADD COLUMN peak_vram_bytes INTEGER;
  ALTER TABLE allocations ADD COLUMN lanes TEXT NOT NULL DEFAULT '[]';
  CREATE TABLE profiles(key TEXT PRIMARY KEY, runs INTEGER NOT NULL, peak_ram TEXT NOT NULL,
                        peak_vram TEXT NOT NULL, wall TEXT NOT NULL, updated_ms INTEGER NOT NULL);
  )sql"},
    // v3: revocable tokens, durable stop and yield requests, the node's detail of
    // an exit, and the state dir's identity. argv and env of new rows are msgpack
    // BLOBs (any bytes); TEXT values are JSON from earlier versions and still read.
    {R"sql(
  ALTER TABLE tokens ADD COLUMN revoked_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE allocations ADD COLUMN stop_requested_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE allocations ADD COLUMN yield_requested_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE allocations ADD COLUMN detail TEXT NOT NULL DEFAULT '';
  CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
  )sql"},
    // v4: leases, node loss and OOM retries (issue 9); each job's event stream.
    // Jobs of earlier versions get the coordinator's shipped defaults (30 min
    // lease, 5 min lost-after; a lost-after of 0 would mean never). An event's
    // id is its rowid: rows are never deleted (store.hpp, invariant 2), so ids
    // only grow without AUTOINCREMENT's extra write per insert. Events are
    // indexed by their job's submission seq, which grows, so a group commit of
    // new jobs' events appends to few index pages (the random job id would
    // dirty a page per event: a fifth of pipelined submit throughput).
    {R"sql(
  ALTER TABLE jobs ADD COLUMN lease_ms INTEGER NOT NULL DEFAULT 1800000;
  ALTER TABLE jobs ADD COLUMN lost_after_ms INTEGER NOT NULL DEFAULT 300000;
  ALTER TABLE jobs ADD COLUMN no_requeue INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN retry_oom INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN oom_retries INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE allocations ADD COLUMN stop_cause TEXT NOT NULL DEFAULT '';
  ALTER TABLE allocations ADD COLUMN unknown_since_ms INTEGER NOT NULL DEFAULT 0;
  UPDATE allocations SET stop_cause = 'cancel' WHERE stop_requested_ms != 0;
  CREATE TABLE events(id INTEGER PRIMARY KEY, job TEXT NOT NULL, job_seq INTEGER NOT NULL,
                      seq INTEGER NOT NULL, kind TEXT NOT NULL, at_ms INTEGER NOT NULL,
                      detail TEXT NOT NULL, UNIQUE(job_seq, seq));
  )sql"},
    // v5: a team (issue 10): node enablement, audited arguments, client job ids,
    // idempotent operations.
    {R"sql(
  ALTER TABLE nodes ADD COLUMN enabled INTEGER NOT NULL DEFAULT 1;
  ALTER TABLE nodes ADD COLUMN disabled_reason TEXT NOT NULL DEFAULT '';
  ALTER TABLE nodes ADD COLUMN curve_key TEXT NOT NULL DEFAULT '';
  ALTER TABLE audit ADD COLUMN args TEXT NOT NULL DEFAULT '';
  ALTER TABLE jobs ADD COLUMN spec_digest TEXT NOT NULL DEFAULT '';
  CREATE TABLE operations(id TEXT PRIMARY KEY, kind TEXT NOT NULL, digest TEXT NOT NULL,
                          result BLOB NOT NULL, at_ms INTEGER NOT NULL);
  ALTER TABLE jobs ADD COLUMN diagnostic INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE grants(job TEXT PRIMARY KEY, node TEXT NOT NULL, reason TEXT NOT NULL,
                      who TEXT NOT NULL, created_ms INTEGER NOT NULL, state TEXT NOT NULL,
                      ended_ms INTEGER NOT NULL);
  )sql"},
    // v6: arrays (issue 19): a task's array, its index and the array's limit;
    // a job kept from starting by a person (cq hold).
    {R"sql(
  ALTER TABLE jobs ADD COLUMN array_id TEXT NOT NULL DEFAULT '';
  ALTER TABLE jobs ADD COLUMN array_index INTEGER;
  ALTER TABLE jobs ADD COLUMN array_limit INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE jobs ADD COLUMN on_hold INTEGER NOT NULL DEFAULT 0;
  )sql"},
    // v7: where a job's output is also written (cq submit --output PATTERN).
    {R"sql(
  ALTER TABLE jobs ADD COLUMN output TEXT NOT NULL DEFAULT '';
  )sql"},
    // v8: the job runs on a terminal (cq run --pty).
    {R"sql(
  ALTER TABLE jobs ADD COLUMN pty INTEGER NOT NULL DEFAULT 0;
  )sql"},
    // v9: environments stored once by their digest (an array's tasks share
    // one); a job row written since names its environment by env_digest and
    // leaves env empty. Rows written before keep theirs in env.
    {R"sql(
  CREATE TABLE envs(digest BLOB PRIMARY KEY, env BLOB NOT NULL) WITHOUT ROWID;
  ALTER TABLE jobs ADD COLUMN env_digest BLOB;
  )sql"},
    // v10: one job record (issue 20): a job row holds the columns that
    // queries need (keys, state and end for expiry, the serving order, argv
    // and the environment for start orders) and the rest of the job as one
    // msgpack record derived from job_info's fields(). A new field of
    // job_info needs no column and no migration: older records read it as
    // its default. Earlier rows are re-encoded by code (job_record.cpp).
    {nullptr, &migrate_to_job_records},
    // v11: no index keyed by a random id takes a write per allocation
    // (docs/adr/0046). allocations_job (on the job's UUID) served only
    // history expiry, which now finds an expired job's allocations by when
    // they ended: an index that grows at its end.
    {R"sql(
  DROP INDEX allocations_job;
  CREATE INDEX allocations_finished ON allocations(finished_ms);
  )sql"},
    // v12: jobs keyed by their seq, and no index on the id (docs/adr/0046):
    // a submit appends to the table and its state index, and a later write
    // or a payload's read finds the row by seq. Ids (clients' random UUIDs)
    // are unique in the coordinator's memory, which holds every stored job;
    // a restart names a repeated id as damage (store.cpp).
    {R"sql(
  CREATE TABLE jobs_by_seq(
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL, state TEXT NOT NULL,
    finished_ms INTEGER NOT NULL, priority TEXT NOT NULL, rank INTEGER NOT NULL,
    spec_digest TEXT NOT NULL, argv BLOB NOT NULL, env BLOB NOT NULL, env_digest BLOB,
    record BLOB NOT NULL);
  INSERT INTO jobs_by_seq(seq, id, state, finished_ms, priority, rank, spec_digest, argv, env,
                          env_digest, record)
    SELECT seq, id, state, finished_ms, priority, rank, spec_digest, argv, env, env_digest,
           record FROM jobs ORDER BY seq;
  DROP TABLE jobs;
  ALTER TABLE jobs_by_seq RENAME TO jobs;
  CREATE INDEX jobs_state ON jobs(state);
  )sql"},
    // v13: audit rows without AUTOINCREMENT, whose sqlite_sequence row was a
    // page more in every commit that audits (a submit's among them). No
    // audit row is ever deleted, so a new id is still the largest plus one,
    // as it was (the events table's reasoning, v4).
    {R"sql(
  CREATE TABLE audit_next(id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, who TEXT NOT NULL,
                          role TEXT NOT NULL, op TEXT NOT NULL, target TEXT NOT NULL,
                          outcome TEXT NOT NULL, args TEXT NOT NULL DEFAULT '');
  INSERT INTO audit_next(id, at_ms, who, role, op, target, outcome, args)
    SELECT id, at_ms, who, role, op, target, outcome, args FROM audit ORDER BY id;
  DROP TABLE audit;
  ALTER TABLE audit_next RENAME TO audit;
  )sql"},
    // v14: finished jobs by their end (docs/adr/0071). A pass that forgets
    // the oldest finished jobs finds them here instead of reading every
    // finished job; a job enters it once, when it ends, at the index's end.
    {R"sql(
  CREATE INDEX jobs_finished ON jobs(finished_ms) WHERE finished_ms > 0;
  )sql"},
};
} // namespace

std::span<const migration> migrations() {
  return all;
}

} // namespace cq::coord
