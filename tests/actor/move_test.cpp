// cq move (SPEC section 9) on the coordinator's real actors.
#include "fixture.hpp"
#include "sim/store.hpp"

#include <algorithm>
#include <map>
#include <random>

namespace {

std::string submit_named(fixture& f, const std::string& name, const std::string& priority) {
  bus::job_spec s;
  s.name = name;
  s.argv = {"true"};
  s.cwd = "/";
  s.priority = priority;
  return f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
}

/// Names of the live jobs of one level in serving order, checking that
/// positions are dense (1..n).
std::vector<std::string> level_order(fixture& f, const std::string& priority) {
  auto jobs = f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, {}}).jobs;
  std::vector<bus::job_info> in;
  for (auto& j : jobs)
    if (j.priority == priority)
      in.push_back(j);
  std::sort(in.begin(), in.end(), [](auto& a, auto& b) { return a.position < b.position; });
  std::vector<std::string> names;
  for (std::size_t i = 0; i < in.size(); ++i) {
    CHECK(in[i].position == i + 1);
    names.push_back(in[i].name);
  }
  return names;
}

using names = std::vector<std::string>;

/// Starts every queued job pass after pass: each start leaves the queue, and
/// the next pass reads what is left once the jobs before it ended. Returns
/// the names of the jobs in the order they started.
names start_all(fixture& f, std::map<std::string, std::string>& name_of) {
  names started;
  for (std::size_t seen = 0; seen < f.log->starts.size() && started.size() < name_of.size();) {
    std::vector<bus::start_order> now(f.log->starts.begin() + static_cast<std::ptrdiff_t>(seen),
                                      f.log->starts.end());
    seen = f.log->starts.size();
    for (auto& o : now) {
      started.push_back(name_of[o.job]);
      f.report("started", o);
      f.report("exited", o, 0);
    }
    f.heartbeat();
  }
  return started;
}

struct queue_fixture : fixture {
  std::string j1, j2, j3, k1;
  queue_fixture() {
    // No node: every job stays queued.
    j1 = submit_named(*this, "j1", "medium");
    j2 = submit_named(*this, "j2", "medium");
    j3 = submit_named(*this, "j3", "medium");
    k1 = submit_named(*this, "k1", "high");
  }
  bus::move_rep move(std::string job, std::string placement, std::optional<std::string> target = {},
                     std::optional<std::string> priority = {}) {
    return ok<bus::move_rep>("owner-token", bus::move_req{job, placement, target, priority});
  }
  bus::error_info refused(std::string job, std::string placement,
                          std::optional<std::string> target = {},
                          std::optional<std::string> priority = {}) {
    auto r = call("owner-token", bus::move_req{job, placement, target, priority});
    REQUIRE(std::holds_alternative<bus::error_info>(r.body));
    return std::get<bus::error_info>(r.body);
  }
};

} // namespace

TEST_CASE("new jobs join the back of their level") {
  queue_fixture f;
  CHECK(level_order(f, "medium") == names{"j1", "j2", "j3"});
  CHECK(level_order(f, "high") == names{"k1"});
}

TEST_CASE("move --front puts a job first in its level") {
  queue_fixture f;
  auto r = f.move(f.j3, "front");
  CHECK(r.job.position == 1);
  CHECK(level_order(f, "medium") == names{"j3", "j1", "j2"});
}

TEST_CASE("move --back puts a job last in its level") {
  queue_fixture f;
  f.move(f.j1, "back");
  CHECK(level_order(f, "medium") == names{"j2", "j3", "j1"});
}

TEST_CASE("move --before and --after place a job next to its target") {
  queue_fixture f;
  f.move(f.j3, "before", f.j1);
  CHECK(level_order(f, "medium") == names{"j3", "j1", "j2"});
  f.move(f.j3, "after", f.j1);
  CHECK(level_order(f, "medium") == names{"j1", "j3", "j2"});
  f.move(f.j1, "after", f.j2);
  CHECK(level_order(f, "medium") == names{"j3", "j2", "j1"});
}

