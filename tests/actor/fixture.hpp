#pragma once
// The coordinator's real actors on CAF's deterministic scheduler and virtual
// time, against a simulated node link. No sleeps: time moves only when a
// test advances it.
#include "coordinator.hpp"
#include "state_names.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

using namespace cq;
using namespace cq::actors;

namespace cq_test {

/// Everything the simulated node received (orders it took), and how it behaves.
struct sim_log {
  std::vector<bus::start_order> starts;
  std::vector<bus::stop_order> stops;
  std::vector<std::string> releases; ///< hold ids
  std::vector<std::string> clears;   ///< clear-fault reasons
  std::vector<std::string> yields;   ///< allocation ids
  std::vector<bus::forget_order> forgets;
  /// Order ids and the connection each went to, in order (every kind).
  std::vector<std::pair<std::uint64_t, std::string>> sent;
  /// false: the node is unreachable; orders are lost and never answered.
  bool reachable = true;
  /// false: orders arrive (and are logged) but the node never answers.
  bool answers = true;
  /// Allocations the node holds, as its heartbeats list them: every start it
  /// took, until the test reports its exit (fixture::report).
  std::vector<std::string> held;
  /// The node's clock its acknowledgements carry (none: an older node).
  std::optional<node_clock> ack_at;
  /// Set: log reads fail with this, as a node that has no such allocation
  /// (yet) answers.
  std::optional<bus::error_info> read_log_error;
};

struct sim_link_state {
  std::shared_ptr<sim_log> log;
  caf::actor_addr node; ///< the node actor answers go to (weak: it holds us)
  static inline const char* name = "sim_link";
};

/// The simulated node behind a node link: takes every order and answers it
/// through the node actor's reply path, as the gateway would.
inline node_link_actor::behavior_type
sim_link(node_link_actor::stateful_pointer<sim_link_state> self, std::shared_ptr<sim_log> log,
         node_actor node) {
  self->state.log = log;
  self->state.node = node.address();
  return {
      [=](order_atom, std::uint64_t id, const std::string& peer, const bus::node_order& o) {
        auto& log = *self->state.log;
        if (!log.reachable)
          return;
        log.sent.emplace_back(id, peer);
        order_reply r{true, std::nullopt, {}, log.ack_at};
        std::visit(
            [&](auto& x) {
              using T = std::decay_t<decltype(x)>;
              if constexpr (std::is_same_v<T, bus::start_order>) {
                log.starts.push_back(x);
                if (std::find(log.held.begin(), log.held.end(), x.allocation) == log.held.end())
                  log.held.push_back(x.allocation);
              } else if constexpr (std::is_same_v<T, bus::stop_order>)
                log.stops.push_back(x);
              else if constexpr (std::is_same_v<T, bus::read_log_order>) {
                if (log.read_log_error)
                  r = order_reply{false, std::nullopt, *log.read_log_error, log.ack_at};
                else
                  r.chunk = bus::log_chunk{"hi\n", 3, true};
              } else if constexpr (std::is_same_v<T, bus::release_order>)
                log.releases.push_back(x.hold);
              else if constexpr (std::is_same_v<T, bus::clear_fault_order>)
                log.clears.push_back(x.reason);
              else if constexpr (std::is_same_v<T, bus::yield_order>)
                log.yields.push_back(x.allocation);
              else if constexpr (std::is_same_v<T, bus::forget_order>)
                log.forgets.push_back(x);
            },
            o);
        if (auto n = caf::actor_cast<node_actor>(self->state.node); n && log.answers)
          caf::anon_send(n, reply_atom::value, node_reply{peer, id, r});
      },
  };
}

/// The name of the actor behind a scheduled job ("" when it is none).
inline std::string_view actor_name(caf::resumable* r) {
  auto* a = dynamic_cast<caf::local_actor*>(r);
  return a ? std::string_view(a->name()) : std::string_view();
}

/// A run_jobs_filtered predicate: only actors named one of `names`.
inline auto named(std::initializer_list<std::string_view> names) {
  return [v = std::vector<std::string_view>(names)](caf::resumable* r) {
    return std::find(v.begin(), v.end(), actor_name(r)) != v.end();
  };
}

/// A run_jobs_filtered predicate: every actor but those named one of `names`.
inline auto all_but(std::initializer_list<std::string_view> names) {
  return [v = std::vector<std::string_view>(names)](caf::resumable* r) {
    return std::find(v.begin(), v.end(), actor_name(r)) == v.end();
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
  std::uint64_t next_order = 0;
  std::string node_token;
  std::vector<std::string> fatal; ///< what ctx.fatal was called with
  /// How start() spawns the coordinator (a test may wrap the store).
  coord::spawn_options opts{false, {}};
  actors::config coord_cfg; ///< the coordinator's configuration (see restart_with)
  int passes = 0;           ///< placement passes the scheduler has run

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

  /// Spawns the coordinator on the store; with `run`, runs it to idle
  /// (without, a test chooses which actors run first).
  void start(bool run = true) {
    context c;
    c.cfg = coord_cfg;
    c.epoch_ms = 1'700'000'000'000;
    c.steady = sched->clock().now();
    c.new_id = [this] { return "id" + std::to_string(++next_id); };
    c.new_allocation_id = [this](std::int64_t) { return "id" + std::to_string(++next_id); };
    c.new_token = [this] { return "token" + std::to_string(++next_id); };
    c.new_invite_code = [this] { return "code" + std::to_string(++next_id); };
    c.new_order_id = [this] { return ++next_order; };
    c.fatal = [this](const std::string& why) { fatal.push_back(why); };
    c.observe_pass = [this](auto&&, auto&&, auto&&) { ++passes; };
    auto l = log;
    c.make_link = [l](caf::actor_system& s, const std::string&, node_actor node) {
      return s.spawn(sim_link, l, node);
    };
    ctx = coord::spawn_coordinator(*sys, db, c, opts);
    if (run)
      sched->run();
  }

  /// Ends every coordinator actor at once, as kill -9 would end the process.
  void kill_coordinator() {
    caf::anon_send_exit(ctx->api, caf::exit_reason::kill);
    caf::anon_send_exit(ctx->scheduler, caf::exit_reason::kill);
    caf::anon_send_exit(ctx->store, caf::exit_reason::kill);
    sched->run();
  }

  /// Restarts the coordinator (on the same store) with the configuration `set` changes.
  void restart_with(const std::function<void(actors::config&)>& set) {
    kill_coordinator();
    set(coord_cfg);
    start();
  }

  ~fixture() {
    kill_coordinator();
    sys.reset();
    std::filesystem::remove_all(dir);
  }

  /// Sends a request to the api actor as the gateway would (from connection
  /// `peer`) and runs the scheduler until every consequence has happened.
  api_reply call(std::string token, bus::coordinator_request body, std::string peer = "peer") {
    auto out = try_call(std::move(token), std::move(body), std::move(peer));
    REQUIRE(out.has_value());
    return *out;
  }

  /// As call(), but nothing when no reply came (the request is suspended in
  /// an actor that stopped, or waits on something that never happens).
  /// `run` runs the scheduler (default: every actor, to idle).
  std::optional<api_reply> try_call(std::string token, bus::coordinator_request body,
                                    std::string peer = "peer",
                                    const std::function<void()>& run = {}) {
    auto out = send(std::move(token), std::move(body), std::move(peer));
    if (run)
      run();
    else
      sched->run();
    return *out;
  }

  /// Sends a request without running the scheduler: its reply lands in the
  /// result once the scheduler runs (several requests on their way at once).
  std::shared_ptr<std::optional<api_reply>> send(std::string token, bus::coordinator_request body,
                                                 std::string peer = "peer") {
    auto out = std::make_shared<std::optional<api_reply>>();
    auto api = ctx->api;
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(api, caf::infinite, api_request{peer, 1, token, std::move(body)})
          .then([=](const api_reply& r) { *out = r; }, [](caf::error&) {});
    });
    return out;
  }

