#include "auth/auth.hpp"
#include "cq/json.hpp"
#include "store/schema.hpp"
#include "store/store.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "state_names.hpp"

#include <cstdlib>
#include <filesystem>

#include <sqlite3.h>

using namespace cq;
using namespace cq::coord;

namespace {
struct temp_db {
  std::filesystem::path dir;
  temp_db() {
    char tmpl[] = "/tmp/cq-store-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~temp_db() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "cq.db").string(); }
};

/// Stores two queued jobs, "good" (seq 1) and "bad" (seq 2), each with an
/// environment of its own.
void store_good_and_bad(const std::string& path) {
  store s(path);
  for (auto id : {"good", "bad"}) {
    job_row j;
    j.info.id = id, j.seq = id[0] == 'g' ? 1u : 2u, j.info.state = job_state::queued;
    j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
    j.env = std::make_shared<const bus::env_map>(bus::env_map{{"JOB", id}});
    REQUIRE_FALSE(s.apply({j}));
  }
}

/// Runs `sql` on the database at `path` behind the store's back.
void raw_sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

/// The count that `sql` reads from the database at `path`, behind the
/// store's back.
int count_of(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  int n = -1;
  auto read = [](void* out, int, char** v, char**) {
    return *static_cast<int*>(out) = std::atoi(v[0]), 0;
  };
  REQUIRE(sqlite3_exec(db, sql, read, &n, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  return n;
}

/// A database at schema `version` (9: the last with a column per job
/// field), holding what `rows` (SQL) inserts.
void schema_at(const std::string& path, std::size_t version, const char* rows) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  auto steps = migrations();
  REQUIRE(steps.size() > version);
  for (std::size_t v = 0; v < version; ++v) {
    if (steps[v].sql)
      REQUIRE(sqlite3_exec(db, steps[v].sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    if (steps[v].code)
      steps[v].code(db);
  }
  REQUIRE(sqlite3_exec(db, rows, nullptr, nullptr, nullptr) == SQLITE_OK);
  auto set = fmt::format("PRAGMA user_version = {}", version);
  REQUIRE(sqlite3_exec(db, set.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}
} // namespace

TEST_CASE("committed rows are there after the store is reopened") {
  temp_db t;
  job_row j;
  j.info.id = "j1";
  j.seq = 1;
  j.info.name = "x";
  j.info.owner = "me";
  j.info.state = job_state::queued;
  j.info.argv = {"sh", "-c", "echo 'a b'"};
  j.info.cwd = "/";
  j.info.ram_bytes = 42;
  j.env = std::make_shared<const bus::env_map>(bus::env_map{{"A", "1"}});
  {
    store s(t.path());
    REQUIRE_FALSE(s.apply({j, audit_row{1, "me", "owner", "submit", "j1", "queued"}}));
    j.info.state = job_state::running;
    REQUIRE_FALSE(s.apply({j}));
  }
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).state == "running");
  CHECK(snap.info(0).argv == j.info.argv);
  auto p = s.load_payload(1, "j1");
  REQUIRE(p);
  CHECK(p->env == *j.env);
  CHECK(p->argv == j.info.argv);
  CHECK(snap.info(0).ram_bytes == 42u);
  CHECK_FALSE(snap.info(0).exit_code);
  CHECK(snap.damaged.empty());
}

TEST_CASE("argv and environments keep bytes that are not UTF-8, exactly") {
  temp_db t;
  job_row j;
  j.info.id = "j1", j.seq = 1, j.info.state = job_state::queued, j.info.priority = "medium";
  j.info.argv = {"printf", std::string("caf\xe9 \xff\xfe\x01", 8)};
  j.info.cwd = "/";
  j.env = std::make_shared<const bus::env_map>(
      bus::env_map{{"LATIN", std::string("caf\xe9", 4)}, {std::string("K\x80", 2), "v"}});
  store s(t.path());
  REQUIRE_FALSE(s.apply({j}));
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).argv == j.info.argv);
  auto p = s.load_payload(1, "j1");
  REQUIRE(p);
  CHECK(p->env == *j.env);
}

TEST_CASE("rows that share an environment store it once, and a task reads its array's variables") {
  temp_db t;
  auto env = std::make_shared<const bus::env_map>(bus::env_map{{"A", "1"}, {"HOME", "/h"}});
  change_batch first, second;
  for (int i = 0; i < 3; ++i) {
    job_row j;
    j.info.id = "t" + std::to_string(i), j.seq = static_cast<std::uint64_t>(i + 1);
    j.info.state = job_state::queued, j.info.priority = "medium", j.info.cwd = "/";
    j.info.argv = {"true"};
    j.info.array = "arr", j.info.array_index = 7 + i;
    j.env = env;
    first.push_back(j);
  }
  job_row other;
  other.info.id = "solo", other.seq = 4, other.info.state = job_state::queued;
  other.info.priority = "medium", other.info.cwd = "/", other.info.argv = {"true"};
  other.env = std::make_shared<const bus::env_map>(bus::env_map{{"B", "2"}});
  second.push_back(other);
  store s(t.path());
  const change_batch* both[] = {&first, &second};
  REQUIRE_FALSE(s.apply(both));
  auto task = s.load_payload(2, "t1");
  REQUIRE(task);
  CHECK(task->env ==
        bus::env_map{{"A", "1"}, {"HOME", "/h"}, {"CQ_ARRAY_ID", "arr"}, {"CQ_ARRAY_INDEX", "8"}});
  auto solo = s.load_payload(4, "solo");
  REQUIRE(solo);
  CHECK(solo->env == *other.env);
  CHECK(s.load().jobs.size() == 4);
  // Stored once per content: the tasks' one, solo's.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(t.path().c_str(), &db) == SQLITE_OK);
  CHECK(count_of(t.path(), "SELECT count(*) FROM envs") == 2);
  // A row written before environments had their own table keeps its own.
  REQUIRE(sqlite3_exec(db,
                       "UPDATE jobs SET env = (SELECT env FROM envs WHERE digest = "
                       "jobs.env_digest), env_digest = NULL WHERE id = 'solo'",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "DELETE FROM envs WHERE digest NOT IN (SELECT env_digest FROM jobs "
                       "WHERE env_digest IS NOT NULL)",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  CHECK(count_of(t.path(), "SELECT count(*) FROM envs") == 1);
  sqlite3_close(db);
  auto legacy = s.load_payload(4, "solo");
  REQUIRE(legacy);
  CHECK(legacy->env == *other.env);
  CHECK(s.check().empty());
}

TEST_CASE("a later write of a job row keeps its argv, environment and place in the queue") {
  temp_db t;
  job_row j;
  j.info.id = "j1", j.seq = 1, j.info.state = job_state::queued, j.info.priority = "low";
  j.info.argv = {"true"};
  j.info.cwd = "/";
  j.env = std::make_shared<const bus::env_map>(bus::env_map{{"A", "1"}});
  j.rank = 7;
  store s(t.path());
  REQUIRE_FALSE(s.apply({j}));
  REQUIRE_FALSE(s.apply({order_row{"j1", 1, "high", 3}}));
  // The job actor holds neither argv nor env, and may not have seen the move.
  auto later = j;
  later.info.argv.clear();
  later.env.reset();
  later.info.state = job_state::running;
  later.info.priority = "low";
  later.rank = 7;
  REQUIRE_FALSE(s.apply({later}));
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).state == "running");
  CHECK(snap.info(0).argv == j.info.argv);
  CHECK(snap.info(0).priority == "high");
  CHECK(snap.jobs[0].rank == 3);
  CHECK(s.load_payload(1, "j1")->env == *j.env);
  // Moving a job that does not exist fails the whole batch.
  CHECK(s.apply({order_row{"nope", 9, "high", 1}}));
}

TEST_CASE("an allocation's later writes change its row in place: every field, and its place "
          "among allocations made in the same millisecond") {
  temp_db t;
  store s(t.path());
  job_row j;
  j.info.id = "j", j.seq = 1, j.info.state = job_state::running;
  j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
  auto alloc = [](std::string id) {
    bus::allocation_info a;
    a.id = std::move(id), a.job = "j", a.node = "n1", a.attempt = 1;
    a.state = alloc_state::running, a.created_ms = 5;
    return a;
  };
  auto first = alloc("a1"), second = alloc("a2");
  REQUIRE_FALSE(s.apply({j, first, second}));
  first.state = alloc_state::finished, first.finished_ms = 7, first.exit_code = 3;
  first.stop_cause = "cancel", first.detail = "stopped", first.lanes = {"gpu0"};
  REQUIRE_FALSE(s.apply({first}));
  auto snap = s.load();
  REQUIRE(snap.allocations.size() == 2);
  // Loaded by creation time, ties in the order they were made (a replaced
  // row used to move behind the ones made after it).
  CHECK(snap.allocations[0].id == "a1");
  CHECK(snap.allocations[1].id == "a2");
  auto& a = snap.allocations[0];
  CHECK(a.state == alloc_state::finished);
  CHECK(a.finished_ms == 7);
  CHECK(a.exit_code == 3);
  CHECK(a.stop_cause == "cancel");
  CHECK(a.detail == "stopped");
  CHECK(a.lanes == std::vector<std::string>{"gpu0"});
}

TEST_CASE("an allocation row is its fields: each one set is read back as written, and a column "
          "that does not read as its field is named") {
  temp_db t;
  bus::allocation_info a;
  a.id = "a1", a.job = "j", a.node = "n1", a.state = alloc_state::finished, a.attempt = 2;
  a.reason = bus::reason::oom, a.exit_code = -3, a.signal = 9, a.peak_ram_bytes = 1ull << 33;
  a.peak_vram_bytes = 5, a.lanes = {"gpu0", "gpu1"}, a.created_ms = 10, a.started_ms = 11;
  a.finished_ms = 12, a.stop_requested_ms = 13, a.yield_requested_ms = 14;
  a.detail = "killed", a.stop_cause = "yield", a.unknown_since_ms = 15;
  {
    store s(t.path());
    REQUIRE_FALSE(s.apply({a}));
    auto snap = s.load();
    REQUIRE(snap.allocations.size() == 1);
    // Field by field (every one of fields(), as JSON).
    CHECK(json_text(snap.allocations[0]) == json_text(a));
    bus::allocation_info none;
    none.id = "a2", none.job = "j", none.node = "n1";
    REQUIRE_FALSE(s.apply({none}));
    auto again = s.load();
    REQUIRE(again.allocations.size() == 2);
    CHECK(json_text(again.allocations[0]) == json_text(none)); // created at 0
    CHECK_FALSE(again.allocations[0].exit_code);
    CHECK_FALSE(again.allocations[0].peak_vram_bytes);
  }
  raw_sql(t.path(), "UPDATE allocations SET reason = 'bogus' WHERE id = 'a1'");
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.allocations.size() == 1);
  REQUIRE(snap.damaged.size() == 1);
  CHECK(snap.damaged[0] == "allocations row a1: reason: 'bogus' is not one of its names");
}

TEST_CASE("new jobs, later writes to jobs and new allocations touch few pages, however many "
          "jobs are stored") {
  // Job ids are clients' random UUIDs; an index keyed by one takes a write
  // at a random page. Jobs are keyed by their seq and allocations by
  // time-ordered ids, so a commit of 64 submits, or of 64 starts, writes
  // pages at the tables' and indexes' ends (docs/adr/0046). Counted as WAL
  // frames: a bound on work, not a time.
  temp_db t;
  store s(t.path());
  constexpr std::uint64_t stored = 20'000;
  std::vector<job_row> jobs;
  change_batch batch;
  for (std::uint64_t i = 1; i <= stored; ++i) {
    // All finished, with an allocation each, but the newest 64: queued.
    bool queued = i > stored - 64;
    job_row j;
    j.info.id = new_uuid(), j.seq = i, j.info.priority = "medium";
    j.info.state = queued ? job_state::queued : job_state::succeeded;
    j.info.finished_ms = queued ? 0 : static_cast<std::int64_t>(i);
    j.info.argv = {"true"}, j.info.cwd = "/";
    batch.push_back(j);
    if (!queued) {
      bus::allocation_info a;
      a.id = new_uuid_v7(static_cast<std::int64_t>(i)), a.job = j.info.id, a.node = "n1";
      a.attempt = 1, a.state = alloc_state::finished;
      a.created_ms = a.finished_ms = j.info.finished_ms;
      batch.push_back(a);
    }
    jobs.push_back(std::move(j));
    if (batch.size() >= 2000) {
      REQUIRE_FALSE(s.apply(batch));
      batch.clear();
    }
  }
  REQUIRE_FALSE(s.apply(batch));
  batch.clear();
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(t.path().c_str(), &raw) == SQLITE_OK);
  REQUIRE(sqlite3_exec(raw, "SELECT COUNT(*) FROM jobs", nullptr, nullptr, nullptr) == SQLITE_OK);
  auto wal_frames = [&](const char* mode) {
    int log = -1, done = -1;
    REQUIRE(sqlite3_wal_checkpoint_v2(raw, nullptr,
                                      mode[0] == 'T' ? SQLITE_CHECKPOINT_TRUNCATE
                                                     : SQLITE_CHECKPOINT_PASSIVE,
                                      &log, &done) == SQLITE_OK);
    return log;
  };
  CHECK(wal_frames("TRUNCATE") == 0);
  // The 64 queued jobs start: each gets an allocation and a later write.
  for (std::uint64_t k = 0; k < 64; ++k) {
    auto& j = jobs[stored - 1 - k];
    j.info.state = job_state::running;
    bus::allocation_info a;
    a.id = new_uuid_v7(static_cast<std::int64_t>(stored + k)), a.job = j.info.id, a.node = "n1";
    a.attempt = 1, a.state = alloc_state::starting;
    a.created_ms = static_cast<std::int64_t>(stored + k);
    batch.push_back(j), batch.push_back(a);
  }
  REQUIRE_FALSE(s.apply(batch));
  auto frames = wal_frames("PASSIVE");
  INFO("WAL frames of the commit of 64 starts: " << frames);
  CHECK(frames <= 40);
  REQUIRE(wal_frames("TRUNCATE") == 0);
  // 64 submits: new rows, each with a random id.
  batch.clear();
  for (std::uint64_t k = 1; k <= 64; ++k) {
    job_row j;
    j.info.id = new_uuid(), j.seq = stored + k, j.info.state = job_state::queued;
    j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
    batch.push_back(j);
  }
  REQUIRE_FALSE(s.apply(batch));
  frames = wal_frames("PASSIVE");
  INFO("WAL frames of the commit of 64 submits: " << frames);
  CHECK(frames <= 40);
  sqlite3_close(raw);
}