TEST_CASE("move --priority alone joins the back of the new level") {
  queue_fixture f;
  auto r = f.move(f.j1, "", {}, std::string("high"));
  CHECK(r.job.priority == "high");
  CHECK(level_order(f, "high") == names{"k1", "j1"});
  CHECK(level_order(f, "medium") == names{"j2", "j3"});
}

TEST_CASE("move --front with --priority goes to the front of the new level") {
  queue_fixture f;
  f.move(f.j2, "front", {}, std::string("high"));
  CHECK(level_order(f, "high") == names{"j2", "k1"});
}

TEST_CASE("move --before a job of another level takes that job's level") {
  queue_fixture f;
  auto r = f.move(f.j1, "before", f.k1);
  CHECK(r.job.priority == "high");
  CHECK(level_order(f, "high") == names{"j1", "k1"});
}

TEST_CASE("repeated moves into the same gap renumber the level and keep the order exact") {
  queue_fixture f;
  // Each move halves the gap before j2; after about 20 the ranks touch.
  for (int i = 0; i < 30; ++i) {
    f.move(f.j3, "before", f.j2);
    f.move(f.j1, "before", f.j3);
  }
  CHECK(level_order(f, "medium") == names{"j1", "j3", "j2"});
}

TEST_CASE("refused moves name their reason and change nothing") {
  queue_fixture f;
  auto before = f.db->load();
  CHECK(f.refused(f.j1, "before", f.j1).message.rfind("self_target", 0) == 0);
  CHECK(f.refused(f.j1, "after", std::string("no-such-job")).message.rfind("target_not_found", 0) ==
        0);
  CHECK(f.refused(f.j1, "before", f.k1, std::string("low")).message.rfind("level_mismatch", 0) ==
        0);
  CHECK(f.refused(f.j1, "front", f.j2).message.rfind("conflicting_flags", 0) == 0);
  CHECK(f.refused(f.j1, "").message.rfind("conflicting_flags", 0) == 0);
  CHECK(f.refused(f.j1, "sideways").message.rfind("conflicting_flags", 0) == 0);
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{f.j2});
  auto after_cancel = f.db->load();
  CHECK(f.refused(f.j1, "after", f.j2).message.rfind("target_terminal", 0) == 0);
  CHECK(f.refused(f.j2, "front").code == errc::invalid_state);
  CHECK(level_order(f, "medium") == names{"j1", "j3"});
  // Nothing stored by any refusal: the first six against the snapshot taken
  // before them, the last two against the one taken after the cancel.
  auto same_order = [](coord::snapshot a, coord::snapshot b, bool skip_j2, const std::string& j2) {
    REQUIRE(a.jobs.size() == b.jobs.size());
    for (std::size_t i = 0; i < a.jobs.size(); ++i) {
      CHECK(a.jobs[i].id == b.jobs[i].id);
      CHECK(a.jobs[i].rank == b.jobs[i].rank);
      CHECK(a.info(i).priority == b.info(i).priority);
      if (!(skip_j2 && a.jobs[i].id == j2))
        CHECK(a.info(i).state == b.info(i).state);
    }
  };
  same_order(before, after_cancel, true, f.j2);
  same_order(after_cancel, f.db->load(), false, f.j2);
}

TEST_CASE("the serving order survives a coordinator restart") {
  queue_fixture f;
  f.move(f.j3, "front");
  f.move(f.j1, "", {}, std::string("high"));
  f.kill_coordinator();
  f.start();
  CHECK(level_order(f, "medium") == names{"j3", "j2"});
  CHECK(level_order(f, "high") == names{"k1", "j1"});
}

