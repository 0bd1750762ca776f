// Idempotent calls on one coordinator (SPEC section 9): operation ids and
// client job ids, replays after lost replies and crashes, and their window.
// On the real actors (see fixture.hpp).
#include "sim/store.hpp"
#include "team.hpp"

using namespace team_fixture;

TEST_CASE("an operation id: a replay returns the stored result and applies nothing") {
  team t;
  auto a = t.job_of("owner-token");
  auto b = t.job_of("owner-token");
  std::string op = "0b7e4f5c-1111-4222-8333-944455556666";
  auto first = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(first.job.state == job_state::cancelled);
  auto audit_rows = t.audit(std::string("cancel")).size();
  // The replay answers the stored result, and applies nothing (its audit
  // row says it was a replay).
  auto again = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(again.job.id == a);
  CHECK(again.job.state == job_state::cancelled);
  CHECK(again.job.finished_ms == first.job.finished_ms);
  auto rows = t.audit(std::string("cancel"));
  REQUIRE(rows.size() == audit_rows + 1);
  CHECK(rows.back().outcome == "replayed");
  // The same id with other arguments, or for another kind, is a conflict.
  CHECK(code_of(t.call("owner-token", bus::cancel_req{b, op})) == errc::operation_conflict);
  CHECK(code_of(t.call("owner-token", bus::move_req{b, "front", {}, {}, op})) ==
        errc::operation_conflict);
  CHECK(t.show(b).state == job_state::queued);
  // A refused request stores nothing: the id stays free for a good call.
  std::string op2 = "0b7e4f5c-2222-4222-8333-944455556666";
  CHECK(code_of(t.call(t.sam, bus::cancel_req{b, op2})) == errc::permission_denied);
  CHECK(t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{b, op2}).job.state ==
        job_state::cancelled);
  // Not a UUID.
  CHECK(code_of(t.call("owner-token", bus::cancel_req{b, std::string("x")})) ==
        errc::invalid_argument);
}

TEST_CASE("an operation id on a call that changed nothing replays its reply, not the call") {
  // A hold of a held job commits nothing, so the store has no reply for its
  // operation id: the api keeps that one in memory (replies it stored are
  // read back from the store on a replay).
  team t;
  auto a = t.job_of("owner-token");
  t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a});
  std::string op = "0b7e4f5c-6666-4222-8333-944455556666";
  auto first = t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, false, op});
  CHECK(first.job.on_hold);
  CHECK_FALSE(t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, true}).job.on_hold);
  auto again = t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, false, op});
  CHECK(again.job.on_hold);       // the reply it gave...
  CHECK_FALSE(t.show(a).on_hold); // ...and not held again
  CHECK(t.audit(std::string("job_hold")).back().outcome == "replayed");
  // A reply the store holds replays after a restart, read from the store.
  std::string op2 = "0b7e4f5c-7777-4222-8333-944455556666";
  CHECK(t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, false, op2}).job.on_hold);
  t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, true});
  t.restart_with([](auto&) {});
  CHECK(t.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{a, false, op2}).job.on_hold);
  CHECK_FALSE(t.show(a).on_hold);
}

TEST_CASE("an operation id survives a coordinator crash between its commit and its reply") {
  team t;
  auto a = t.job_of("owner-token");
  std::string op = "0b7e4f5c-3333-4222-8333-944455556666";
  bus::move_req m{a, "front", {}, std::string("high"), op};
  auto first = t.ok<bus::move_rep>("owner-token", m);
  t.restart_with([](auto&) {}); // as if the reply had been lost with the process
  auto again = t.ok<bus::move_rep>("owner-token", m);
  CHECK(again.job.priority == "high");
  CHECK(again.job.position == first.job.position);
  // Node operations keep theirs too.
  std::string op3 = "0b7e4f5c-4444-4222-8333-944455556666";
  t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("x"), op3});
  t.ok<bus::node_rep>(t.opal, bus::node_enable_req{"box"});
  t.restart_with([](auto&) {});
  auto replay = t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("x"), op3});
  CHECK_FALSE(replay.node.enabled); // the stored result...
  auto ls = t.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{});
  CHECK(ls.nodes[0].enabled); // ...and nothing applied again
}