  template <class T>
  T ok(std::string token, bus::coordinator_request body, std::string peer = "peer") {
    auto r = call(std::move(token), std::move(body), std::move(peer));
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

  /// A heartbeat listing what the simulated node holds (sim_log::held).
  void heartbeat(std::string peer = "peer") {
    bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, log->held};
    ok<bus::heartbeat_rep>(node_token, hb, std::move(peer));
  }

  /// Moves virtual time forward by `total` in steps of `step`, so that timers
  /// set while it passes (retries) fire too.
  void advance_by_steps(std::chrono::milliseconds total, std::chrono::milliseconds step) {
    for (auto t = std::chrono::milliseconds(0); t < total; t += step)
      advance(step);
  }

  /// Moves virtual time forward by `d`, firing what is due, and runs to idle.
  void advance(std::chrono::milliseconds d) {
    sched->advance_time(d);
    sched->run();
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

  /// Submits job `name` of `ram_gib` GiB running `argv` (in /) as the owner: its id.
  std::string submit_sized(std::string name, std::uint64_t ram_gib,
                           std::vector<std::string> argv = {"true"}) {
    bus::job_spec s;
    s.name = std::move(name);
    s.argv = std::move(argv);
    s.cwd = "/";
    s.ram_bytes = ram_gib << 30;
    return ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
  }

  /// On the 16 GiB node (add_node() first): a 14 GiB job `name`, started, so
  /// that any job of more than a GiB waits for its memory. Its start order.
  bus::start_order run_big(std::string name = "r") {
    auto before = log->starts.size();
    submit_sized(std::move(name), 14);
    REQUIRE(log->starts.size() == before + 1);
    auto r = log->starts.back();
    report("started", r);
    return r;
  }

  /// Sends a report as the node would; returns the raw reply (nothing when
  /// none came). `wall_ms` is the run's wall time an exit reports.
  std::optional<api_reply> try_report(std::string kind, const bus::start_order& o,
                                      std::optional<std::int64_t> rc = {}, std::string reason = {},
                                      std::uint64_t wall_ms = 0) {
    auto r = report_of(std::move(kind), o, rc, std::move(reason), wall_ms);
    r.seq = ++report_seq;
    auto reply = try_call(node_token, r);
    if (reply && std::holds_alternative<bus::report_rep>(reply->body) && r.kind == "exited")
      std::erase(log->held, r.allocation);
    if (reply)
      if (auto* ack = std::get_if<bus::report_rep>(&reply->body))
        CHECK(ack->seq == r.seq);
    return reply;
  }
  std::uint64_t report_seq = 0;

  /// A report as the node would send it about `o` (its seq left to the caller).
  static bus::report_req report_of(std::string kind, const bus::start_order& o,
                                   std::optional<std::int64_t> rc = {}, std::string reason = {},
                                   std::uint64_t wall_ms = 0) {
    bus::report_req r;
    r.kind = std::move(kind);
    r.allocation = o.allocation;
    r.job = o.job;
    r.exit_code = rc;
    REQUIRE(bus::parse(reason, r.reason)); // the tests name reasons as the wire does
    r.wall_ms = wall_ms;
    return r;
  }

  /// A report that must be acknowledged.
  void report(std::string kind, const bus::start_order& o, std::optional<std::int64_t> rc = {},
              std::string reason = {}) {
    auto reply = try_report(std::move(kind), o, rc, std::move(reason));
    REQUIRE(reply.has_value());
    if (auto* e = std::get_if<bus::error_info>(&reply->body))
      FAIL("error reply: " << e->message);
  }
};

} // namespace cq_test

using namespace cq_test;
