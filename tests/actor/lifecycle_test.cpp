// Job lifecycle on the coordinator's real actors (see fixture.hpp).
#include "fixture.hpp"
#include "sim/store.hpp"

#include <algorithm>

TEST_CASE("a submitted job is placed, started, and succeeds on a simulated node") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sh", "-c", "echo hello"});
  REQUIRE(f.log->starts.size() == 1);
  auto order = f.log->starts[0];
  CHECK(order.job == id);
  CHECK(order.attempt == 1);
  CHECK(order.argv == std::vector<std::string>{"sh", "-c", "echo hello"});
  CHECK(f.show(id).state == "starting");
  f.report("started", order);
  CHECK(f.show(id).state == "running");
  f.report("exited", order, 0);
  auto j = f.show(id);
  CHECK(j.state == "succeeded");
  CHECK(j.exit_code == 0);
  // The outcome is durable, not just in memory.
  auto snap = f.db->load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).state == "succeeded");
  CHECK(snap.allocations.at(0).state == "finished");
  // A re-sent exit report (the node did not see the ack) changes nothing.
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
}

TEST_CASE("a log read while the start is on its way is empty, not an error") {
  // A follower (cq run, cq logs -f) reads as soon as the job has an
  // allocation; the node may not have made its directory yet, and answers
  // not_found. That is "nothing written yet" for the job's live allocation,
  // and still an error once the job has ended.
  fixture f;
  f.add_node();
  auto id = f.submit({"sh", "-c", "echo hello"});
  REQUIRE(f.show(id).state == "starting");
  f.log->read_log_error = bus::error_info{errc::not_found, "allocation is unknown on this node"};
  auto early = f.ok<bus::logs_rep>("owner-token", bus::logs_req{id});
  CHECK(early.allocation == f.log->starts.at(0).allocation);
  CHECK(early.data.empty());
  CHECK(early.next_offset == 0);
  CHECK_FALSE(early.terminal);
  auto order = f.log->starts.at(0);
  f.report("started", order);
  f.report("exited", order, 0);
  auto late = f.call("owner-token", bus::logs_req{id});
  auto* e = std::get_if<bus::error_info>(&late.body);
  REQUIRE(e != nullptr);
  CHECK(e->code == errc::not_found);
}

TEST_CASE("ls says how much of each id tells it apart from every job's, listed or not") {
  // Two jobs whose ids differ in their last character: a listing of the
  // first alone must not cut its id where the second would match it too.
  fixture f;
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 50; // stays queued
  auto a = std::string("aaaaaaaa-bbbb-4ccc-8ddd-000000000001");
  auto b = std::string("aaaaaaaa-bbbb-4ccc-8ddd-000000000002");
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{s, a, true});
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{s, b, true});
  bus::ls_req one{true, 1};
  auto page = f.ok<bus::ls_rep>("owner-token", one);
  REQUIRE(page.jobs.size() == 1);
  CHECK(page.id_prefix == 36u);
  // A prefix that long finds the job; a shorter one names both.
  CHECK(f.show(a.substr(0, 36)).id == a);
  auto both = f.call("owner-token", bus::show_req{a.substr(0, 35)});
  REQUIRE(std::holds_alternative<bus::error_info>(both.body));
  CHECK(std::get<bus::error_info>(both.body).message.find("matches 2 jobs") != std::string::npos);
  // A third job far from both: listed alone, 8 characters do.
  s.argv = {"false"};
  auto c = f.ok<bus::submit_rep>(
                "owner-token",
                bus::submit_req{s, std::string("f0000000-0000-4000-8000-000000000000"), true})
               .job.id;
  bus::ls_req rest{true, 10, 2};
  auto last = f.ok<bus::ls_rep>("owner-token", rest);
  REQUIRE(last.jobs.size() == 1);
  CHECK(last.jobs[0].id == c);
  CHECK(last.id_prefix == 8u);
}

TEST_CASE("a job exiting non-zero fails with its exit code") {
  fixture f;
  f.add_node();
  auto id = f.submit({"false"});
  auto order = f.log->starts.at(0);
  f.report("started", order);
  f.report("exited", order, 3);
  auto j = f.show(id);
  CHECK(j.state == "failed");
  CHECK(j.reason == "exit_code");
  CHECK(j.exit_code == 3);
  // Its event says the exit, not the reason's name again.
  auto ev = f.ok<bus::events_rep>("owner-token", bus::events_req{{id}}).events;
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.back().kind == "failed");
  CHECK(ev.back().detail == "exit 3");
}

