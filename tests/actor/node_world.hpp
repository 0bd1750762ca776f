#pragma once
// The node daemon's real actors (node/actors) on CAF's deterministic
// scheduler and virtual time, over cq-sim's simulated host
// (sim/node_host), with the test playing the coordinator: node_test.cpp
// and start_group_test.cpp share it.
#include "sim/node_host.hpp"

#include "cq/bus/codec.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>

namespace cq::testing {

struct node_world {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  caf::actor_clock::time_point t0;
  std::multimap<std::int64_t, std::function<void()>> events;
  std::filesystem::path dir;
  std::unique_ptr<sim::node_host> host;
  std::vector<bus::report_req> reports;       ///< every report sent, in order
  std::vector<bus::heartbeat_req> heartbeats; ///< every heartbeat sent
  std::vector<bus::frame> replies;            ///< the node's answers to our orders
  std::set<std::string> running;              ///< allocations whose workload runs
  std::uint64_t next_order = 1;
  bool ack_starts = true;              ///< false: start reports are seen but not acknowledged
  std::set<std::string> unacked_exits; ///< allocations whose exit reports are not acknowledged
  /// Called with each heartbeat and report as it arrives (before it is kept).
  std::function<void(const bus::heartbeat_req&)> on_heartbeat;
  std::function<void(const bus::report_req&)> on_report;
  /// Called as the host launches a workload.
  std::function<void(const bus::start_order&)> on_launch;

  /// With `retention_ms`, the node's [retention] allocations window.
  explicit node_world(std::int64_t retention_ms = 0) {
    spdlog::set_level(spdlog::level::warn);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sys->await_actors_before_shutdown(false);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    t0 = sched->clock().now();
    auto tmpl = (std::filesystem::temp_directory_path() / "cq-node-actor-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    dir = ::mkdtemp(buf.data());
    sim::node_spec spec;
    spec.name = "n0";
    spec.mem_total_bytes = 64ull << 30;
    spec.cpus = 16;
    sim::node_env env;
    env.now_ms = [this] { return now(); };
    env.at = [this](std::int64_t t, std::function<void()> f) { events.emplace(t, std::move(f)); };
    env.trace = [](const std::string&) {};
    env.send = [this](const std::string& bytes) { from_node(bytes); };
    env.on_start = [this](const std::string&, const bus::start_order& o) {
      if (on_launch)
        on_launch(o);
      running.insert(o.allocation);
    };
    env.on_end = [this](const std::string&, const std::string& alloc, const std::string&) {
      running.erase(alloc);
    };
    env.on_exit_acked = [](const std::string&) {};
    host = std::make_unique<sim::node_host>(
        *sys, spec, env, dir / "node", [] { return true; }, 7);
    sim::node_host::timing t;
    t.retention_ms = retention_ms;
    host->set_timing(t);
    host->boot("node-token");
    run_until(now());
  }

  ~node_world() {
    host->crash();
    sched->run();
    sys.reset();
    host.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  std::int64_t now() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(sched->clock().now() - t0).count();
  }

  /// The coordinator's side: answers every heartbeat and report.
  void from_node(const std::string& bytes) {
    std::uint64_t seen = 0;
    auto f = bus::decode_frame(bytes, seen);
    REQUIRE(f);
    if (f->is_reply) {
      replies.push_back(*f);
      return;
    }
    auto req = bus::decode_coordinator_request(*f);
    REQUIRE(req);
    if (auto* hb = std::get_if<bus::heartbeat_req>(&*req)) {
      if (on_heartbeat)
        on_heartbeat(*hb);
      heartbeats.push_back(*hb);
      bus::heartbeat_rep rep;
      rep.approved = true;
      to_node(bus::encode_reply(f->id, rep));
    } else if (auto* r = std::get_if<bus::report_req>(&*req)) {
      if (on_report)
        on_report(*r);
      reports.push_back(*r);
      if ((ack_starts || r->kind != "started") &&
          (r->kind != "exited" || !unacked_exits.count(r->allocation)))
        to_node(bus::encode_reply(f->id, bus::report_rep{r->seq}));
    }
  }

  void to_node(std::string bytes) {
    events.emplace(now() + 1, [this, bytes] { host->receive(bytes); });
  }

  void order(const bus::node_order& o) { to_node(bus::encode_node_order(next_order++, o)); }

  /// Orders that reach the node together (read from its socket at once).
  void orders(const std::vector<bus::node_order>& os) {
    std::vector<std::string> frames;
    for (auto& o : os)
      frames.push_back(bus::encode_node_order(next_order++, o));
    events.emplace(now() + 1, [this, frames] { host->receive(frames); });
  }

  /// Runs every actor and event due until virtual time `t_ms`.
  void run_until(std::int64_t t_ms) {
    for (;;) {
      sched->run();
      auto& sch = sched->clock().schedule();
      auto t_ev = events.empty() ? INT64_MAX : events.begin()->first;
      std::int64_t t_caf = INT64_MAX;
      if (!sch.empty())
        t_caf =
            std::chrono::duration_cast<std::chrono::milliseconds>(sch.begin()->first - t0).count();
      auto t = std::min(t_ev, t_caf);
      if (t > t_ms) {
        auto target = t0 + std::chrono::milliseconds(t_ms);
        if (sched->clock().current_time < target)
          sched->clock().current_time = target;
        return;
      }
      if (t_caf <= t_ev) {
        sched->trigger_timeout();
      } else {
        auto target = t0 + std::chrono::milliseconds(t);
        if (sched->clock().current_time < target)
          sched->clock().current_time = target;
        auto ev = std::move(events.begin()->second);
        events.erase(events.begin());
        ev();
      }
    }
  }

  void run_for(std::int64_t ms) { run_until(now() + ms); }

  /// The reports of `kind` for `alloc` (a report may be re-sent).
  std::vector<bus::report_req> of(const std::string& alloc, const std::string& kind) const {
    std::vector<bus::report_req> out;
    for (auto& r : reports)
      if (r.allocation == alloc && r.kind == kind &&
          std::none_of(out.begin(), out.end(), [&](auto& o) { return o.seq == r.seq; }))
        out.push_back(r);
    return out;
  }

  /// A fault plan under which every sync of a path named `name` fails (EIO).
  static sim::sim_disk::fault_plan failing_sync_of(std::string name) {
    sim::sim_disk::fault_plan plan;
    plan.fail =
        [name = std::move(name)](std::string_view op,
                                 const std::filesystem::path& p) -> std::optional<std::string> {
      if (op == "sync" && p.filename() == name)
        return std::string("Input/output error");
      return std::nullopt;
    };
    return plan;
  }

  static bus::start_order start(const std::string& alloc, sim::workload w) {
    bus::start_order o;
    o.allocation = alloc;
    o.job = "j-" + alloc;
    o.attempt = 1;
    o.argv = sim::workload_argv(w, 0);
    o.cwd = "/";
    return o;
  }
};

} // namespace cq::testing
