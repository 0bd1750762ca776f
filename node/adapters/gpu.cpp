#include "cq/node/gpu.hpp"
#include "cq/node/files.hpp"
#include "cq/node/seams.hpp"
#include "node/adapters/adapters.hpp"

#include "cq/bus/wakeup.hpp"

#include "node/adapters/clock.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/gpu_host.hpp"
#include "node/adapters/gpu_lock.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

extern char** environ;

namespace cq::node {

namespace {

constexpr auto smi_timeout = std::chrono::milliseconds(10'000);

/// The first non-empty line of `text`, at most 200 characters (for errors).
std::string first_line(std::string_view text) {
  while (!text.empty()) {
    auto end = text.find('\n');
    auto line = trim(text.substr(0, end));
    if (!line.empty())
      return std::string(line.substr(0, 200));
    if (end == std::string_view::npos)
      break;
    text.remove_prefix(end + 1);
  }
  return {};
}

std::optional<std::string> read_proc_file(pid_t pid, const char* what, std::size_t max) {
  return read_file_bounded(fmt::format("/proc/{}/{}", pid, what), max);
}

} // namespace

// ---- node.toml's [gpu] ---------------------------------------------------------------

bus::result<gpu_config> load_gpu_config(const std::filesystem::path& node_toml) {
  std::error_code ec;
  if (!std::filesystem::exists(node_toml, ec))
    return gpu_config{};
  auto text = read_file_bounded(node_toml, 1 << 20);
  if (!text)
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}: cannot read", node_toml.string())};
  return parse_gpu_config(*text, node_toml);
}

// ---- running nvidia-smi -------------------------------------------------------------------

bus::result<command_result> run_command(const std::vector<std::string>& argv,
                                        std::chrono::milliseconds timeout, std::size_t max_output) {
  if (argv.empty())
    return bus::error_info{errc::invalid_argument, "empty command"};
  int pipefd[2];
  if (!bus::cloexec_pipe(pipefd))
    return bus::error_info{errc::internal, fmt::format("pipe: {}", std::strerror(errno))};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  ::posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  sigset_t none, all;
  ::sigemptyset(&none);
  ::sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return bus::error_info{rc == ENOENT ? errc::not_found : errc::internal,
                           fmt::format("cannot run {}: {}", argv[0], std::strerror(rc))};
  }
  command_result res;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      res.timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      continue; // timeout: checked at the top
    auto got = ::read(pipefd[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break; // EOF: every writer (the program and what it started) is done
    if (res.output.size() < max_output)
      res.output.append(buf,
                        std::min(static_cast<std::size_t>(got), max_output - res.output.size()));
  }
  ::close(pipefd[0]);
  if (res.timed_out)
    ::killpg(pid, SIGKILL);
  int wstatus = 0;
  // A program that closed its output but has not exited yet gets until the deadline.
  for (;;) {
    auto w = ::waitpid(pid, &wstatus, res.timed_out ? 0 : WNOHANG);
    if (w < 0 && errno == EINTR)
      continue;
    if (w == pid)
      break;
    if (w < 0)
      return res;
    if (std::chrono::steady_clock::now() >= deadline) {
      res.timed_out = true;
      ::killpg(pid, SIGKILL);
      continue;
    }
    ::usleep(2000);
  }
  if (!res.timed_out && WIFEXITED(wstatus))
    res.exit_code = WEXITSTATUS(wstatus);
  return res;
}

namespace {

/// Runs nvidia-smi with `args`; its output, or why it is unusable (one line).
bus::result<std::string> run_smi(const std::string& smi, std::vector<std::string> args,
                                 std::chrono::milliseconds timeout) {
  args.insert(args.begin(), smi);
  auto r = run_command(args, timeout);
  if (!r) {
    if (r.error().code == errc::not_found)
      return bus::error_info{errc::not_found, fmt::format("{} not found", smi)};
    return r.error();
  }
  if (r->timed_out)
    return bus::error_info{errc::unavailable,
                           fmt::format("{} did not answer within {} ms", smi, timeout.count())};
  if (r->exit_code != 0) {
    auto line = first_line(r->output);
    return bus::error_info{errc::unavailable,
                           fmt::format("{} {} ({}){}", smi,
                                       r->exit_code < 0 ? std::string("was killed")
                                                        : fmt::format("exited {}", r->exit_code),
                                       fmt::join(args.begin() + 1, args.end(), " "),
                                       line.empty() ? "" : ": " + line)};
  }
  return std::move(r->output);
}

const std::vector<std::string> gpu_query_args = {
    "--query-gpu=index,uuid,name,memory.total,memory.used", "--format=csv,noheader,nounits"};
const std::vector<std::string> apps_query_args = {"--query-compute-apps=pid,gpu_uuid,used_memory",
                                                  "--format=csv,noheader,nounits"};

} // namespace

bus::result<std::vector<bus::lane_info>> detect_lanes(const std::string& nvidia_smi,
                                                      std::chrono::milliseconds timeout) {
#ifdef __APPLE__
  (void)nvidia_smi;
  (void)timeout;
  bus::lane_info l;
  l.name = "gpu0"; // Apple GPU: one unindexed lane (no CUDA device index)
  return std::vector<bus::lane_info>{l};
#else
  auto out = run_smi(nvidia_smi, gpu_query_args, timeout);
  if (!out)
    return out.error();
  auto devices = parse_gpu_query(*out);
  if (devices.empty()) {
    auto line = first_line(*out);
    return bus::error_info{errc::not_found,
                           fmt::format("{} lists no usable GPU{}", nvidia_smi,
                                       line.empty() ? "" : fmt::format(" (it said: {})", line))};
  }
  return lanes_from_devices(devices);
#endif
}

// ---- attribution --------------------------------------------------------------------------

std::optional<std::string> owner_of(pid_t pid, const std::vector<gpu_owner>& owners) {
  if (owners.empty())
    return std::nullopt;
  // The process and its ancestors: in an allocation's process group?
  pid_t p = pid;
  for (int depth = 0; depth < 64 && p > 1; ++depth) {
    auto stat = read_proc_file(p, "stat", 4096);
    if (!stat)
      break;
    auto f = parse_stat_ppid_pgrp(*stat);
    if (!f)
      break;
    for (auto& o : owners)
      if (o.pgid > 0 && (f->pgrp == o.pgid || p == o.pgid))
        return o.allocation;
    p = f->ppid;
  }
  // A process that left the group (setsid, a double fork) still carries the marker.
  if (auto env = read_proc_file(pid, "environ", 1 << 20))
    if (auto id = environ_allocation_id(*env))
      for (auto& o : owners)
        if (o.allocation == *id)
          return o.allocation;
  return std::nullopt;
}

namespace {

/// Runs the telemetry queries every `every_ms` on its own thread and keeps
/// the latest pair of answers for the loop thread to take.
struct smi_sampler {
  using answers = smi_answers;
  explicit smi_sampler(std::string smi) : smi_(std::move(smi)) {
    thread_ = std::thread([this] { run(); });
  }
  ~smi_sampler() {
    {
      std::lock_guard<std::mutex> g(mtx_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join(); // at most one nvidia-smi call (bounded by smi_timeout)
  }
  /// The answers gathered since the last take, if any; sets the pace.
  std::optional<answers> take(std::int64_t every_ms) {
    std::lock_guard<std::mutex> g(mtx_);
    every_ms_ = every_ms;
    return std::exchange(latest_, std::nullopt);
  }

private:
  void run() {
    std::unique_lock<std::mutex> lk(mtx_);
    while (!stop_) {
      lk.unlock();
      // memory.used per lane, then the compute processes.
      auto gpus = run_smi(smi_, gpu_query_args, smi_timeout);
      auto apps = gpus ? run_smi(smi_, apps_query_args, smi_timeout)
                       : bus::result<std::string>(gpus.error());
      lk.lock();
      latest_.emplace(std::move(gpus), std::move(apps));
      cv_.wait_for(lk, std::chrono::milliseconds(every_ms_), [this] { return stop_; });
    }
  }

  const std::string smi_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;             // guarded by mtx_
  std::int64_t every_ms_ = 1000;  // guarded by mtx_
  std::optional<answers> latest_; // guarded by mtx_
  std::thread thread_;
};

/// The machine's GPU probes: nvidia-smi (telemetry on a sampler thread), the
/// process table, the kernel log (fault_latch.hpp's follower) and the GPU lock
/// paths (gpu_lock.hpp).
class linux_gpu_probes final : public gpu_probes {
public:
  explicit linux_gpu_probes(const gpu_config& cfg)
      : smi_(cfg.nvidia_smi), klog_(cfg.kernel_log), lock_(cfg.lock_paths) {}

  bus::result<std::vector<bus::lane_info>> detect_lanes() override {
    return node::detect_lanes(smi_, smi_timeout);
  }
  std::optional<smi_answers> telemetry(std::int64_t every_ms) override {
    if (!sampler_)
      sampler_ = std::make_unique<smi_sampler>(smi_);
    return sampler_->take(every_ms);
  }
  std::optional<std::string> owner_of(pid_t pid, const std::vector<gpu_owner>& owners) override {
    return node::owner_of(pid, owners);
  }
  std::optional<std::string> process_name(pid_t pid) override {
    return read_proc_file(pid, "comm", 256);
  }
  status open_kernel_log() override { return klog_.open(); }
  std::vector<std::string> kernel_log_lines() override {
    if (!klog_.is_open())
      return {};
    return klog_.read_lines();
  }
  status lock_acquire(std::chrono::milliseconds wait) override { return lock_.acquire(wait); }
  void lock_release() override { lock_.release(); }
  bus::string_list busy_probes() override { return lock_.busy_probes(); }
  bool has_probes() const override { return lock_.paths().size() > 1; }

private:
  std::string smi_;
  kernel_log_follower klog_;
  gpu_lock lock_;
  std::unique_ptr<smi_sampler> sampler_; ///< started at the first telemetry call
};

} // namespace

std::unique_ptr<gpu_probes> make_gpu_probes(const gpu_config& cfg) {
  return std::make_unique<linux_gpu_probes>(cfg);
}

gpu_supervisor::gpu_supervisor(gpu_config cfg, std::filesystem::path state_dir)
    : gpu_supervisor(cfg, std::move(state_dir), make_gpu_probes(cfg), machine_disk_instance()) {
  wall_ = [] { return wall_ms(); };
}

} // namespace cq::node
