#pragma once
// The coordinator's real actors on CAF's deterministic scheduler and virtual
// time, against a simulated node link. No sleeps: time moves only when a
// test advances it.
#include "coordinator.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include <filesystem>

using namespace cq;
using namespace cq::actors;

namespace cq_test {

/// Everything the simulated node received.
struct sim_log {
  std::vector<bus::start_order> starts;
  std::vector<bus::stop_order> stops;
  std::vector<std::string> releases; ///< hold ids
  std::vector<std::string> clears;   ///< clear-fault reasons
  std::vector<std::string> yields;   ///< allocation ids
};

struct sim_link_state {
  std::shared_ptr<sim_log> log;
  static inline const char* name = "sim_link";
};

inline node_link_actor::behavior_type
sim_link(node_link_actor::stateful_pointer<sim_link_state> self, std::shared_ptr<sim_log> log) {
  self->state.log = log;
  return {
      [=](bus::start_order& o) { self->state.log->starts.push_back(o); },
      [=](bus::stop_order& o) { self->state.log->stops.push_back(o); },
      [=](bus::read_log_order&) -> order_reply {
        return order_reply{true, bus::log_chunk{"hi\n", 3, true}, {}};
      },
      [=](bus::release_order& o) -> order_reply {
        self->state.log->releases.push_back(o.hold);
        return order_reply{true, {}, {}};
      },
      [=](bus::clear_fault_order& o) -> order_reply {
        self->state.log->clears.push_back(o.reason);
        return order_reply{true, {}, {}};
      },
      [=](bus::yield_order& o) { self->state.log->yields.push_back(o.allocation); },
      [=](peer_atom, const std::string&) {},
      [=](reply_atom, std::uint64_t, order_reply&) {},
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

} // namespace cq_test

using namespace cq_test;
