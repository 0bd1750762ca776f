// The coordinator's real actors on CAF's deterministic scheduler and virtual
// time, against a simulated node link. No sleeps: time moves only when the
// test advances it.
#include "coordinator.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include <filesystem>

using namespace cq;
using namespace cq::actors;

namespace {

/// Everything the simulated node received.
struct sim_log {
  std::vector<bus::start_order> starts;
  std::vector<bus::stop_order> stops;
};

struct sim_link_state {
  std::shared_ptr<sim_log> log;
  static inline const char* name = "sim_link";
};

node_link_actor::behavior_type sim_link(node_link_actor::stateful_pointer<sim_link_state> self,
                                        std::shared_ptr<sim_log> log) {
  self->state.log = log;
  return {
      [=](bus::start_order& o) { self->state.log->starts.push_back(o); },
      [=](bus::stop_order& o) { self->state.log->stops.push_back(o); },
      [=](bus::read_log_order&) -> log_reply {
        return log_reply{bus::log_chunk{"hi\n", 3, true}, {}};
      },
      [=](peer_atom, const std::string&) {},
      [=](reply_atom, std::uint64_t, log_reply&) {},
  };
}

struct fixture {
  std::filesystem::path dir;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<coord::store> db;
  std::shared_ptr<sim_log> log = std::make_shared<sim_log>();
  context_ptr ctx;
  int next_id = 0;
  std::string node_token;

  fixture() {
    char tmpl[] = "/tmp/cq-actor-XXXXXX";
    dir = mkdtemp(tmpl);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sys->await_actors_before_shutdown(false);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    db = std::make_shared<coord::store>((dir / "cq.db").string());
    coord::init_owner(*db, "owner", "owner-token", 1000);
    start();
  }

  void start() {
    context c;
    c.epoch_ms = 1'700'000'000'000;
    c.steady = sched->clock().now();
    c.new_id = [this] { return "id" + std::to_string(++next_id); };
    c.new_token = [this] { return "token" + std::to_string(++next_id); };
    c.new_invite_code = [this] { return "code" + std::to_string(++next_id); };
    auto l = log;
    c.make_link = [l](caf::actor_system& s, const std::string&) { return s.spawn(sim_link, l); };
    ctx = coord::spawn_coordinator(*sys, db, c, {false});
    sched->run();
  }

  ~fixture() {
    for (auto& a : {ctx->api, ctx->scheduler, ctx->store})
      caf::anon_send_exit(a, caf::exit_reason::kill);
    sched->run();
    sys.reset();
    std::filesystem::remove_all(dir);
  }

  /// Sends a request to the api actor as the gateway would and runs the
  /// scheduler until every consequence has happened.
  api_reply call(std::string token, bus::coordinator_request body) {
    auto out = std::make_shared<std::optional<api_reply>>();
    auto api = ctx->api;
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(api, caf::infinite, api_request{"peer", 1, token, std::move(body)})
          .then([=](const api_reply& r) { *out = r; });
    });
    sched->run();
    REQUIRE(out->has_value());
    return **out;
  }

  template <class T>
  T ok(std::string token, bus::coordinator_request body) {
    auto r = call(std::move(token), std::move(body));
    if (auto* e = std::get_if<bus::error_info>(&r.body))
      FAIL("error reply: " << e->message);
    return std::get<T>(r.body);
  }

  void add_node() {
    auto inv = ok<bus::node_invite_rep>("owner-token", bus::node_invite_req{"box"});
    node_token = ok<bus::node_join_rep>("", bus::node_join_req{"box", inv.code}).token;
    ok<bus::node_rep>("owner-token", bus::node_approve_req{"box"});
    heartbeat();
  }

  void heartbeat() {
    ok<bus::heartbeat_rep>(node_token, bus::heartbeat_req{16ull << 30, 15ull << 30, 4, {}});
  }

  bus::job_info show(const std::string& id) {
    return ok<bus::show_rep>("owner-token", bus::show_req{id}).job;
  }

  std::string submit(std::vector<std::string> argv) {
    bus::job_spec s;
    s.argv = std::move(argv);
    s.cwd = "/";
    return ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
  }

  void report(std::string kind, const bus::start_order& o, std::optional<std::int64_t> rc = {}) {
    static std::uint64_t seq = 0;
    bus::report_req r;
    r.seq = ++seq;
    r.kind = std::move(kind);
    r.allocation = o.allocation;
    r.job = o.job;
    r.exit_code = rc;
    auto ack = ok<bus::report_rep>(node_token, r);
    CHECK(ack.seq == r.seq);
  }
};

} // namespace

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
  CHECK(snap.jobs[0].info.state == "succeeded");
  CHECK(snap.allocations.at(0).state == "finished");
  // A re-sent exit report (the node did not see the ack) changes nothing.
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
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
}

TEST_CASE("a start the node never confirms is given up and the job is placed again") {
  fixture f;
  f.add_node();
  auto id = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  f.sched->advance_time(f.ctx->cfg.start_timeout);
  f.sched->run();
  auto j = f.show(id);
  CHECK(j.state == "queued");
  auto allocs = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations;
  REQUIRE(allocs.size() == 1);
  CHECK(allocs[0].reason == "lost");
  // The node is told to stop the given-up allocation in case it started late.
  REQUIRE(f.log->stops.size() == 1);
  CHECK(f.log->stops[0].allocation == allocs[0].id);
  // Its heartbeat went stale meanwhile; a fresh one brings the second attempt.
  CHECK(f.log->starts.size() == 1);
  f.heartbeat();
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].attempt == 2);
  f.report("started", f.log->starts[1]);
  f.report("exited", f.log->starts[1], 0);
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
  CHECK(f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id}).job.state == "cancelled");
  f.add_node();
  CHECK(f.log->starts.empty());
}

TEST_CASE("unknown tokens, wrong roles and bad specs are refused and store nothing") {
  fixture f;
  f.add_node();
  auto bad_token = f.call("nope", bus::ls_req{false});
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
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.empty());
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
  for (auto& a : {f.ctx->api, f.ctx->scheduler, f.ctx->store})
    caf::anon_send_exit(a, caf::exit_reason::kill);
  f.sched->run();
  f.start();
  CHECK(f.show(id).state == "running");
  CHECK(f.show(queued).state != "failed");
  f.heartbeat();
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
}