TEST_CASE("a job row that repeats another's id is named as damage by the store's check") {
  // Ids are unique in the coordinator's memory; no index holds them unique
  // in the store (schema v12): `cq-coordinator --check` names such a row (a
  // restart stops at it, api/recovery.cpp).
  temp_db t;
  store s(t.path());
  job_row a;
  a.info.id = "same", a.seq = 1, a.info.state = job_state::queued, a.info.priority = "medium";
  a.info.argv = {"true"}, a.info.cwd = "/";
  auto b = a;
  b.seq = 7;
  REQUIRE_FALSE(s.apply({a, b}));
  auto damaged = s.check();
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0] == "jobs row same: id: also the id of the job submitted as seq 1");
}

TEST_CASE("a batch that fails leaves nothing behind") {
  temp_db t;
  store s(t.path());
  job_row a;
  a.info.id = "a", a.seq = 1, a.info.state = job_state::queued;
  job_row b;
  b.info.id = "b", b.seq = 1, b.info.state = job_state::queued; // same seq: UNIQUE violation
  CHECK(s.apply({a, b}));
  CHECK(s.load().jobs.empty());
}

TEST_CASE("an environment equal to a recent one is written once, and again after its row went "
          "(history expiry, a failed batch)") {
  temp_db t;
  store s(t.path());
  auto job = [](const char* id, std::uint64_t seq, job_state state, bus::env_map env) {
    job_row j;
    j.info.id = id, j.seq = seq, j.info.state = state, j.info.priority = "medium";
    j.info.argv = {"true"}, j.info.cwd = "/";
    j.info.finished_ms = state == job_state::succeeded ? 100 : 0;
    j.env = std::make_shared<const bus::env_map>(std::move(env)); // each its own copy
    return j;
  };
  auto envs = [&] { return count_of(t.path(), "SELECT count(*) FROM envs"); };
  auto env_of = [&](std::uint64_t seq, const char* id) {
    auto p = s.load_payload(seq, id);
    REQUIRE(p);
    return p->env;
  };
  bus::env_map shell{{"HOME", "/home/ana"}, {"PATH", "/usr/bin:/bin"}};
  // Two submits with equal environments, in transactions of their own.
  REQUIRE_FALSE(s.apply({job("done", 1, job_state::succeeded, shell)}));
  REQUIRE_FALSE(s.apply({job("q1", 2, job_state::queued, shell)}));
  CHECK(envs() == 1);
  CHECK(env_of(2, "q1") == shell);
  // Expiry takes "done"; q1 still names the environment, so it stays.
  REQUIRE_FALSE(s.apply({history_expiry{200}}));
  CHECK(envs() == 1);
  // Another environment, whose only job expires: its row goes, and a later
  // job with an equal one writes it again.
  bus::env_map other{{"HOME", "/home/bo"}};
  REQUIRE_FALSE(s.apply({job("gone", 3, job_state::succeeded, other)}));
  REQUIRE_FALSE(s.apply({history_expiry{200}}));
  CHECK(envs() == 1);
  REQUIRE_FALSE(s.apply({job("q2", 4, job_state::queued, other)}));
  CHECK(env_of(4, "q2") == other);
  // A batch that fails takes the environment row it wrote with it.
  bus::env_map third{{"HOME", "/home/cy"}};
  auto dup = job("dup", 4, job_state::queued, {}); // q2's seq: UNIQUE violation
  CHECK(s.apply({job("q3", 5, job_state::queued, third), dup}));
  REQUIRE_FALSE(s.apply({job("q4", 6, job_state::queued, third)}));
  CHECK(env_of(6, "q4") == third);
  CHECK(envs() == 3);
}

