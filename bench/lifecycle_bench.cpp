// SPEC section 11's complete lifecycles/s with 64 simulated nodes
// (submit_bench.hpp: bench_lifecycles).
#include "coordinator.hpp"
#include "submit_bench.hpp"

#include "cq/bus/client.hpp"
#include "cq/bus/codec.hpp"
#include "sim/node_model.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <sys/epoll.h>
#include <unistd.h>

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
  // Sockets to read: the node models' (by index) and the submitter's (last).
  std::vector<char> dirty(static_cast<std::size_t>(nodes) + 1, 1);
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
    // A send marks its socket to be read (see the loop below).
    env.send = [sock, &dirty, i](const std::string& b) {
      sock->send(zmq::buffer(b), zmq::send_flags::dontwait);
      dirty[static_cast<std::size_t>(i)] = 1;
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
  // The 65 sockets' ZMQ_FDs in one epoll set, so a wait costs one system
  // call instead of zmq_poll's look at every socket (about two system calls
  // per socket per wait; the bench shares the machine with the coordinator
  // it measures). A ZMQ_FD tells only that a socket's state may have
  // changed: a socket it names, and every socket this loop sent on, is read
  // until it has nothing more.
  auto sock_at = [&](std::size_t i) -> zmq::socket_t& {
    return i < socks.size() ? *socks[i] : sub;
  };
  const std::size_t n_socks = socks.size() + 1;
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    throw std::runtime_error("epoll_create1 failed");
  for (std::size_t i = 0; i < n_socks; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, sock_at(i).get(zmq::sockopt::fd), &ev) != 0)
      throw std::runtime_error("epoll_ctl failed");
  }
  // Let every node heartbeat once before the clock starts.
  auto settle = clock_type::now() + std::chrono::seconds(2);
  std::chrono::steady_clock::time_point t0{};
  bool started = false;
  auto deadline = clock_type::now() + std::chrono::minutes(5);
  std::vector<epoll_event> ready(n_socks);
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
      dirty[n_socks - 1] = 1;
      ++sent;
    }
    bool any_dirty = std::find(dirty.begin(), dirty.end(), 1) != dirty.end();
    auto next = timers.empty() ? now_ms() + 100 : timers.begin()->first;
    auto wait = any_dirty ? 0 : std::clamp<std::int64_t>(next - now_ms(), 0, 100);
    int n = ::epoll_wait(ep, ready.data(), static_cast<int>(ready.size()), static_cast<int>(wait));
    for (int k = 0; k < n; ++k)
      dirty[ready[static_cast<std::size_t>(k)].data.u64] = 1;
    for (std::size_t i = 0; i < n_socks; ++i) {
      if (!dirty[i])
        continue;
      dirty[i] = 0;
      auto& s = sock_at(i);
      for (int k = 0;; ++k) {
        if (k == 256) { // fair to the others: come back to it next round
          dirty[i] = 1;
          break;
        }
        zmq::message_t m;
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
  ::close(ep);
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  return {fmt::format("complete lifecycles/s with {} simulated nodes ({} jobs)", nodes, jobs),
          jobs / secs, "lifecycles/s", 10000, true}; // SPEC section 11
}

} // namespace cq::bench
