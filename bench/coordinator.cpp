// cq-bench's real cq-coordinator (coordinator.hpp).
#include "coordinator.hpp"
#include "processes.hpp"

#include "cq/bus/client.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace cq::bench {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string self_dir() {
  return fs::read_symlink("/proc/self/exe").parent_path().string();
}

coordinator::coordinator(bool with_curve) {
  char tmpl[] = "/tmp/cq-bench-XXXXXX";
  dir = ::mkdtemp(tmpl);
  if (const char* keep = std::getenv("CQ_BENCH_KEEP"); !keep || *keep != '1')
    cleanup = remove_on_signal(dir);
  auto bin = self_dir() + "/cq-coordinator";
  auto cmd = fmt::format("'{}' --state '{}' --init-owner bench 2>/dev/null", bin, dir.string());
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[256] = {};
  if (!p || !std::fgets(buf, sizeof buf, p))
    throw std::runtime_error("cq-coordinator --init-owner failed");
  ::pclose(p);
  token = buf;
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r'))
    token.pop_back();
  if (with_curve) {
    auto k = bus::load_or_create_keypair((dir / "curve.key").string());
    if (!k)
      throw std::runtime_error(k.error().message);
    curve = bus::client_curve{k->public_key, bus::new_curve_keypair()};
  }
  std::mt19937 g(std::random_device{}());
  // Below the kernel's ephemeral range (32768 on Linux), where client sockets
  // take their ports.
  endpoint = fmt::format("tcp://127.0.0.1:{}", 10000 + g() % 22000);
  spawn();
}

double coordinator::spawn() {
  auto bin = self_dir() + "/cq-coordinator";
  std::vector<std::string> args = {bin,      "--state",        dir.string(),   "--bind",
                                   endpoint, "--local-socket", local_socket(), "--log-level",
                                   "warn"};
  if (curve)
    args.push_back("--curve");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  auto t0 = clock_type::now();
  if (::posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("cannot start cq-coordinator");
  track_daemon(pid);
  // A generous per-call timeout: a restarting coordinator answers only after
  // recovery, and requests that time out would pile up in front of it.
  bus::client c(endpoint, token, std::chrono::milliseconds(2000), curve);
  for (int i = 0; i < 60; ++i)
    if (c.call<bus::ls_rep>(bus::ls_req{false, std::uint64_t{1}}))
      return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  throw std::runtime_error("cq-coordinator did not answer");
}

void coordinator::kill9() {
  untrack_daemon(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

coordinator::~coordinator() {
  drop_signal_cleanup(cleanup);
  if (pid > 0) {
    untrack_daemon(pid);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::error_code ec; // CQ_BENCH_KEEP=1 keeps the state dir (README: Measuring)
  if (const char* keep = std::getenv("CQ_BENCH_KEEP"); keep && *keep == '1')
    std::fprintf(stderr, "kept %s\n", dir.c_str());
  else
    fs::remove_all(dir, ec);
}

} // namespace cq::bench
