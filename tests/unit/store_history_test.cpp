// The store's history expiry (store.cpp, history_expiry): the time window
// (ADR 0031) and the bound on finished jobs kept, whose pass takes the jobs
// that ended in its last millisecond by seq (ADR 0071).
#include "store/store.hpp"

#include <catch2/catch.hpp>

#include "scratch_dir.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <string>

using namespace cq;
using namespace cq::coord;

TEST_CASE("history expiry takes an expired job's allocations, and one that ended after its job "
          "in a later pass; a kept job keeps its own") {
  test::temp_dir t("cq-store");
  store s((t.path / "cq.db").string());
  auto job = [&](const char* id, std::uint64_t seq, job_state state, std::int64_t finished) {
    job_row j;
    j.info.id = id, j.seq = seq, j.info.state = state, j.info.finished_ms = finished;
    j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
    return j;
  };
  auto alloc = [](std::string id, const char* job, std::int64_t finished) {
    bus::allocation_info a;
    a.id = std::move(id), a.job = job, a.node = "n1", a.attempt = 1;
    a.state = finished ? alloc_state::finished : alloc_state::running;
    a.created_ms = 1, a.finished_ms = finished;
    return a;
  };
  REQUIRE_FALSE(s.apply({job("old", 1, job_state::succeeded, 100), alloc("a-old", "old", 90),
                         // a stop confirmed after its job was cancelled
                         job("late", 2, job_state::cancelled, 100), alloc("a-late", "late", 500),
                         job("new", 3, job_state::failed, 900), alloc("a-new", "new", 900),
                         job("live", 4, job_state::running, 0), alloc("a-live", "live", 0),
                         alloc("a-live-1", "live", 50)}));
  auto ids = [&] {
    std::vector<std::string> out;
    for (auto& a : s.load().allocations)
      out.push_back(a.id);
    std::sort(out.begin(), out.end());
    return out;
  };
  REQUIRE_FALSE(s.apply({history_expiry{200}}));
  CHECK(ids() == std::vector<std::string>{"a-late", "a-live", "a-live-1", "a-new"});
  // A pass without leftovers (the bound's) leaves the allocation that ended
  // after its job; one with them takes it.
  REQUIRE_FALSE(s.apply({history_expiry{600, 0, false}}));
  CHECK(ids() == std::vector<std::string>{"a-late", "a-live", "a-live-1", "a-new"});
  REQUIRE_FALSE(s.apply({history_expiry{600}}));
  CHECK(ids() == std::vector<std::string>{"a-live", "a-live-1", "a-new"});
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 2);
}

TEST_CASE("the events a pass kept back (its job held the newest event row) and environments no "
          "job names are taken by a pass with leftovers only") {
  test::temp_dir t("cq-store");
  store s((t.path / "cq.db").string());
  auto job = [&](std::uint64_t seq, std::int64_t finished, std::string env) {
    job_row j;
    j.info.id = "j" + std::to_string(seq), j.seq = seq, j.info.finished_ms = finished;
    j.info.state = finished ? job_state::succeeded : job_state::queued;
    j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
    j.env = std::make_shared<const bus::env_map>(bus::env_map{{"E", std::move(env)}});
    return j;
  };
  auto event = [](std::uint64_t seq, std::uint64_t n) {
    return event_row{"j" + std::to_string(seq), seq, n, "submitted", 1, ""};
  };
  REQUIRE_FALSE(s.apply({job(1, 100, "one"), event(1, 1), job(2, 0, "two"), event(2, 1)}));
  REQUIRE_FALSE(s.apply({event(1, 2)})); // job 1 holds the newest event row
  auto count = [&](const char* table) {  // read beside the store, as a reader of the file may
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((t.path / "cq.db").c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    auto sql = std::string("SELECT COUNT(*) FROM ") + table;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    auto n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
  };
  REQUIRE(count("events") == 3);
  REQUIRE(count("envs") == 2);
  REQUIRE_FALSE(s.apply({history_expiry{200, 0, false}}));
  CHECK(count("jobs") == 1); // job 1 is gone; its events stay with the newest row
  CHECK(count("events") == 3);
  CHECK(count("envs") == 2);
  REQUIRE_FALSE(s.apply({event(2, 2)})); // now job 2 holds the newest
  REQUIRE_FALSE(s.apply({history_expiry{200, 0, false}}));
  CHECK(count("events") == 4); // a pass without leftovers does not read for them
  CHECK(count("envs") == 2);
  REQUIRE_FALSE(s.apply({history_expiry{200}}));
  CHECK(count("events") == 2); // job 2's
  CHECK(count("envs") == 1);
}

TEST_CASE("a history expiry with a seq takes, of the jobs that ended in its millisecond, those "
          "submitted before that seq (ADR 0071)") {
  test::temp_dir t("cq-store");
  store s((t.path / "cq.db").string());
  auto job = [&](std::uint64_t seq, std::int64_t finished) {
    job_row j;
    j.info.id = "j" + std::to_string(seq), j.seq = seq, j.info.finished_ms = finished;
    j.info.state = finished ? job_state::succeeded : job_state::running;
    j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
    return j;
  };
  REQUIRE_FALSE(
      s.apply({job(1, 300), job(2, 100), job(3, 200), job(4, 200), job(5, 200), job(6, 0)}));
  auto seqs = [&] {
    std::vector<std::uint64_t> out;
    auto snap = s.load();
    for (std::size_t i = 0; i < snap.jobs.size(); ++i)
      out.push_back(snap.jobs[i].seq);
    std::sort(out.begin(), out.end());
    return out;
  };
  REQUIRE_FALSE(s.apply({history_expiry{200, 4}})); // ended at 100, and seq 3 of those at 200
  CHECK(seqs() == std::vector<std::uint64_t>{1, 4, 5, 6});
  REQUIRE_FALSE(s.apply({history_expiry{200}})); // none of those at 200
  CHECK(seqs() == std::vector<std::uint64_t>{1, 4, 5, 6});
  REQUIRE_FALSE(s.apply({history_expiry{300, 1}})); // none of those at 300
  CHECK(seqs() == std::vector<std::uint64_t>{1, 6});
  REQUIRE_FALSE(s.apply({history_expiry{300, 2}}));
  CHECK(seqs() == std::vector<std::uint64_t>{6}); // a live job stays
}
