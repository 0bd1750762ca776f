#include "processes.hpp"

#include "coordinator.hpp"

#include "cq/bus/codec.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace cq::bench {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(std::max<std::size_t>(rank, 1), v.size()) - 1];
}

long rss_kb(pid_t pid) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/status", pid).c_str(), "r");
  long kb = -1;
  char line[256];
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  if (f)
    std::fclose(f);
  return kb;
}

namespace {

/// The tracked daemons' pids (0: a free slot), read on a signal.
std::array<std::atomic<pid_t>, 64> tracked{};
/// The signal handler's word to the cleaner thread: the signal's number.
int signal_pipe[2] = {-1, -1};
std::atomic<bool> stopping{false};

std::mutex cleanups_mutex;
std::map<std::uint64_t, std::function<void()>> cleanups; // guarded by cleanups_mutex
std::uint64_t next_cleanup = 1;                          // guarded by cleanups_mutex

extern "C" void on_stop_signal(int sig) {
  if (stopping.exchange(true)) { // a second signal: at once
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  auto byte = static_cast<unsigned char>(sig);
  if (::write(signal_pipe[1], &byte, 1) != 1) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

/// Whether `pid` has ended (reaped here when it is a child of cq-bench).
bool ended(pid_t pid) {
  return ::waitpid(pid, nullptr, WNOHANG) == pid || (::kill(pid, 0) != 0 && errno == ESRCH);
}

/// The cleaner thread: ends the daemons, runs the cleanups, then the signal.
void clean_on_signal() {
  unsigned char sig = 0;
  while (::read(signal_pipe[0], &sig, 1) != 1)
    if (errno != EINTR)
      return;
  std::vector<pid_t> daemons;
  for (auto& p : tracked)
    if (auto pid = p.load(); pid > 0 && ::kill(pid, SIGTERM) == 0)
      daemons.push_back(pid);
  auto deadline = clock_type::now() + std::chrono::seconds(5);
  while (!daemons.empty() && clock_type::now() < deadline) {
    std::erase_if(daemons, ended);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::map<std::uint64_t, std::function<void()>> undo;
  {
    std::lock_guard lock(cleanups_mutex);
    undo.swap(cleanups);
  }
  for (auto& [id, f] : undo) {
    try {
      f();
    } catch (const std::exception&) {
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

} // namespace

void end_daemons_on_signals() {
  if (::pipe2(signal_pipe, O_CLOEXEC) != 0)
    return;
  std::thread(clean_on_signal).detach();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &sa, nullptr);
}

std::uint64_t on_signal_cleanup(std::function<void()> undo) {
  std::lock_guard lock(cleanups_mutex);
  cleanups.emplace(next_cleanup, std::move(undo));
  return next_cleanup++;
}

void drop_signal_cleanup(std::uint64_t id) {
  std::lock_guard lock(cleanups_mutex);
  cleanups.erase(id);
}

std::uint64_t remove_on_signal(std::filesystem::path dir) {
  return on_signal_cleanup([d = std::move(dir)] {
    std::error_code ec;
    fs::remove_all(d, ec);
  });
}

void track_daemon(pid_t pid) {
  for (auto& p : tracked)
    if (pid_t free = 0; pid > 0 && p.compare_exchange_strong(free, pid))
      return;
}

void untrack_daemon(pid_t pid) {
  if (pid <= 0)
    return;
  for (auto& p : tracked) {
    pid_t it = pid;
    p.compare_exchange_strong(it, 0);
  }
}

namespace {

/// Starts `argv` with exactly the environment `env`, its stdout on `out_fd`
/// (/dev/null when -1) and its stderr on /dev/null.
pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, int out_fd) {
  std::vector<char*> envp, args;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  ::posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0)
    ::posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  else
    ::posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw std::runtime_error("cannot run " + argv[0]);
  return pid;
}

/// Waits for `pid`, started as `argv`; throws unless it exited 0.
void wait_ok(pid_t pid, const std::vector<std::string>& argv) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("{} {} failed", argv[0], argv.size() > 1 ? argv[1] : ""));
}

} // namespace

double time_process(std::vector<std::string> argv, std::vector<std::string> env) {
  auto t0 = clock_type::now();
  wait_ok(spawn(argv, std::move(env), -1), argv);
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

std::string output_of(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot make a pipe");
  pid_t pid = -1;
  try {
    pid = spawn(argv, env, out[1]);
  } catch (...) {
    ::close(out[0]);
    ::close(out[1]);
    throw;
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;)
    if (n > 0)
      text.append(buf, static_cast<std::size_t>(n));
    else if (errno != EINTR)
      break;
  ::close(out[0]);
  wait_ok(pid, argv);
  return text;
}

void stop_and_remove(std::vector<std::string> stop, const std::vector<std::string>& env,
                     const fs::path& dir) {
  try {
    time_process(std::move(stop), env);
  } catch (const std::exception&) {
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

local_up::local_up() : bin(self_dir() + "/cq") {
  char tmpl[] = "/tmp/cq-bench-up-XXXXXX";
  home = ::mkdtemp(tmpl);
  cleanup = remove_on_signal(home);
  env = {"HOME=" + home.string(), "CQ_CONFIG_DIR=" + (home / ".config/cq").string(),
         "PATH=/usr/bin:/bin"};
  std::mt19937 g(std::random_device{}());
  time_process({bin, "up", "--port", std::to_string(10000 + g() % 22000)}, env);
  track_daemon(pid_of("coordinator"));
  track_daemon(pid_of("node"));
}

local_up::~local_up() {
  drop_signal_cleanup(cleanup);
  untrack_daemon(pid_of("coordinator"));
  untrack_daemon(pid_of("node"));
  stop_and_remove({bin, "down"}, env, home);
}

std::uint64_t local_up::live_jobs() {
  if (!poller) {
    auto cfg = home / ".config/cq";
    std::string url, token;
    std::getline(std::ifstream(cfg / "url"), url);
    std::getline(std::ifstream(cfg / "token"), token);
    poller = std::make_unique<bus::client>(url, token, std::chrono::milliseconds(5000));
  }
  auto& c = *poller;
  bus::ls_req req{false, std::uint64_t{1}};
  req.rows = true;
  req.states = bus::string_list{"queued", "starting", "running", "stopping"};
  auto rep = c.call<bus::ls_rep>(req);
  if (!rep)
    throw std::runtime_error("cq ls failed: " + rep.error().message);
  return rep->total_rows.value_or(0);
}

void local_up::wait_drained(std::chrono::seconds limit, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (auto live = live_jobs()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(what);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::clamp<std::uint64_t>(2 * live, 1, 50)));
  }
}

pid_t local_up::pid_of(const std::string& daemon) const {
  long pid = -1;
  std::ifstream(home / ".local/share/cq" / (daemon + ".pid")) >> pid;
  return static_cast<pid_t>(pid);
}

/// task-spooler's binary on PATH ("" if it is not installed).
std::string find_tsp() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= p.size();) {
    auto end = p.find(':', start);
    auto dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    for (auto name : {"tsp", "ts"}) {
      auto f = fs::path(dir.empty() ? "." : dir) / name;
      if (::access(f.c_str(), X_OK) == 0)
        return f.string();
    }
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return "";
}

tsp_server::tsp_server(std::string tsp, int max_finished) : bin(std::move(tsp)) {
  char tmpl[] = "/tmp/cq-bench-tsp-XXXXXX";
  if (!::mkdtemp(tmpl))
    throw std::runtime_error("cannot make a folder for task-spooler");
  dir = tmpl;
  env = {"TS_SOCKET=" + (dir / "socket").string(), "TMPDIR=" + dir.string(),
         fmt::format("TS_MAXFINISHED={}", max_finished), "HOME=" + dir.string(),
         "PATH=/usr/bin:/bin"};
  cleanup = on_signal_cleanup([b = bin, e = env, d = dir] { stop_and_remove({b, "-K"}, e, d); });
}

tsp_server::~tsp_server() {
  drop_signal_cleanup(cleanup);
  stop_and_remove({bin, "-K"}, env, dir);
}

double tsp_server::server_rss_mb() const {
  time_process({bin, "-l"}, env);
  const std::string mine = env[0]; // TS_SOCKET=...
  for (auto& e : fs::directory_iterator("/proc")) {
    auto pid = std::atol(e.path().filename().c_str());
    std::string comm, environ;
    std::getline(std::ifstream(e.path() / "comm"), comm);
    if (pid <= 0 || comm != "tsp")
      continue;
    std::ifstream in(e.path() / "environ");
    environ.assign(std::istreambuf_iterator<char>(in), {});
    for (std::size_t at = 0; at < environ.size();) {
      auto end = environ.find('\0', at);
      if (environ.compare(at, end - at, mine) == 0)
        return static_cast<double>(rss_kb(static_cast<pid_t>(pid))) / 1024.0;
      at = end == std::string::npos ? end : end + 1;
    }
  }
  return -1;
}

} // namespace cq::bench