TEST_CASE("a start no connection of the node ever takes is fenced, given up once the node "
          "reports it ended, and the job placed again") {
  fixture f;
  f.add_node();
  f.log->reachable = false; // orders are lost on the way
  auto id = f.submit({"true"});
  CHECK(f.log->starts.empty());
  // Re-sent every order_retry, never answered: fenced at the start timeout.
  // The node may have the start, so the job does not run elsewhere yet.
  f.advance(f.ctx->cfg.start_timeout);
  auto allocs = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations;
  REQUIRE(allocs.size() == 1);
  CHECK(allocs[0].state == alloc_state::unknown);
  CHECK(allocs[0].stop_cause == "fence");
  CHECK(f.show(id).state == "starting");
  // The node is reachable again and takes the stop. Taking it is not enough
  // (ADR 0023): the node may have launched the start before it read the stop.
  f.log->reachable = true;
  f.advance_by_steps(f.ctx->cfg.order_timeout + 2 * f.ctx->cfg.order_retry,
                     std::chrono::milliseconds(500));
  REQUIRE_FALSE(f.log->stops.empty());
  CHECK(f.log->stops.back().allocation == allocs[0].id);
  f.heartbeat();
  CHECK(f.log->starts.empty());
  CHECK(f.show(id).state == "starting");
  // The node reports the allocation ended without starting (the stop's
  // tombstone): only now is the start given up.
  bus::start_order never;
  never.allocation = allocs[0].id;
  never.job = id;
  f.report("exited", never, std::nullopt, "cancelled");
  allocs = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations;
  CHECK(allocs[0].state == alloc_state::finished);
  CHECK(allocs[0].reason == "lost");
  // Its fresh heartbeat brings the second attempt.
  f.heartbeat();
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].attempt == 2);
  CHECK(f.log->starts[0].allocation != allocs[0].id);
  f.report("started", f.log->starts[0]);
  f.report("exited", f.log->starts[0], 0);
  CHECK(f.show(id).state == "succeeded");
}

TEST_CASE("cancelling a running job stops it and ends it cancelled") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sleep", "1000"});
  auto order = f.log->starts.at(0);
  f.report("started", order);
  auto r = f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  CHECK(r.job.state == "stopping");
  REQUIRE(f.log->stops.size() == 1);
  CHECK(f.log->stops[0].allocation == order.allocation);
  bus::report_req x;
  f.report("exited", order, std::nullopt);
  auto j = f.show(id);
  CHECK(j.state == "cancelled");
  CHECK(j.cancelled_by == "owner");
  // Cancelling it again is a conflict.
  auto again = f.call("owner-token", bus::cancel_req{id});
  REQUIRE(std::holds_alternative<bus::error_info>(again.body));
  CHECK(std::get<bus::error_info>(again.body).code == errc::invalid_state);
}

TEST_CASE("a queued job waits for a node and is cancelled without ever starting") {
  fixture f;
  auto id = f.submit({"true"});
  CHECK(f.show(id).state == "queued");
  CHECK(f.log->starts.empty());
  auto r = f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  CHECK(r.job.state == "cancelled");
  CHECK(r.job.cancelled_by == "owner");
  f.add_node();
  CHECK(f.log->starts.empty());
  // Who cancelled it is part of the job's record: a restart reads it back.
  f.restart_with([](actors::config&) {});
  CHECK(f.show(id).cancelled_by == "owner");
}

TEST_CASE("a job after a dependency that was cancelled fails saying it was cancelled, also when "
          "it waited without an actor") {
  fixture f;
  auto dep = f.submit({"true"}); // no node: it stays queued
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.after = bus::string_list{dep};
  auto child = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s, {}, true}).job.id;
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{dep});
  CHECK(f.show(child).state == "failed");
  CHECK(f.show(child).reason == bus::reason::dependency_failed);
  auto ev = f.ok<bus::events_rep>("owner-token", bus::events_req{{child}}).events;
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.back().kind == "failed");
  CHECK(ev.back().detail == "dependency_failed: job " + dep + " is cancelled");
}

