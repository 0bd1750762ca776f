#include "auth/auth.hpp"
#include "store/store.hpp"

#include <catch2/catch.hpp>

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
} // namespace

TEST_CASE("committed rows are there after the store is reopened") {
  temp_db t;
  job_row j;
  j.info.id = "j1";
  j.seq = 1;
  j.info.name = "x";
  j.info.owner = "me";
  j.info.state = "queued";
  j.info.argv = {"sh", "-c", "echo 'a b'"};
  j.info.cwd = "/";
  j.info.ram_bytes = 42;
  j.env = {{"A", "1"}};
  {
    store s(t.path());
    REQUIRE_FALSE(s.apply({j, audit_row{1, "me", "owner", "submit", "j1", "queued"}}));
    j.info.state = "running";
    REQUIRE_FALSE(s.apply({j}));
  }
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.jobs[0].info.state == "running");
  CHECK(snap.jobs[0].info.argv == j.info.argv);
  CHECK(snap.jobs[0].env == j.env);
  CHECK(snap.jobs[0].info.ram_bytes == 42u);
  CHECK_FALSE(snap.jobs[0].info.exit_code);
}

TEST_CASE("a batch that fails leaves nothing behind") {
  temp_db t;
  store s(t.path());
  job_row a;
  a.info.id = "a", a.seq = 1, a.info.state = "queued";
  job_row b;
  b.info.id = "b", b.seq = 1, b.info.state = "queued"; // same seq: UNIQUE violation
  CHECK(s.apply({a, b}));
  CHECK(s.load().jobs.empty());
}

TEST_CASE("tokens and invite codes are stored only as hashes") {
  auto t = new_token();
  CHECK(t.size() == 3 + 64);
  CHECK(hash_secret(t) != t);
  CHECK(hash_secret(t) == hash_secret(t));
  CHECK(new_token() != t);
  CHECK(new_uuid().size() == 36);
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
  CHECK(snap.jobs[0].info.priority == "medium");
  CHECK(snap.jobs[0].rank < snap.jobs[1].rank);
  CHECK(snap.jobs[0].info.after.empty());
  CHECK(snap.jobs[1].info.ram_bytes == 7u);
  CHECK(snap.jobs[1].info.exit_code == 0);
  REQUIRE(snap.allocations.size() == 1);
  CHECK(snap.allocations[0].peak_ram_bytes == 99u);
  CHECK(snap.allocations[0].lanes.empty());
  CHECK(snap.profiles.empty());
}