TEST_CASE("a high-priority job is placed before an earlier low one") {
  fixture f;
  bus::job_spec low;
  low.name = "low";
  low.argv = {"true"};
  low.cwd = "/";
  low.priority = "low";
  low.ram_bytes = 12ull << 30;
  auto high = low;
  high.name = "high";
  high.priority = "high";
  auto l = f.ok<bus::submit_rep>("owner-token", bus::submit_req{low}).job.id;
  auto h = f.ok<bus::submit_rep>("owner-token", bus::submit_req{high}).job.id;
  f.add_node(); // 16 GiB: room for one of them
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == h);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{l}).waiting;
  REQUIRE_FALSE(why.empty());
  // It holds the reservation for when the high job ends, and says what it
  // lacks now. The high job has no estimate of its own (no --est, never
  // measured): the hour it counts is a guess, not a countdown to show.
  CHECK(why[0] == "next on box, once a running job ends (no estimate of it yet)");
  CHECK(std::any_of(why.begin(), why.end(), [](auto& w) {
    return w.find("box: needs 12.0 GiB RAM") != std::string::npos;
  }));
}

TEST_CASE("a reservation behind a job with an estimate says when, by the estimate") {
  fixture f;
  auto twelve_gib = [](const char* name, std::optional<std::uint64_t> est_ms) {
    bus::job_spec s{name, {"true"}, "/"};
    s.ram_bytes = 12ull << 30;
    s.est_ms = est_ms;
    return s;
  };
  auto first = twelve_gib("first", 20 * 60 * 1000); // --est 20m
  auto second = twelve_gib("second", std::nullopt);
  auto a = f.ok<bus::submit_rep>("owner-token", bus::submit_req{first}).job.id;
  auto b = f.ok<bus::submit_rep>("owner-token", bus::submit_req{second}).job.id;
  f.add_node();
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == a);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{b}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].rfind("next on box, in ~", 0) == 0);
  CHECK(why[0].ends_with(" by estimates"));
  // The job actually submitted without an estimate is marked so: cq show -v says it.
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{b}).job.est_default);
  CHECK_FALSE(f.ok<bus::show_rep>("owner-token", bus::show_req{a}).job.est_default);
}

TEST_CASE("a pass starts jobs in the serving order after submits and moves in any order") {
  // The scheduler keeps its queue's order beside its map (docs/adr/0062):
  // jobs that go before others, moves and level changes must leave the two
  // the same, or a pass would start jobs out of order.
  fixture f;
  std::mt19937 rng(62);
  const char* levels[] = {"high", "medium", "low"};
  std::vector<std::string> ids;
  std::map<std::string, std::string> name_of;
  for (int i = 0; i < 24; ++i) {
    bus::job_spec s;
    s.name = "j" + std::to_string(i);
    s.argv = {"true"};
    s.cwd = "/";
    s.priority = levels[rng() % 3];
    s.ram_bytes = 4ull << 30; // three at a time on the 16 GiB node
    ids.push_back(f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id);
    name_of[ids.back()] = s.name;
  }
  const char* placements[] = {"front", "back", "before", "after", ""};
  for (int i = 0; i < 40; ++i) {
    auto& job = ids[rng() % ids.size()];
    std::string placement = placements[rng() % 5];
    std::optional<std::string> target, priority;
    if (placement == "before" || placement == "after") {
      target = ids[rng() % ids.size()];
      if (*target == job)
        continue;
    }
    if (placement.empty() || (!target && rng() % 3 == 0)) // a target sets the level
      priority = levels[rng() % 3];
    f.ok<bus::move_rep>("owner-token", bus::move_req{job, placement, target, priority});
  }
  names expected;
  for (auto* level : levels)
    for (auto& n : level_order(f, level))
      expected.push_back(n);
  f.add_node();
  CHECK(start_all(f, name_of) == expected);
}

