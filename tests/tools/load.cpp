// cq-test-load: raw load for integration tests, speaking the wire protocol
// directly (the CLI would refuse some of it first, on purpose).
//
//   cq-test-load submit-many ENDPOINT TOKEN N ARG_BYTES
//       N submits pipelined over one connection, each `true` plus one
//       argument of ARG_BYTES bytes; prints how many were acknowledged.
//   cq-test-load submit-burst ENDPOINT TOKEN N FILE
//       N runnable jobs pipelined (64 MiB each), each appending its job id
//       to FILE; prints how many were acknowledged.
//   cq-test-load submit-env ENDPOINT TOKEN N
//       submit-many's N submits, each a job named and with this process's
//       environment, as `cq submit` sends one (cq-bench's pipelined clients
//       send the same shape); for profiling the coordinator's submit path.
//   cq-test-load submit-big ENDPOINT TOKEN N ENV_BYTES
//       N submits one at a time, each with an environment of ENV_BYTES bytes;
//       prints one line per reply ("ok" or the error code).
// Jobs of submit-many and submit-big ask for 1 PiB of RAM: they fit no node
// and stay queued.
//
//   cq-test-load forge-replies ENDPOINT SECONDS MAX_ID
//       for SECONDS, sends order replies (a log chunk "FORGED") for every id
//       from 1 to MAX_ID, without a token: a process that can reach the port
//       trying to answer orders that went to a node.
#include "cq/bus/client.hpp"
#include "cq/bus/codec.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using namespace cq;

bus::job_spec spec_with(std::string arg, std::size_t env_bytes) {
  bus::job_spec s;
  s.argv = {"true", std::move(arg)};
  s.cwd = "/";
  s.ram_bytes = 1ull << 50;
  // Split into variables of at most 100,000 bytes (the per-value limit).
  for (std::size_t i = 0; env_bytes > 0; ++i) {
    auto n = std::min<std::size_t>(env_bytes, 100000);
    s.env[fmt::format("BIG{}", i)] = std::string(n, 'x');
    env_bytes -= n;
  }
  return s;
}

extern "C" char** environ;

/// This process's environment, read as `cq submit` reads its own
/// (cli/src/sys.cpp: environment(), which lives in the cq executable).
bus::env_map own_env() {
  bus::env_map env;
  for (char** e = environ; *e; ++e)
    if (const char* eq = std::strchr(*e, '='); eq && eq != *e)
      env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  return env;
}

int submit_many(const std::string& ep, const std::string& token, std::uint64_t n,
                std::size_t arg_bytes, const std::string& burst_file = {}, bool with_env = false) {
  static const bus::env_map env = with_env ? own_env() : bus::env_map{};
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(bus::limits::frame_bytes));
  sock.connect(ep);
  std::uint64_t sent = 0, acked = 0, failed = 0;
  constexpr std::uint64_t window = 256;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (acked + failed < n && std::chrono::steady_clock::now() < deadline) {
    while (sent < n && sent - acked - failed < window) {
      auto arg = fmt::format("{:0>{}}", sent, arg_bytes);
      // Held for a node: it fits none (it is meant to stay queued).
      bus::submit_req req{spec_with(arg, 0), {}, true};
      if (!burst_file.empty()) {
        req.spec.argv = {"sh", "-c", "echo \"$CQ_JOB_ID\" >>" + burst_file};
        req.spec.ram_bytes = 64ull << 20;
        req.spec.env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
      }
      if (with_env) {
        req.spec.argv = {"true"};
        req.spec.name = fmt::format("job-{}", sent);
        req.spec.env = env;
      }
      auto bytes = bus::encode_request(++sent, token, req);
      sock.send(zmq::buffer(bytes), zmq::send_flags::none);
    }
    zmq::message_t msg;
    zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(1000));
    while (sock.recv(msg, zmq::recv_flags::dontwait)) {
      std::uint64_t seen = 0;
      auto f = bus::decode_frame(msg.to_string_view(), seen);
      if (f && f->ok)
        ++acked;
      else
        ++failed;
    }
  }
  fmt::print("{}\n", acked);
  return acked == n ? 0 : 1;
}

int submit_big(const std::string& ep, const std::string& token, std::uint64_t n,
               std::size_t env_bytes) {
  bus::client c(ep, token, std::chrono::milliseconds(20000));
  for (std::uint64_t i = 0; i < n; ++i) {
    auto r = c.call<bus::submit_rep>(
        bus::submit_req{spec_with(std::to_string(i), env_bytes), {}, true}); // held: fits no node
    fmt::print("{}\n", r ? std::string("ok") : std::string(to_string(r.error().code)));
  }
  return 0;
}

int forge(const std::string& ep, int seconds, std::uint64_t max_id) {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::sndhwm, 1000);
  sock.connect(ep);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::uint64_t frames = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (std::uint64_t id = 1; id <= max_id; ++id) {
      auto bytes = bus::encode_reply(id, bus::log_chunk{"FORGED\n", 7, true});
      (void)sock.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      ++frames;
    }
    zmq::message_t drain;
    while (sock.recv(drain, zmq::recv_flags::dontwait)) {
    }
  }
  fmt::print("{}\n", frames);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "submit-many" && argc == 6)
      return submit_many(argv[2], argv[3], std::stoull(argv[4]), std::stoull(argv[5]));
    if (mode == "submit-burst" && argc == 6)
      return submit_many(argv[2], argv[3], std::stoull(argv[4]), 1, argv[5]);
    if (mode == "submit-env" && argc == 5)
      return submit_many(argv[2], argv[3], std::stoull(argv[4]), 1, {}, true);
    if (mode == "submit-big" && argc == 6)
      return submit_big(argv[2], argv[3], std::stoull(argv[4]), std::stoull(argv[5]));
    if (mode == "forge-replies" && argc == 5)
      return forge(argv[2], std::stoi(argv[3]), std::stoull(argv[4]));
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-test-load: {}\n", e.what());
    return 1;
  }
  fmt::print(stderr, "usage: see the header of tests/tools/load.cpp\n");
  return 2;
}
