// Arrays (cq submit --array): one submit makes every task in one commit, a
// limit caps how many hold allocations at once, across a restart; a replay
// finds the same tasks (see fixture.hpp).
#include "fixture.hpp"

#include <algorithm>
#include <random>

namespace {

constexpr auto array_id = "0b7d3f2a-9c1e-4e55-9a10-6c2d8e4f7a01";

bus::submit_req array_of(std::vector<std::uint64_t> indexes, std::optional<std::uint64_t> limit) {
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 30;
  bus::submit_req r{s, std::string(array_id)};
  r.array_indexes = std::move(indexes);
  r.array_limit = limit;
  return r;
}

/// How many of the array's tasks hold allocations (are starting or running).
std::size_t live_starts(fixture& f) {
  std::size_t n = 0;
  for (auto& j : f.ok<bus::ls_rep>("owner-token", bus::ls_req{}).jobs)
    n += j.state == bus::job_state::starting || j.state == bus::job_state::running ? 1 : 0;
  return n;
}

} // namespace

TEST_CASE("an array's limit caps how many of its tasks hold allocations at once") {
  fixture f;
  f.add_node();
  auto rep = f.ok<bus::submit_rep>("owner-token", array_of({0, 1, 2, 3, 4}, 2));
  REQUIRE(rep.array_size == 5u);
  CHECK(rep.job.array == array_id);
  CHECK(rep.job.array_index == 0u);
  CHECK(rep.job.name == "true-0");
  auto ls = f.ok<bus::ls_rep>("owner-token", bus::ls_req{});
  REQUIRE(ls.jobs.size() == 5);
  REQUIRE(f.log->starts.size() == 2);
  for (auto& o : f.log->starts) {
    CHECK(o.env.at("CQ_ARRAY_ID") == array_id);
    CHECK(o.env.count("CQ_ARRAY_INDEX") == 1);
  }
  // A waiting task says why.
  std::string waiting;
  for (auto& j : ls.jobs)
    if (j.state == "queued")
      waiting = j.id;
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{waiting}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].find("at most 2 tasks at once") != std::string::npos);
  // One ends: the next starts, never more than two.
  auto first = f.log->starts[0];
  f.report("started", first);
  f.report("exited", first, 0);
  REQUIRE(f.log->starts.size() == 3);
  CHECK(live_starts(f) == 2);
  // A replay of the same submit finds the same tasks and makes none.
  auto again = f.ok<bus::submit_rep>("owner-token", array_of({0, 1, 2, 3, 4}, 2));
  CHECK(again.job.id == rep.job.id);
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 5);
  // The limit is durable: after a restart still two at most.
  auto snap = f.db->load();
  for (auto& info : snap.job_infos) {
    CHECK(info.array == array_id);
    CHECK(info.array_limit == 2u);
  }
  f.kill_coordinator();
  f.start();
  f.heartbeat();
  CHECK(live_starts(f) <= 2);
}

TEST_CASE("an array needs a client id and distinct indexes within bounds") {
  fixture f;
  f.add_node();
  auto no_id = array_of({0, 1}, std::nullopt);
  no_id.job_id.reset();
  auto r = f.call("owner-token", no_id);
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).code == errc::invalid_argument);
  r = f.call("owner-token", array_of({3, 3}, std::nullopt));
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).message.find("twice") != std::string::npos);
  r = f.call("owner-token", array_of({0, 1}, 0));
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.empty());
}

TEST_CASE("a second array submit with the same id that would make a task again is a conflict, "
          "and nothing is stored twice") {
  fixture f;
  f.add_node();
  f.ok<bus::submit_rep>("owner-token", array_of({1, 2}, std::nullopt));
  // Its first index is new, its second is not.
  auto r = f.call("owner-token", array_of({0, 1}, std::nullopt));
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).code == errc::job_conflict);
  CHECK(std::get<bus::error_info>(r.body).message.find("task 1 of array") != std::string::npos);
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 2);
  // A restart reads every row: none is damaged (a repeated id would be).
  f.kill_coordinator();
  f.start();
  CHECK(f.fatal.empty());
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 2);
}

TEST_CASE("a restart over a store with two job rows of one id stops, naming the row") {
  fixture f;
  f.add_node();
  f.ok<bus::submit_rep>("owner-token", array_of({1, 2}, std::nullopt));
  // Behind the coordinator's back: a row that repeats a task's id.
  auto snap = f.db->load();
  REQUIRE(snap.jobs.size() == 2);
  job_row twin;
  twin.info = snap.info(0);
  twin.seq = 99;
  REQUIRE_FALSE(f.db->apply({twin}));
  f.kill_coordinator();
  f.start();
  REQUIRE(f.fatal.size() == 1);
  CHECK(f.fatal[0].find("id: also the id of the job submitted as seq") != std::string::npos);
}

TEST_CASE("a job after an array starts once its last task succeeded, whatever order they end in") {
  // Each task's end looks at the dependent's remaining dependencies only
  // from the first one not yet met (job_entry::deps_met).
  fixture f;
  f.add_node();
  std::vector<std::uint64_t> indexes;
  for (std::uint64_t i = 0; i < 12; ++i)
    indexes.push_back(i);
  auto array = f.ok<bus::submit_rep>("owner-token", array_of(indexes, std::nullopt));
  REQUIRE(f.log->starts.size() == 12); // 1 GiB each on the 16 GiB node
  std::vector<bus::start_order> tasks(f.log->starts.begin(), f.log->starts.end());
  bus::job_spec s;
  s.name = "reduce";
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 30;
  // The array and one of its tasks again: each task is a dependency once.
  s.after = bus::string_list{array_id, array.job.id, array_id};
  auto reduce = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job;
  CHECK(reduce.after.size() == 12);
  std::mt19937 rng(2026);
  std::shuffle(tasks.begin(), tasks.end(), rng);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    f.report("started", tasks[i]);
    f.report("exited", tasks[i], 0);
    f.heartbeat();
    bool started = std::any_of(f.log->starts.begin(), f.log->starts.end(),
                               [&](auto& o) { return o.job == reduce.id; });
    CHECK(started == (i + 1 == tasks.size()));
  }
  CHECK(f.show(reduce.id).state == "starting");
}