TEST_CASE("tokens and invite codes are stored only as hashes") {
  auto t = new_token();
  CHECK(t.size() == 3 + 64);
  CHECK(hash_secret(t) != t);
  CHECK(hash_secret(t) == hash_secret(t));
  CHECK(new_token() != t);
  CHECK(new_uuid().size() == 36);
}

TEST_CASE("a digest's 32 bytes, as memory keeps one, give back its hex form") {
  auto hex = digest_of("spec");
  auto d = digest_from_hex(hex);
  REQUIRE(d);
  CHECK(digest_hex(*d) == hex);
  CHECK_FALSE(digest_from_hex(""));
  CHECK_FALSE(digest_from_hex(hex.substr(1)));              // too short
  CHECK_FALSE(digest_from_hex(hex + "00"));                 // too long
  CHECK_FALSE(digest_from_hex(std::string(63, '0') + "g")); // not hex
  CHECK_FALSE(digest_from_hex("d1"));
}

TEST_CASE("a version 1 database migrates additively and keeps its jobs in order") {
  temp_db t;
  {
    // The schema and a row exactly as the first release wrote them.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(t.path().c_str(), &db) == SQLITE_OK);
    const char* v1 = R"sql(
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
      INSERT INTO jobs VALUES('a', 1, 'a', 'me', 'queued', '', '["true"]', '/', '{}', NULL, NULL,
                              '', '', 0, NULL, NULL, 5, 0, 0);
      INSERT INTO jobs VALUES('b', 2, 'b', 'me', 'succeeded', '', '["true"]', '/', '{}', 7, NULL,
                              'n', 'x', 1, 0, NULL, 6, 7, 8);
      INSERT INTO allocations VALUES('x', 'b', 'n', 'finished', 1, '', 0, NULL, 99, 6, 7, 8);
      PRAGMA user_version = 1;
    )sql";
    REQUIRE(sqlite3_exec(db, v1, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 2);
  CHECK(snap.info(0).priority == "medium");
  CHECK(snap.jobs[0].rank < snap.jobs[1].rank);
  CHECK(snap.info(0).after.empty());
  CHECK(snap.info(1).ram_bytes == 7u);
  CHECK(snap.info(1).exit_code == 0);
  REQUIRE(snap.allocations.size() == 1);
  CHECK(snap.allocations[0].peak_ram_bytes == 99u);
  CHECK(snap.allocations[0].lanes.empty());
  CHECK(snap.profiles.empty());
  // Jobs of earlier versions get the shipped lease and lost-after (0 would
  // mean "never lost"), and no event history.
  CHECK(snap.info(0).lost_after_ms == 5 * 60 * 1000u);
  CHECK(snap.info(0).lease_ms == 30 * 60 * 1000u);
  CHECK(snap.allocations[0].stop_cause.empty());
  CHECK(snap.event_seqs.empty());
}

TEST_CASE("a version 9 job row becomes one record with every field kept") {
  temp_db t;
  // argv and env as JSON text (written before version 3), the rest by name.
  schema_at(t.path(), 9, R"sql(
    INSERT INTO jobs(id, seq, name, owner, state, reason, argv, cwd, env, ram_bytes,
      pinned_node, node, allocation, attempt, exit_code, signal, submitted_ms, started_ms,
      finished_ms, priority, rank, gpus, vram_bytes, cpus, est_ms, timeout_ms, after, profile,
      ram_floor_bytes, ram_start_min_bytes, preempt, effective_ram_bytes, effective_est_ms,
      lanes, lease_ms, lost_after_ms, no_requeue, retry_oom, oom_retries, spec_digest,
      diagnostic, array_id, array_index, array_limit, on_hold, output, pty)
    VALUES('t3', 4, 'sweep', 'ana', 'failed', 'oom', '["python","x.py"]', '/w', '{"A":"1"}',
      1024, 'box', 'box', 'a9', 2, NULL, 9, 10, 11, 12, 'low', 5120, 1, 2048, 3, 60000,
      90000, '["t1","t2"]', 'py', 7, 8, 'checkpoint', 4096, 70000, '["gpu1"]', 600000, 0, 1,
      2, 1, 'd1', 1, 'arr', 3, 2, 1, '/o/%j', 1);
  )sql");
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.damaged.empty());
  REQUIRE(snap.jobs.size() == 1);
  auto& r = snap.jobs[0];
  auto& j = snap.info(0);
  CHECK(r.seq == 4);
  CHECK(r.rank == 5120);
  CHECK(r.spec_digest == "d1");
  CHECK((j.id == "t3" && j.name == "sweep" && j.owner == "ana" && j.state == "failed"));
  CHECK(to_string(j.reason) == "oom");
  CHECK(j.argv == bus::string_list{"python", "x.py"});
  CHECK((j.cwd == "/w" && j.ram_bytes == 1024u && j.pinned_node == "box" && j.node == "box"));
  CHECK((j.allocation == "a9" && j.attempt == 2 && !j.exit_code && j.signal == 9));
  CHECK((j.submitted_ms == 10 && j.started_ms == 11 && j.finished_ms == 12));
  CHECK((j.priority == "low" && j.gpus == 1 && j.vram_bytes == 2048u && j.cpus == 3));
  CHECK((j.est_ms == 60000u && j.timeout_ms == 90000u));
  CHECK(j.after == bus::string_list{"t1", "t2"});
  CHECK((j.profile == "py" && j.ram_floor_bytes == 7 && j.ram_start_min_bytes == 8));
  CHECK((j.preempt == "checkpoint" && j.effective_ram_bytes == 4096));
  CHECK((j.effective_est_ms == 70000 && j.lanes == bus::string_list{"gpu1"}));
  CHECK((j.lease_ms == 600000 && j.lost_after_ms == 0 && j.no_requeue && j.retry_oom == 2));
  CHECK((j.oom_retries == 1 && j.diagnostic && j.array == "arr" && j.array_index == 3u));
  CHECK((j.array_limit == 2 && j.on_hold && j.output == "/o/%j" && j.pty));
  auto p = s.load_payload(4, "t3");
  REQUIRE(p);
  CHECK(p->env == bus::env_map{{"A", "1"}, {"CQ_ARRAY_ID", "arr"}, {"CQ_ARRAY_INDEX", "3"}});
  CHECK(s.check().empty());
  // A later write keeps what only the insert writes, and the row reads the same.
  job_row later{j, nullptr, r.seq, r.rank, r.spec_digest};
  later.info.argv.clear();
  later.info.state = job_state::cancelled;
  REQUIRE_FALSE(s.apply({later}));
  auto again = s.load();
  REQUIRE(again.jobs.size() == 1);
  CHECK(again.info(0).argv == j.argv);
  CHECK(again.info(0).state == "cancelled");
  CHECK(s.load_payload(4, "t3")->env == p->env);
}