TEST_CASE("a pass starts jobs in the serving order after moves renumber a long level") {
  // A renumbered level's jobs keep their places: the scheduler re-keys each
  // where it is (docs/adr/0062). A move to the front first gives one job a
  // rank below all others, so that renumbering also moves some jobs past
  // others' old ranks, which takes them out and puts them back.
  fixture f;
  std::vector<std::string> ids;
  std::map<std::string, std::string> name_of;
  for (int i = 0; i < 60; ++i) {
    bus::job_spec s;
    s.name = "j" + std::to_string(i);
    s.argv = {"true"};
    s.cwd = "/";
    s.priority = i % 10 == 0 ? "high" : "medium";
    s.ram_bytes = 4ull << 30; // three at a time on the 16 GiB node
    ids.push_back(f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id);
    name_of[ids.back()] = s.name;
  }
  f.ok<bus::move_rep>("owner-token", bus::move_req{ids[59], "front", {}, {}});
  for (int i = 0; i < 25; ++i) { // each pair halves the gap before j31
    f.ok<bus::move_rep>("owner-token", bus::move_req{ids[33], "before", ids[31], {}});
    f.ok<bus::move_rep>("owner-token", bus::move_req{ids[32], "before", ids[33], {}});
  }
  names expected;
  for (auto* level : {"high", "medium"})
    for (auto& n : level_order(f, level))
      expected.push_back(n);
  auto medium = level_order(f, "medium");
  REQUIRE(medium.size() == 54);
  CHECK(medium.front() == "j59");
  CHECK(std::find(medium.begin(), medium.end(), "j32") + 1 ==
        std::find(medium.begin(), medium.end(), "j33"));
  f.add_node();
  CHECK(start_all(f, name_of) == expected);
}

TEST_CASE("ls sends at most its limit of jobs and says how many matched") {
  queue_fixture f;
  auto r = f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, std::uint64_t{2}});
  CHECK(r.jobs.size() == 2);
  REQUIRE(r.total);
  CHECK(*r.total == 4);
  auto all = f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, {}});
  CHECK(all.jobs.size() == 4);
  CHECK(*all.total == 4);
}

namespace {

/// The reference model of the serving order: job names per level, in order.
struct order_model {
  std::map<std::string, std::vector<std::string>> levels; ///< high, medium, low

  std::string level_of(const std::string& n) const {
    for (auto& [l, v] : levels)
      if (std::find(v.begin(), v.end(), n) != v.end())
        return l;
    return "";
  }
  void erase(const std::string& n) {
    for (auto& [l, v] : levels)
      std::erase(v, n);
  }
  /// Applies a move the coordinator accepted.
  void move(const std::string& n, const std::string& placement, const std::string& target,
            const std::string& priority) {
    auto level = !target.empty() ? level_of(target) : !priority.empty() ? priority : level_of(n);
    bool same_level_priority_only = placement.empty() && level_of(n) == level;
    if (same_level_priority_only)
      return;
    erase(n);
    auto& v = levels[level];
    if (placement == "front")
      v.insert(v.begin(), n);
    else if (placement == "before")
      v.insert(std::find(v.begin(), v.end(), target), n);
    else if (placement == "after")
      v.insert(std::next(std::find(v.begin(), v.end(), target)), n);
    else
      v.push_back(n);
  }
};

} // namespace

TEST_CASE("random sequences of moves keep the serving order exact, durable and every job alive") {
  const std::vector<std::string> names{"a", "b", "c", "d", "e", "f"};
  const std::vector<std::string> prios{"high", "medium", "low"};
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    fixture f;
    order_model model;
    std::map<std::string, std::string> id; // name -> job id
    for (auto& n : names) {
      auto p = prios[rng() % 3];
      id[n] = submit_named(f, n, p);
      model.levels[p].push_back(n);
    }
    auto check_order = [&](const char* when) {
      INFO(when);
      for (auto& p : prios)
        CHECK(level_order(f, p) == model.levels[p]);
    };
    int renumber_moves = 0;
    for (int step = 0; step < 150; ++step) {
      auto n = names[rng() % names.size()];
      std::string placement, target, priority;
      switch (rng() % 6) {
      case 0:
        placement = "front";
        break;
      case 1:
        placement = "back";
        break;
      case 2:
      case 3: {
        // Often into the same gap, so that levels run out of ranks and renumber.
        placement = rng() % 2 ? "before" : "after";
        target = names[rng() % names.size()];
        if (target == n)
          target =
              names[(std::find(names.begin(), names.end(), n) - names.begin() + 1) % names.size()];
        ++renumber_moves;
        break;
      }
      default:
        priority = prios[rng() % 3];
        placement = rng() % 2 ? "" : (rng() % 2 ? "front" : "back");
        break;
      }
      if (!priority.empty() && placement.empty() && rng() % 2)
        priority = model.level_of(n); // --priority of the level it is in: no change
      bus::move_req m{id[n], placement,
                      target.empty() ? std::nullopt : std::optional<std::string>(id[target]),
                      priority.empty() ? std::nullopt : std::optional<std::string>(priority)};
      auto r = f.call("owner-token", m);
      auto* e = std::get_if<bus::error_info>(&r.body);
      REQUIRE_FALSE(e);
      model.move(n, placement, target, priority);
      if (step % 10 == 0)
        check_order("after a move");
    }
    check_order("after the sequence");
    // The database holds the same order: a restarted coordinator serves it.
    f.kill_coordinator();
    f.start();
    check_order("after a restart");
    // Every job actor is alive: each one answers its cancel.
    for (auto& n : names)
      CHECK(f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id[n]}).job.state == "cancelled");
    CHECK(renumber_moves > 0);
  }
}