namespace {

/// The jobs an array listing (ls_req::array) returns for `ref`, every page
/// followed with pages of `limit`.
std::vector<bus::job_info> tasks_named(fixture& f, const std::string& ref,
                                       std::optional<std::uint64_t> limit = std::nullopt) {
  bus::ls_req q{true, limit};
  q.array = ref;
  std::vector<bus::job_info> out;
  for (;;) {
    auto rep = f.ok<bus::ls_rep>("owner-token", q);
    out.insert(out.end(), rep.jobs.begin(), rep.jobs.end());
    if (!rep.next_cursor)
      return out;
    q.cursor = rep.next_cursor;
  }
}

std::vector<std::string> ids_of(const std::vector<bus::job_info>& jobs) {
  std::vector<std::string> ids;
  for (auto& j : jobs)
    ids.push_back(j.id);
  return ids;
}

} // namespace

TEST_CASE("a listing of an array's tasks finds the array by its id, a prefix of it or its name") {
  // cq show, cq cancel and cq wait ask for an array this way, instead of
  // reading every job to find its tasks. No node: every task stays queued.
  fixture f;
  auto first = f.ok<bus::submit_rep>("owner-token", array_of({0, 1, 2, 3, 4}, std::nullopt));
  auto named = [&](const char* id, const char* name, std::vector<std::uint64_t> indexes) {
    auto r = array_of(std::move(indexes), std::nullopt);
    r.job_id = id;
    r.spec.name = name;
    return f.ok<bus::submit_rep>("owner-token", r);
  };
  named("3f1c9b7e-2d4a-4c8e-9b6f-0a1e2d3c4b5a", "sweep", {7, 8});
  bus::job_spec solo;
  solo.name = "solo";
  solo.argv = {"true"};
  solo.cwd = "/";
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{solo});
  auto all = f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs;
  REQUIRE(all.size() == 8);
  std::vector<std::string> first_tasks, sweep_tasks;
  for (auto& j : all)
    if (j.array == array_id)
      first_tasks.push_back(j.id);
    else if (!j.array.empty())
      sweep_tasks.push_back(j.id);
  REQUIRE(first_tasks.size() == 5);
  REQUIRE(sweep_tasks.size() == 2);

  CHECK(ids_of(tasks_named(f, array_id)) == first_tasks);
  CHECK(ids_of(tasks_named(f, "0b7d3f2a")) == first_tasks);
  CHECK(ids_of(tasks_named(f, "true")) == first_tasks); // its tasks are true-0 .. true-4
  CHECK(ids_of(tasks_named(f, "sweep")) == sweep_tasks);
  CHECK(ids_of(tasks_named(f, "true", 2)) == first_tasks); // in pages of two
  bus::ls_req counted{true, std::uint64_t{2}};
  counted.array = "true";
  CHECK(f.ok<bus::ls_rep>("owner-token", counted).total == 5u);
  // A job that is not an array's, and a name no job has: no tasks.
  for (auto* none : {"solo", "nosuch", first.job.id.c_str()}) {
    bus::ls_req q{true};
    q.array = none;
    auto rep = f.ok<bus::ls_rep>("owner-token", q);
    CHECK(rep.jobs.empty());
    CHECK(rep.total == 0u);
  }

  // A second array named sweep: ambiguous while both have tasks not ended;
  // the one with tasks not ended once the other ended; ambiguous again once
  // both ended, both named each time.
  named("3f1c9b7e-ffff-4c8e-9b6f-0a1e2d3c4b5a", "sweep", {1, 2, 3});
  auto refused = [&](const std::string& ref) {
    bus::ls_req q{true};
    q.array = ref;
    auto r = f.call("owner-token", q);
    REQUIRE(std::holds_alternative<bus::error_info>(r.body));
    auto& e = std::get<bus::error_info>(r.body);
    CHECK(e.code == errc::invalid_argument);
    return e.message;
  };
  // Each id as long as it takes to tell them apart.
  CHECK(refused("sweep") == "job: 'sweep' is the name of 2 arrays: 3f1c9b7e-2 (not ended), "
                            "3f1c9b7e-f (not ended); give the array's id");
  CHECK(ids_of(tasks_named(f, "3f1c9b7e-2")) == sweep_tasks); // a longer prefix tells them apart
  for (auto& id : sweep_tasks)
    f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  auto second = tasks_named(f, "sweep");
  REQUIRE(second.size() == 3);
  CHECK(second[0].array == "3f1c9b7e-ffff-4c8e-9b6f-0a1e2d3c4b5a");
  for (auto& j : second)
    f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{j.id});
  CHECK(refused("sweep") == "job: 'sweep' is the name of 2 arrays: 3f1c9b7e-2 (ended), "
                            "3f1c9b7e-f (ended); give the array's id");
  CHECK(refused("3f1c9b7e").find("'3f1c9b7e' begins the ids of 2 arrays") != std::string::npos);
  bus::ls_req q{true};
  // A listing of rows does not take it.
  q.array = array_id;
  q.rows = true;
  auto r = f.call("owner-token", q);
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).code == errc::invalid_argument);
}