TEST_CASE("an upgrade that cannot read a job row stops, names it, and leaves the file as it was") {
  temp_db t;
  schema_at(t.path(), 9, R"sql(
    INSERT INTO jobs(id, seq, name, owner, state, reason, argv, cwd, env, node, allocation,
      attempt, submitted_ms, started_ms, finished_ms, after)
    VALUES('bad', 1, 'b', 'me', 'queued', '', x'91a474727565', '/', x'80', '', '', 0, 1, 0, 0,
      '["unterminated');
  )sql");
  std::string what;
  try {
    store s(t.path());
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  CHECK(what.rfind("jobs row bad: after: not a JSON list", 0) == 0);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(t.path().c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT (SELECT user_version FROM pragma_user_version), "
                             "(SELECT count(*) FROM jobs WHERE after LIKE '[\"unterm%'), "
                             "(SELECT count(*) FROM sqlite_master WHERE name = 'jobs_v10')",
                             -1, &q, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(q) == SQLITE_ROW);
  CHECK(sqlite3_column_int(q, 0) == 9);
  CHECK(sqlite3_column_int(q, 1) == 1);
  CHECK(sqlite3_column_int(q, 2) == 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

TEST_CASE("a job row whose record is damaged is named, and the other rows are still read") {
  temp_db t;
  store_good_and_bad(t.path());
  raw_sql(t.path(), "UPDATE jobs SET record = x'81a363776401' WHERE id = 'bad'");
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  REQUIRE(snap.damaged.size() == 1);
  CHECK(snap.damaged[0] == "jobs row bad: record.cwd: expected a string");
  CHECK_FALSE(s.load_payload(2, "bad"));
}

TEST_CASE("thousands of jobs are read in seq order, records decoded beside the reading, and "
          "damaged rows in any chunk are named in row order") {
  temp_db t;
  {
    store s(t.path());
    change_batch batch;
    for (std::uint64_t i = 1; i <= 5000; ++i) {
      job_row j;
      j.info.id = fmt::format("j{:05}", i), j.seq = i, j.info.state = job_state::queued;
      j.info.priority = "medium", j.info.argv = {"echo", std::to_string(i)}, j.info.cwd = "/";
      batch.push_back(j);
    }
    REQUIRE_FALSE(s.apply(batch));
  }
  raw_sql(t.path(), "UPDATE jobs SET record = x'81a363776401' WHERE id IN ('j00007', 'j04500')");
  raw_sql(t.path(), "UPDATE jobs SET argv = x'90' WHERE id = 'j03000'");
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.damaged.size() == 3);
  CHECK(snap.damaged[0] == "jobs row j00007: record.cwd: expected a string");
  CHECK(snap.damaged[1] == "jobs row j03000: argv: empty");
  CHECK(snap.damaged[2] == "jobs row j04500: record.cwd: expected a string");
  REQUIRE(snap.jobs.size() == 4997);
  REQUIRE(snap.job_infos.size() == 4997);
  for (std::size_t i = 0; i < snap.jobs.size(); ++i) {
    REQUIRE(snap.info(i).id == snap.jobs[i].id);
    REQUIRE(snap.info(i).argv.at(1) == std::to_string(snap.jobs[i].seq));
    if (i)
      REQUIRE(snap.jobs[i].seq > snap.jobs[i - 1].seq);
  }
}

TEST_CASE("a damaged row is named by table and id, and the other rows are still read") {
  temp_db t;
  store_good_and_bad(t.path());
  raw_sql(t.path(), "UPDATE jobs SET argv = '[\"unterminated' WHERE id = 'bad'");
  // Its environment, as stored (once, by digest).
  raw_sql(t.path(), "UPDATE envs SET env = x'c1' WHERE digest = "
                    "(SELECT env_digest FROM jobs WHERE id = 'good')");
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).id == "good");
  REQUIRE(snap.damaged.size() == 1);
  CHECK(snap.damaged[0].rfind("jobs row bad: argv:", 0) == 0);
  // check() also reads the environments, which load() leaves alone.
  auto all = s.check();
  REQUIRE(all.size() == 2);
  CHECK(all[1].rfind("jobs row good: env:", 0) == 0);
  CHECK_FALSE(s.load_payload(1, "good"));
}

