// The store actor's durable hooks (docs/adr/0067: a submit's reply written
// from the store's thread): a commit's hook runs once its batch is durable,
// after the batch's reply was sent, and never for a batch that failed, also
// when its group failed and each batch was committed again alone.
#include "internal.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include "unit/scratch_dir.hpp"

#include <sqlite3.h>

#include <string>
#include <vector>

using namespace cq;
using namespace cq::actors;

namespace {

/// A batch of one queued job.
std::shared_ptr<const change_batch> one_job(const std::string& id, std::uint64_t seq) {
  job_row j;
  j.info.id = id, j.seq = seq, j.info.state = job_state::queued;
  j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
  return std::make_shared<const change_batch>(change_batch{j});
}

/// Whether a job row `id` is in the database, read through a connection of
/// its own (what another process would find there).
bool stored(const std::string& path, const std::string& id) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT count(*) FROM jobs WHERE id = ?", -1, &s, nullptr) ==
          SQLITE_OK);
  sqlite3_bind_text(s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  bool found = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == 1;
  sqlite3_finalize(s);
  sqlite3_close(db);
  return found;
}

} // namespace

TEST_CASE("a commit's hook runs once its batch is durable, and never for a batch that failed") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys(cfg);
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  test::temp_dir dir("cq-hook");
  auto path = (dir.path / "cq.db").string();
  auto store = coord::spawn_store(sys, std::make_shared<coord::store>(path), false, nullptr);
  std::vector<std::string> events; // hooks and replies, in the order they happened
  std::vector<std::string> hooked_before_stored;
  auto hook_for = [&](const std::string& id) {
    return durable_hook{std::make_shared<const std::function<void()>>([&, id] {
      events.push_back("hook " + id);
      if (!stored(path, id))
        hooked_before_stored.push_back(id);
    })};
  };
  // Every commit is in the store's mailbox before it runs: one group.
  auto commit = [&](std::vector<std::pair<std::string, std::uint64_t>> jobs) {
    sys.spawn([&, jobs](caf::event_based_actor* self) {
      for (auto& [id, seq] : jobs)
        self->request(store, caf::infinite, commit_atom::value, one_job(id, seq), hook_for(id))
            .then([&, id = id](const commit_result& r) {
              events.push_back((r.error.empty() ? "ok " : "failed ") + id);
            });
    });
    sched.run();
  };

  SECTION("a group that commits: every hook, each once its batch is stored") {
    commit({{"a", 1}, {"b", 2}});
    CHECK(events == std::vector<std::string>{"hook a", "hook b", "ok a", "ok b"});
  }
  SECTION("a batch that fails alone: its error, and no hook") {
    commit({{"a", 1}});
    events.clear();
    commit({{"b", 1}}); // seq 1 is a's
    CHECK(events == std::vector<std::string>{"failed b"});
  }
  SECTION("a group that fails: each batch again alone, a hook for each that commits") {
    commit({{"a", 1}});
    events.clear();
    commit({{"b", 1}, {"c", 2}});
    CHECK(events == std::vector<std::string>{"hook c", "failed b", "ok c"});
    CHECK(stored(path, "c"));
    CHECK_FALSE(stored(path, "b"));
  }
  CHECK(hooked_before_stored.empty());
  caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
  sched.run();
}
