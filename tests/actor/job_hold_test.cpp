// cq hold / cq release JOB: a queued job kept from starting, durably, until a
// person lets it go (see fixture.hpp).
#include "fixture.hpp"

TEST_CASE("a held job does not start until it is released, across a restart") {
  fixture f;
  auto id = f.submit({"true"}); // no node yet: it stays queued
  auto held = f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{id});
  CHECK(held.job.on_hold);
  f.add_node();
  CHECK(f.log->starts.empty());
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).waiting;
  REQUIRE(why.size() == 1);
  CHECK(why[0].find("cq release") != std::string::npos);
  // Durable: a restarted coordinator keeps it held.
  f.kill_coordinator();
  f.start();
  f.heartbeat();
  CHECK(f.log->starts.empty());
  CHECK(f.show(id).on_hold);
  // Released: it starts at once.
  auto let = f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{id, true});
  CHECK_FALSE(let.job.on_hold);
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == id);
  // Only a queued job can be held.
  auto r = f.call("owner-token", bus::job_hold_req{id});
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).code == errc::invalid_state);
  // Both changes are in the job's event stream.
  auto ev = f.ok<bus::events_rep>("owner-token", bus::events_req{{id}});
  std::vector<std::string> kinds;
  for (auto& e : ev.events)
    kinds.push_back(e.kind);
  CHECK(std::find(kinds.begin(), kinds.end(), "on_hold") != kinds.end());
  CHECK(std::find(kinds.begin(), kinds.end(), "off_hold") != kinds.end());
}

TEST_CASE("a read of one job's events that is not a full page continues after the newest event "
          "of any job, and misses none of its own") {
  fixture f;
  auto a = f.submit({"true"});
  auto b = f.submit({"true"}); // no node: both stay queued
  auto all = f.ok<bus::events_rep>("owner-token", bus::events_req{});
  REQUIRE(all.events.size() == 2);
  auto newest = all.events.back().cursor;
  REQUIRE(all.events.back().job == b);
  auto first = f.ok<bus::events_rep>("owner-token", bus::events_req{{a}, 0});
  REQUIRE(first.events.size() == 1);
  CHECK(first.events[0].cursor < newest);
  // Before, the cursor stayed at a's own event, and the next read passed
  // over b's again.
  CHECK(first.cursor == newest);
  CHECK(f.ok<bus::events_rep>("owner-token", bus::events_req{{a}, first.cursor}).events.empty());
  // A full page continues after its last event, not after the newest.
  auto paged = f.ok<bus::events_rep>("owner-token", bus::events_req{{}, 0, {}, 1});
  REQUIRE(paged.events.size() == 1);
  CHECK(paged.cursor == paged.events[0].cursor);
  // a's next event comes after the cursor.
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a});
  auto next = f.ok<bus::events_rep>("owner-token", bus::events_req{{a}, first.cursor});
  REQUIRE(next.events.size() == 1);
  CHECK(next.events[0].kind == "on_hold");
}

namespace {

/// A 16 GiB node running a 14 GiB job `r`, and a queued 8 GiB job `k` with
/// an actor (given by a hold and its release), waiting for r's memory; r's
/// exit is recorded and its release waits at the scheduler.
struct placed_behind {
  fixture f;
  std::string k;
  placed_behind() {
    f.add_node();
    auto r = f.run_big();
    k = f.submit_sized("k", 8);
    f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{k, false, {}});
    f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{k, true, {}});
    auto exit = fixture::report_of("exited", r, 0);
    exit.seq = ++f.report_seq;
    auto exited = f.send(f.node_token, exit);
    f.sched->run_jobs_filtered(all_but({"cq.scheduler"}));
    REQUIRE(exited->has_value());
  }
  /// Sends `req` for k as far as k's actor's mailbox, then lets the
  /// scheduler's pass place k (its placement lands behind `req`), then runs
  /// everything.
  std::optional<api_reply> behind(bus::coordinator_request req) {
    auto reply = f.send("owner-token", std::move(req));
    f.sched->run_jobs_filtered(all_but({"cq.scheduler", "cq.job"}));
    f.sched->run_jobs_filtered(named({"cq.scheduler"}));
    f.sched->run();
    return *reply;
  }
};

} // namespace

TEST_CASE("a placement that reaches a job after its hold gives the resources back; the job "
          "starts when released") {
  placed_behind p;
  auto& f = p.f;
  auto r = p.behind(bus::job_hold_req{p.k, false, {}});
  REQUIRE(r.has_value());
  CHECK(std::holds_alternative<bus::job_hold_rep>(r->body));
  CHECK(f.log->starts.size() == 1); // k is held: it did not start
  CHECK(f.show(p.k).state == "queued");
  CHECK(f.show(p.k).on_hold);
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{p.k, true, {}});
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].job == p.k);
  CHECK(f.fatal.empty());
}