TEST_CASE("twenty moves into one gap renumber the level and every job actor still answers") {
  queue_fixture f;
  // Each pair halves the gap before j2; after about twenty the ranks touch.
  for (int i = 0; i < 25; ++i) {
    f.move(f.j3, "before", f.j2);
    f.move(f.j1, "before", f.j3);
  }
  CHECK(level_order(f, "medium") == names{"j1", "j3", "j2"});
  // Before the fix a renumber killed the level's job actors (request_receiver_down).
  for (auto& j : {f.j1, f.j2, f.j3})
    CHECK(f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{j}).job.state == "cancelled");
}

TEST_CASE("a running job has no queue position and cannot be moved") {
  fixture f;
  f.add_node();
  auto run = submit_named(f, "run", "medium");
  auto queued = submit_named(f, "queued", "medium");
  REQUIRE(f.log->starts.size() == 2);
  f.report("started", f.log->starts[0]);
  auto j = f.show(run);
  CHECK(j.state == "running");
  CHECK(j.position == 0);
  auto refused = f.call("owner-token", bus::move_req{run, "front", {}, {}});
  REQUIRE(std::holds_alternative<bus::error_info>(refused.body));
  auto e = std::get<bus::error_info>(refused.body);
  CHECK(e.code == errc::invalid_state);
  CHECK(e.message.rfind("not_queued", 0) == 0);
  auto jobs = f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, {}}).jobs;
  for (auto& x : jobs)
    if (x.id == run)
      CHECK(x.position == 0);
  (void)queued;
}