TEST_CASE("unknown tokens, wrong roles and bad specs are refused and store nothing") {
  fixture f;
  f.add_node();
  auto bad_token = f.call("nope", bus::ls_req{false, {}});
  CHECK(std::get<bus::error_info>(bad_token.body).code == errc::unauthenticated);
  auto node_submits = f.call(f.node_token, bus::submit_req{{"", {"true"}, "/", {}, {}, {}}});
  CHECK(std::get<bus::error_info>(node_submits.body).code == errc::permission_denied);
  auto no_argv = f.call("owner-token", bus::submit_req{{"", {}, "/", {}, {}, {}}});
  auto e = std::get<bus::error_info>(no_argv.body);
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("argv") != std::string::npos);
  auto rel_cwd = f.call("owner-token", bus::submit_req{{"", {"true"}, "tmp", {}, {}, {}}});
  CHECK(std::get<bus::error_info>(rel_cwd.body).message.find("cwd") != std::string::npos);
  auto owner_beats = f.call("owner-token", bus::heartbeat_req{1, 1, 1, {}});
  CHECK(std::get<bus::error_info>(owner_beats.body).code == errc::permission_denied);
  CHECK(f.db->load().jobs.empty());
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true, {}}).jobs.empty());
}

TEST_CASE("an invite code works once, for its own node name") {
  fixture f;
  auto inv = f.ok<bus::node_invite_rep>("owner-token", bus::node_invite_req{"box"});
  auto wrong = f.call("", bus::node_join_req{"other", inv.code});
  CHECK(std::get<bus::error_info>(wrong.body).code == errc::unauthenticated);
  f.ok<bus::node_join_rep>("", bus::node_join_req{"box", inv.code});
  auto again = f.call("", bus::node_join_req{"box", inv.code});
  CHECK(std::get<bus::error_info>(again.body).code == errc::unauthenticated);
}

TEST_CASE("a coordinator restarted on the same store recovers a running job") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sleep", "5"});
  auto order = f.log->starts.at(0);
  f.report("started", order);
  auto queued = f.submit({"true"}); // fits too; starts as well
  // Kill every actor (as kill -9 would) and start again from the store.
  f.kill_coordinator();
  f.start();
  CHECK(f.show(id).state == "running");
  // The second job had been placed (starting, not confirmed): its start is
  // sent again once the node's connection speaks, on the same allocation.
  auto second = f.log->starts.at(1);
  CHECK(f.show(queued).state == "starting");
  f.heartbeat();
  REQUIRE(f.log->starts.size() == 3);
  CHECK(f.log->starts[2].allocation == second.allocation);
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
  f.report("started", second);
  f.report("exited", second, 0);
  CHECK(f.show(queued).state == "succeeded");
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{queued}).allocations.size() == 1);
}

namespace {

/// As fixture::try_call, but the job and allocation actors recovery spawns
/// do not run: what a node sends reaches its node actor before any recovered
/// allocation has attached.
std::optional<api_reply> call_before_jobs(fixture& f, std::string token,
                                          bus::coordinator_request body) {
  return f.try_call(std::move(token), std::move(body), "peer", [&f] {
    f.sched->run_jobs_filtered(all_but({"cq.job", "cq.allocation"}));
  });
}

} // namespace

// Found by cq-sim (seed 1142, fault kind anywhere): a restarted coordinator's
// node actor took a heartbeat before the recovered allocation's actor had
// attached, and stopped the running workload as a stray.
TEST_CASE("a heartbeat that overtakes recovery does not stop a recovered allocation") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sleep", "5"});
  auto order = f.log->starts.at(0);
  f.report("started", order);
  f.kill_coordinator();
  f.start(false);
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, f.log->held};
  auto rep = call_before_jobs(f, f.node_token, hb);
  REQUIRE(rep.has_value());
  CHECK(std::holds_alternative<bus::heartbeat_rep>(rep->body));
  f.sched->run();
  CHECK(f.log->stops.empty());
  CHECK(f.show(id).state == "running");
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
}

// Found by cq-sim (seed 2401, fault kind anywhere): an exit report that
// reached a restarted coordinator before the allocation's actor attached was
// acknowledged as if already applied, and the exit was lost.
TEST_CASE("an exit report that overtakes recovery is not acknowledged until it is recorded") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sleep", "5"});
  auto order = f.log->starts.at(0);
  f.report("started", order);
  f.kill_coordinator();
  f.start(false);
  bus::report_req r;
  r.seq = 99;
  r.kind = "exited";
  r.allocation = order.allocation;
  r.job = order.job;
  r.exit_code = 0;
  auto rep = call_before_jobs(f, f.node_token, r);
  REQUIRE(rep.has_value());
  auto* e = std::get_if<bus::error_info>(&rep->body);
  REQUIRE(e != nullptr); // not acknowledged: the node keeps it and re-sends it
  CHECK(e->code == errc::unavailable);
  f.sched->run();
  CHECK(f.show(id).state == "running");
  // The node re-sends it; now it is recorded.
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
}