TEST_CASE("a placement that reaches a job after its cancel gives the resources back") {
  placed_behind p;
  auto& f = p.f;
  auto r = p.behind(bus::cancel_req{p.k, {}});
  REQUIRE(r.has_value());
  CHECK(std::holds_alternative<bus::cancel_rep>(r->body));
  CHECK(f.log->starts.size() == 1);
  CHECK(f.show(p.k).state == "cancelled");
  // k's 8 GiB are free again: a 9 GiB job starts (beside a leaked 8 GiB
  // placement it would not fit).
  auto m = f.submit_sized("m", 9);
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].job == m);
  CHECK(f.fatal.empty());
}

TEST_CASE("cq hold's and cq cancel's replies carry the job's command, as cq show's does") {
  fixture f;
  auto id = f.submit({"python3", "train.py"}); // no node: it stays queued
  auto held = f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{id});
  CHECK(held.job.argv == bus::string_list{"python3", "train.py"});
  auto cancelled = f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  CHECK(cancelled.job.state == bus::job_state::cancelled);
  CHECK(cancelled.job.argv == bus::string_list{"python3", "train.py"});
}

TEST_CASE("a job submitted on hold (cq submit --hold) waits until it is released, and so does "
          "each task of an array") {
  fixture f;
  f.add_node();
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  bus::submit_req one{s};
  one.on_hold = true;
  auto rep = f.ok<bus::submit_rep>("owner-token", one);
  CHECK(rep.job.on_hold);
  auto id = rep.job.id;
  f.heartbeat();
  CHECK(f.log->starts.empty()); // a node with room: held all the same
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).waiting;
  REQUIRE(why.size() == 1);
  CHECK(why[0].find("cq release") != std::string::npos);
  auto ev = f.ok<bus::events_rep>("owner-token", bus::events_req{{id}});
  REQUIRE_FALSE(ev.events.empty());
  CHECK(ev.events[0].detail == "by owner, on hold");
  // Durable: a restarted coordinator keeps it held.
  f.kill_coordinator();
  f.start();
  f.heartbeat();
  CHECK(f.log->starts.empty());
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{id, true});
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == id);
  // An array's tasks: each held.
  bus::submit_req tasks{s, std::string("0b7d3f2a-9c1e-4e55-9a10-6c2d8e4f7a99")};
  tasks.array_indexes = std::vector<std::uint64_t>{0, 1, 2};
  tasks.on_hold = true;
  f.ok<bus::submit_rep>("owner-token", tasks);
  f.heartbeat();
  CHECK(f.log->starts.size() == 1);
  std::size_t held = 0;
  for (auto& j : f.ok<bus::ls_rep>("owner-token", bus::ls_req{}).jobs)
    held += j.on_hold ? 1 : 0;
  CHECK(held == 3);
}

TEST_CASE("holding or cancelling the job that holds the reservation lets a job kept back for it "
          "start at once") {
  // `small` fits now but would delay `big`'s reservation (when `first` ends by
  // its estimate), so it waits for `big`. Once `big` is held (or cancelled)
  // nothing is reserved for it: `small` must start then, not at whatever
  // event next made the scheduler plan again.
  for (bool cancel : {false, true}) {
    fixture f;
    auto spec = [](const char* name, std::uint64_t gib, std::uint64_t est_h) {
      bus::job_spec s;
      s.name = name;
      s.argv = {"true"};
      s.cwd = "/";
      s.ram_bytes = gib << 30;
      s.est_ms = est_h * 3600 * 1000;
      return bus::submit_req{s};
    };
    auto first = f.ok<bus::submit_rep>("owner-token", spec("first", 8, 1)).job.id;
    auto big = f.ok<bus::submit_rep>("owner-token", spec("big", 12, 1)).job.id;
    auto small = f.ok<bus::submit_rep>("owner-token", spec("small", 5, 2)).job.id;
    f.add_node();
    REQUIRE(f.log->starts.size() == 1);
    CHECK(f.log->starts[0].job == first);
    auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{small}).waiting;
    REQUIRE(why.size() == 1);
    CHECK(why[0].find("would delay job " + big) != std::string::npos);
    if (cancel)
      f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{big});
    else
      f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{big});
    REQUIRE(f.log->starts.size() == 2);
    CHECK(f.log->starts[1].job == small);
  }
}