TEST_CASE("an operation id is forgotten after its window, in memory and in the store") {
  team t;
  auto a = t.job_of("owner-token");
  std::string op = "0b7e4f5c-5555-4222-8333-944455556666";
  bus::move_req m{a, "front", {}, std::string("high"), op};
  t.ok<bus::move_rep>("owner-token", m);
  auto outcome_of_last_move = [&] { return t.audit(std::string("move")).back().outcome; };
  // Within the window (one day by default) a retry is a replay...
  t.advance(std::chrono::hours(23));
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() == "replayed");
  // ...and a day and a 24th after the call it is forgotten: the same call
  // runs anew, and a restart (which reads the store) does not bring it back.
  t.advance(std::chrono::hours(2) + std::chrono::seconds(1));
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() != "replayed");
  // That run stored its own result: a restart keeps it, as any other.
  t.restart_with([](auto&) {});
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() == "replayed");
  // (The fixture's wall clock starts again at its epoch on a restart, so the
  // result stored 25 hours in is a day and a 24th old 50 hours after it.)
  t.advance(std::chrono::hours(51));
  t.restart_with([](auto&) {});
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() != "replayed");
}

namespace {

bool has_operation(const change_batch& b) {
  for (auto& c : b)
    if (std::holds_alternative<operation_row>(c))
      return true;
  return false;
}
bool submits(const change_batch& b, const std::string& id) {
  for (auto& c : b)
    if (auto* j = std::get_if<job_row>(&c); j && j->info.id == id && !j->spec_digest.empty())
      return true;
  return false;
}

} // namespace

TEST_CASE("a replay after a coordinator killed between commit and reply returns the result") {
  team t;
  auto muted = std::make_shared<int>(0);
  auto a = t.job_of("owner-token");
  std::string id = "0b7e4f5c-6666-4222-8333-944455556666";
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 50;
  t.kill_coordinator();
  // The simulator's store: it commits, then never answers the commits the
  // plan picks, as if the process died between the two.
  auto plan = std::make_shared<sim::store_plan>();
  plan->crash_after = [=](const change_batch& b) {
    bool dies = has_operation(b) || submits(b, id);
    *muted += dies;
    return dies;
  };
  t.opts.wrap_store = [=](caf::actor_system& sys, store_actor real) {
    return sim::spawn_faulty_store(sys, real, plan);
  };
  t.start();
  std::string op = "0b7e4f5c-7777-4222-8333-944455556666";
  // The cancel is committed; its reply never comes (the process "dies").
  CHECK_FALSE(t.try_call("owner-token", bus::cancel_req{a, op}).has_value());
  CHECK_FALSE(t.try_call("owner-token", bus::submit_req{s, id}).has_value());
  CHECK(*muted == 2);
  t.kill_coordinator();
  t.opts.wrap_store = {};
  t.start();
  // The client's retries: the stored results, nothing applied twice.
  auto audit_before = t.audit().size();
  auto again = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(again.job.state == job_state::cancelled);
  auto sub = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(sub.job.id == id);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 2);
  auto rows = t.audit();
  REQUIRE(rows.size() == audit_before + 2); // each replay says it was one, and applied nothing
  CHECK(rows[rows.size() - 2].outcome == "replayed");
  CHECK(rows.back().outcome == "replayed");
}

TEST_CASE("a client job id: the same spec returns the stored job, another is a conflict") {
  team t;
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  std::string id = "0b7e4f5c-5555-4222-8333-944455556666";
  auto first = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(first.job.id == id);
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], 0);
  REQUIRE(t.show(id).state == job_state::succeeded);
  t.restart_with([](auto&) {});
  // Terminal, after a restart: the stored job, no second one.
  auto again = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(again.job.state == job_state::succeeded);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
  auto other = s;
  other.argv = {"false"};
  CHECK(code_of(t.call("owner-token", bus::submit_req{other, id})) == errc::job_conflict);
  CHECK(code_of(t.call("owner-token", bus::submit_req{s, std::string("not-a-uuid")})) ==
        errc::invalid_argument);
}