TEST_CASE(
    "a move whose commit returns after the scheduler placed the job does not queue it again") {
  // The api answers a move of a job without an actor after its commit. When
  // the scheduler placed the job meanwhile, its placement waits at the api
  // behind the commit's reply. The reply queued the job again; placed a
  // second time while it held an allocation, the scheduler stopped the
  // coordinator (found by cq-sim --swarm 1 --seed 9044 --nodes 6 --jobs 300).
  fixture f;
  f.kill_coordinator();
  // The move's commit (the batch with an order row) is held back until the
  // store in front of the real one gets flush_atom.
  auto plan = std::make_shared<sim::store_plan>();
  plan->hold = [](const change_batch& b) {
    return std::any_of(b.begin(), b.end(),
                       [](auto& c) { return std::holds_alternative<order_row>(c); });
  };
  store_actor held_store;
  f.opts.wrap_store = [&](caf::actor_system& s, store_actor real) {
    return held_store = sim::spawn_faulty_store(s, real, plan);
  };
  f.start();
  f.add_node(); // 16 GiB
  auto r = f.run_big();
  auto k = f.submit_sized("k", 8);
  REQUIRE(f.log->starts.size() == 1); // k waits for r's memory, without an actor
  auto moved = f.send("owner-token", bus::move_req{k, "front", {}, {}});
  f.sched->run();
  REQUIRE_FALSE(moved->has_value());
  // r's exit reaches the api, which hands it on; then the move's reply
  // reaches the api; only then do r's end and k's placement run, and the
  // placement waits at the api behind the reply.
  auto exit = fixture::report_of("exited", r, 0);
  exit.seq = ++f.report_seq;
  auto exited = f.send(f.node_token, exit);
  f.sched->run_jobs_filtered(all_but({"cq.api", "sim.store", "cq.store"}));
  REQUIRE(f.sched->prioritize(f.ctx->api));
  f.sched->run_once();
  caf::anon_send(held_store, flush_atom::value);
  f.sched->run_jobs_filtered(named({"sim.store", "cq.store"}));
  f.sched->run_jobs_filtered(all_but({"cq.api"}));
  f.sched->run();
  f.advance(std::chrono::seconds(5));
  REQUIRE(moved->has_value());
  CHECK(std::holds_alternative<bus::move_rep>((*moved)->body));
  REQUIRE(exited->has_value());
  CHECK(std::holds_alternative<bus::report_rep>((*exited)->body));
  REQUIRE(f.log->starts.size() == 2); // k, once
  CHECK(f.log->starts[1].job == k);
  CHECK(f.fatal.empty());
  CHECK(f.show(k).state == "starting");
}

TEST_CASE("a move that reaches a job's actor after the scheduler placed the job does not queue "
          "it again") {
  // A queued job with an actor (here after a hold and its release) is placed
  // by a pass while the api's move of it is on its way to the actor; the
  // move queued it again (an enqueue, not a re-key), and the next pass
  // placed it a second time while it held an allocation, which stops the
  // coordinator (found by cq-sim --swarm 1 --seed 71138 --nodes 6 --jobs
  // 300).
  fixture f;
  f.add_node(); // 16 GiB
  auto r = f.run_big();
  auto k = f.submit_sized("k", 8);
  // A hold and its release give k an actor, in the scheduler's queue.
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{k, false, {}});
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{k, true, {}});
  REQUIRE(f.log->starts.size() == 1);
  // r's exit is recorded; its release waits at the scheduler.
  auto exit = fixture::report_of("exited", r, 0);
  exit.seq = ++f.report_seq;
  auto exited = f.send(f.node_token, exit);
  f.sched->run_jobs_filtered(all_but({"cq.scheduler"}));
  REQUIRE(exited->has_value());
  // The move is committed and sent to k's actor, which does not run yet.
  auto moved = f.send("owner-token", bus::move_req{k, "front", {}, {}});
  f.sched->run_jobs_filtered(all_but({"cq.scheduler", "cq.job"}));
  REQUIRE(moved->has_value());
  // The scheduler's pass places k; then k's actor takes the move, then the
  // placement.
  f.sched->run_jobs_filtered(named({"cq.scheduler"}));
  f.sched->run();
  f.advance(std::chrono::seconds(5));
  REQUIRE(f.log->starts.size() == 2); // k, once
  CHECK(f.log->starts[1].job == k);
  CHECK(f.fatal.empty());
  CHECK(f.show(k).state == "starting");
}

TEST_CASE("cq show gives a queued job's position whether or not a listing counted it") {
  // A listing counts every position; show reuses them until the order or a
  // job's state changes, and counts its own after.
  queue_fixture f;
  auto position = [&](const std::string& id) { return f.show(id).position; };
  CHECK(position(f.j3) == 3); // counted by show
  f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, {}});
  CHECK(position(f.j3) == 3); // the listing's count
  CHECK(position(f.k1) == 1);
  f.move(f.j3, "front");
  CHECK(position(f.j3) == 1);
  CHECK(position(f.j1) == 2);
  f.ok<bus::ls_rep>("owner-token", bus::ls_req{false, {}});
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{f.j3});
  CHECK(position(f.j1) == 1);
  CHECK(position(f.j2) == 2);
  CHECK(position(f.j3) == 0);
}