TEST_CASE("a start report that comes after the exit, while the exit is being recorded, is "
          "acknowledged rather than refused, and a repeat of the exit gets its answer") {
  // A job shorter than its node's report of its start: the exit is sent
  // first, then the start, then (no answer yet) the exit again. All three
  // are on their way at once.
  fixture f;
  f.add_node();
  auto id = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  auto order = f.log->starts[0];
  std::vector<std::shared_ptr<std::optional<api_reply>>> replies;
  auto send = [&](std::string kind, std::uint64_t seq) {
    auto r = fixture::report_of(kind, order,
                                kind == "exited" ? std::optional<std::int64_t>(0) : std::nullopt);
    r.seq = seq;
    replies.push_back(f.send(f.node_token, r));
  };
  send("exited", 1);
  send("started", 2);
  send("exited", 1);
  f.sched->run();
  std::vector<std::uint64_t> seqs{1, 2, 1};
  for (std::size_t k = 0; k < replies.size(); ++k) {
    INFO("reply " << k);
    REQUIRE(replies[k]->has_value());
    auto* ack = std::get_if<bus::report_rep>(&(*replies[k])->body);
    if (!ack)
      FAIL("refused: " << std::get<bus::error_info>((*replies[k])->body).message);
    CHECK(ack->seq == seqs[k]);
  }
  auto j = f.show(id);
  CHECK(j.state == "succeeded");
  CHECK(f.db->load().allocations.at(0).state == "finished");
}

TEST_CASE("an exit's resources go to the next job while its commit waits for its sync, and the "
          "placement is committed after it") {
  // docs/adr/0057: the node reports an exit after its cleanup, so its
  // resources are free; the next placement need not wait for the exit's sync,
  // and the store commits the two in the order they came.
  fixture f;
  f.kill_coordinator();
  auto plan = std::make_shared<sim::store_plan>();
  bool holding = false;
  std::vector<std::string> held; // what was held back, in the order it came
  plan->hold = [&](const change_batch& b) {
    if (!holding)
      return false;
    std::string what = "other";
    for (auto& c : b) {
      if (auto* j = std::get_if<job_row>(&c); j && j->info.state == job_state::succeeded)
        what = "exit";
      if (auto* a = std::get_if<bus::allocation_info>(&c); a && a->state == alloc_state::starting)
        what = "placement";
    }
    held.push_back(what);
    return true;
  };
  store_actor held_store;
  f.opts.wrap_store = [&](caf::actor_system& s, store_actor real) {
    return held_store = sim::spawn_faulty_store(s, real, plan);
  };
  f.start();
  f.add_node(); // 16 GiB
  auto first = f.run_big("a");
  auto a = first.job;
  auto b = f.submit_sized("b", 14, {"echo", "b"});
  REQUIRE(f.log->starts.size() == 1); // b waits for a's memory
  holding = true;
  auto exit = fixture::report_of("exited", first, 0);
  exit.seq = ++f.report_seq;
  auto exited = f.send(f.node_token, exit);
  f.sched->run();
  // The exit is not acknowledged yet, and b's placement is at the store
  // behind it; no start order goes out before the placement is durable.
  CHECK_FALSE(exited->has_value());
  auto at = [&](const char* what) { return std::find(held.begin(), held.end(), what); };
  REQUIRE(at("exit") != held.end());
  REQUIRE(at("placement") != held.end());
  CHECK(at("exit") < at("placement"));
  CHECK(f.log->starts.size() == 1);
  holding = false;
  caf::anon_send(held_store, flush_atom::value);
  f.sched->run();
  REQUIRE(exited->has_value());
  CHECK(std::holds_alternative<bus::report_rep>((*exited)->body));
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].job == b);
  CHECK(f.log->starts[1].argv == bus::string_list{"echo", "b"}); // read beside the commit
  CHECK(f.show(a).state == "succeeded");
  CHECK(f.show(b).state == "starting");
  CHECK(f.fatal.empty());
}