TEST_CASE("a client job id whose submit failed to commit is free for the client's retry") {
  team t;
  std::string id = "0b7e4f5c-8888-4222-8333-944455556666";
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 50; // fits no node: stays queued
  t.kill_coordinator();
  auto plan = std::make_shared<sim::store_plan>();
  auto failed = std::make_shared<int>(0);
  plan->fail = [=](const change_batch& b) {
    bool fail = *failed == 0 && submits(b, id);
    *failed += fail;
    return fail;
  };
  t.opts.wrap_store = [=](caf::actor_system& sys, store_actor real) {
    return sim::spawn_faulty_store(sys, real, plan);
  };
  t.start();
  CHECK(code_of(t.call("owner-token", bus::submit_req{s, id, true})) == errc::internal);
  REQUIRE(*failed == 1);
  // Nothing of it was stored: the retry submits it, and is not told that
  // the job "is being submitted".
  auto sub = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id, true});
  CHECK(sub.job.id == id);
  CHECK(sub.job.position == 1);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
}

TEST_CASE("a client job id outlives its job's history for the operations window: a retry after "
          "the job was forgotten replays, another spec is a conflict, and after the window it "
          "runs anew (ADR 0073)") {
  team t;
  t.restart_with([](actors::config& c) { c.history_jobs = 1; });
  t.heartbeat();
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  std::string id = "0b7e4f5c-9999-4222-8333-944455556666";
  std::string array = "0b7e4f5c-aaaa-4222-8333-944455556666";
  auto run = [&](const bus::submit_req& req) {
    auto before = t.log->starts.size();
    auto rep = t.ok<bus::submit_rep>("owner-token", req);
    for (auto i = before; i < t.log->starts.size(); ++i) {
      t.report("started", t.log->starts[i]);
      t.report("exited", t.log->starts[i], 3);
    }
    return rep;
  };
  auto first = run(bus::submit_req{s, id});
  REQUIRE(t.show(id).state == job_state::failed);
  bus::submit_req tasks{s, array};
  tasks.array_indexes = std::vector<std::uint64_t>{0, 1};
  auto arr = run(tasks);
  REQUIRE(*arr.array_size == 2);
  run(bus::submit_req{s}); // the newest: the bound of 1 keeps only it
  auto gone = t.call("owner-token", bus::show_req{id});
  REQUIRE(code_of(gone) == errc::not_found);
  REQUIRE(code_of(t.call("owner-token", bus::show_req{arr.job.id})) == errc::not_found);
  auto starts = t.log->starts.size();
  auto jobs = t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size();
  // The retries: what became of each, and no job made again.
  auto again = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(again.job.id == id);
  CHECK(again.job.state == job_state::failed);
  CHECK(again.job.exit_code == 3);
  CHECK(again.job.submitted_ms == first.job.submitted_ms);
  CHECK(t.audit(std::string("submit")).back().outcome == "replayed");
  auto arr_again = t.ok<bus::submit_rep>("owner-token", tasks);
  CHECK(arr_again.job.id == arr.job.id);
  CHECK(arr_again.array_size == 2);
  // A later submit that would make a forgotten task again is a conflict.
  auto more = tasks;
  more.array_indexes = std::vector<std::uint64_t>{5, 1};
  CHECK(code_of(t.call("owner-token", more)) == errc::job_conflict);
  auto other = s;
  other.argv = {"false"};
  CHECK(code_of(t.call("owner-token", bus::submit_req{other, id})) == errc::job_conflict);
  CHECK(t.log->starts.size() == starts);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == jobs);
  // The records are stored: a restart replays too.
  t.restart_with([](actors::config& c) { c.history_jobs = 1; });
  CHECK(t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id}).job.state ==
        job_state::failed);
  CHECK(t.log->starts.size() == starts);
  // A day and a 24th after the submit the record is gone, as an operation
  // id's: the same submit runs anew.
  t.advance(std::chrono::hours(25) + std::chrono::seconds(1));
  t.heartbeat();
  auto anew = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(anew.job.state != job_state::failed);
  CHECK(t.log->starts.size() == starts + 1);
}