TEST_CASE("version 13 keeps every audit row and its id without AUTOINCREMENT, and a new row "
          "follows the largest") {
  // AUTOINCREMENT wrote sqlite_sequence's page in every commit that audits
  // (each submit's); audit rows are never deleted, so ids still only grow.
  temp_db t;
  schema_at(t.path(), 12, R"sql(
    INSERT INTO audit(id, at_ms, who, role, op, target, outcome, args)
      VALUES(3, 30, 'ana', 'owner', 'submit', 'j1', 'ok', 'd1'),
            (9, 90, 'bo', 'submitter', 'cancel', 'j2', 'not_found', '');
  )sql");
  store s(t.path());
  REQUIRE_FALSE(s.apply(change_batch{audit_row{100, "cy", "operator", "drain", "n1", "ok", ""}}));
  audit_query all;
  auto rows = s.audit(all);
  REQUIRE(rows);
  REQUIRE(rows->rows.size() == 3);
  CHECK(rows->rows[0].id == 3);
  CHECK((rows->rows[0].who == "ana" && rows->rows[0].args == "d1" && rows->rows[0].at_ms == 30));
  CHECK((rows->rows[1].id == 9 && rows->rows[1].outcome == "not_found"));
  CHECK((rows->rows[2].id == 10 && rows->rows[2].op == "drain"));
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(t.path().c_str(), &raw) == SQLITE_OK);
  std::string sql;
  REQUIRE(sqlite3_exec(
              raw, "SELECT sql FROM sqlite_master WHERE name = 'audit'",
              [](void* out, int, char** v, char**) {
                *static_cast<std::string*>(out) = v[0] ? v[0] : "";
                return 0;
              },
              &sql, nullptr) == SQLITE_OK);
  sqlite3_close(raw);
  CHECK(sql.find("AUTOINCREMENT") == std::string::npos);
  CHECK(sql.find("args") != std::string::npos);
}
