// SPEC section 11's complete lifecycles/s with 64 simulated nodes
// (submit_bench.hpp: bench_lifecycles).
#include "coordinator.hpp"
#include "submit_bench.hpp"

#include "cq/bus/client.hpp"
#include "cq/bus/codec.hpp"
#include "sim/node_model.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

namespace cq::bench {

namespace {
using clock_type = std::chrono::steady_clock;
} // namespace

scale_result bench_lifecycles(int nodes, int jobs) {
  coordinator co;
  bus::client owner(co.endpoint, co.token, std::chrono::milliseconds(10000));
  zmq::context_t ctx(1);
  // Real time drives the node models: timers in a queue, frames on sockets.
  using ms = std::chrono::milliseconds;
  auto t_start = clock_type::now();
  auto now_ms = [&] { return std::chrono::duration_cast<ms>(clock_type::now() - t_start).count(); };
  std::multimap<std::int64_t, std::function<void()>> timers;
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
  std::vector<std::unique_ptr<sim::node_model>> models;
  int exits = 0;
  for (int i = 0; i < nodes; ++i) {
    auto name = fmt::format("bench{:02}", i);
    auto inv = owner.call<bus::node_invite_rep>(bus::node_invite_req{name});
    if (!inv)
      throw std::runtime_error("invite failed: " + inv.error().message);
    auto join = owner.call<bus::node_join_rep>(bus::node_join_req{name, inv->code});
    if (!join)
      throw std::runtime_error("join failed: " + join.error().message);
    if (auto ok = owner.call<bus::node_rep>(bus::node_approve_req{name}); !ok)
      throw std::runtime_error("approve failed: " + ok.error().message);
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->connect(co.endpoint);
    sim::node_spec spec{name, 256ull << 30, 8ull << 30, 64, 0, 0};
    sim::node_env env;
    auto* sock = s.get();
    env.now_ms = now_ms;
    env.send = [sock](const std::string& b) {
      sock->send(zmq::buffer(b), zmq::send_flags::dontwait);
    };
    env.at = [&timers](std::int64_t t, std::function<void()> f) {
      timers.emplace(t, std::move(f));
    };
    env.trace = [](const std::string&) {};
    env.on_exit_acked = [&exits](const std::string&) { ++exits; };
    models.push_back(std::make_unique<sim::node_model>(spec, std::move(env)));
    models.back()->boot(join->token);
    socks.push_back(std::move(s));
  }
  // Submitter: one DEALER, up to 64 submits in flight.
  zmq::socket_t sub(ctx, zmq::socket_type::dealer);
  sub.set(zmq::sockopt::linger, 0);
  sub.connect(co.endpoint);
  int sent = 0, acked = 0;
  std::vector<zmq::pollitem_t> items;
  for (auto& s : socks)
    items.push_back({static_cast<void*>(*s), 0, ZMQ_POLLIN, 0});
  items.push_back({static_cast<void*>(sub), 0, ZMQ_POLLIN, 0});
  // Let every node heartbeat once before the clock starts.
  auto settle = clock_type::now() + std::chrono::seconds(2);
  std::chrono::steady_clock::time_point t0{};
  bool started = false;
  auto deadline = clock_type::now() + std::chrono::minutes(5);
  while (exits < jobs) {
    if (clock_type::now() > deadline)
      throw std::runtime_error(
          fmt::format("lifecycles: {} of {} exits after 5 minutes", exits, jobs));
    if (!started && clock_type::now() >= settle) {
      started = true;
      t0 = clock_type::now();
    }
    while (started && sent < jobs && sent - acked < 64) {
      bus::submit_req r;
      r.spec.argv =
          sim::workload_argv(sim::workload{1, 0, 64ull << 20}, static_cast<std::uint64_t>(sent));
      r.spec.cwd = "/";
      r.spec.ram_bytes = 256ull << 20;
      auto bytes = bus::encode_request(static_cast<std::uint64_t>(sent + 1), co.token, r);
      sub.send(zmq::buffer(bytes), zmq::send_flags::none);
      ++sent;
    }
    auto next = timers.empty() ? now_ms() + 100 : timers.begin()->first;
    auto wait = std::clamp<std::int64_t>(next - now_ms(), 0, 100);
    zmq::poll(items.data(), items.size(), ms(wait));
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN))
        continue;
      for (int k = 0; k < 256; ++k) {
        zmq::message_t m;
        auto& s = i < socks.size() ? *socks[i] : sub;
        if (!s.recv(m, zmq::recv_flags::dontwait))
          break;
        if (i < socks.size())
          models[i]->receive(m.to_string());
        else
          ++acked;
      }
    }
    while (!timers.empty() && timers.begin()->first <= now_ms()) {
      auto f = std::move(timers.begin()->second);
      timers.erase(timers.begin());
      f();
    }
  }
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  return {fmt::format("complete lifecycles/s with {} simulated nodes ({} jobs)", nodes, jobs),
          jobs / secs, "lifecycles/s", 10000, true}; // SPEC section 11
}

} // namespace cq::bench
