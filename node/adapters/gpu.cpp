#include "cq/node/gpu.hpp"
#include "cq/node/files.hpp"
#include "cq/node/seams.hpp"
#include "node/adapters/adapters.hpp"

#include "node/adapters/clock.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

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
constexpr std::uint64_t mib = 1024 * 1024;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto at = s.find(sep);
    out.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos)
      return out;
    s.remove_prefix(at + 1);
  }
}

template <class T>
bool parse_int(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && !s.empty();
}

/// A memory figure in MiB: a number, or "[N/A]"/"[Not Supported]" (0). nullopt = garbage.
std::optional<std::uint64_t> parse_mib(std::string_view s) {
  if (!s.empty() && s.front() == '[')
    return 0;
  std::uint64_t v = 0;
  if (!parse_int(s, v) || v > (UINT64_MAX / mib))
    return std::nullopt;
  return v * mib;
}

template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    fn(trim(text.substr(0, nl)));
    if (nl == std::string_view::npos)
      break;
    text.remove_prefix(nl + 1);
  }
}

std::string first_line(std::string_view text) {
  std::string_view line;
  for_each_line(text, [&](std::string_view l) {
    if (line.empty() && !l.empty())
      line = l;
  });
  if (line.size() > 200)
    line = line.substr(0, 200);
  return std::string(line);
}

std::optional<std::string> read_proc_file(pid_t pid, const char* what, std::size_t max) {
  return read_file_bounded(fmt::format("/proc/{}/{}", pid, what), max);
}

/// Where a registered lane's name, index and uuid were given (for duplicate messages).
struct registered_lane {
  bus::lane_info lane;
  std::int64_t line = 0; ///< of its [[gpu.lanes]] header
};

/// An invalid_argument error at `at` of `file` ("file:line: what").
bus::error_info config_error(const std::filesystem::path& file, const toml::source_region& at,
                             std::string_view what) {
  return bus::error_info{errc::invalid_argument,
                         fmt::format("{}:{}: {}", file.string(), at.begin.line, what)};
}

/// Reads the `[[gpu.lanes]]` array `lanes_node` of `file`.
bus::result<std::vector<bus::lane_info>> read_lanes(const toml::node& lanes_node,
                                                    const std::filesystem::path& file) {
  auto bad = [&](const toml::source_region& at, std::string_view what) {
    return config_error(file, at, what);
  };
  constexpr const char* hint = "'gpu.lanes' must be an array of tables ([[gpu.lanes]] with name, "
                               "index, uuid, vram_bytes)";
  const toml::array* arr = lanes_node.as_array();
  if (!arr)
    return bad(lanes_node.source(), hint);
  if (arr->empty())
    return bad(lanes_node.source(),
               "'gpu.lanes' is empty: register at least one lane, or leave it out "
               "to detect lanes with nvidia-smi");
  std::vector<registered_lane> seen;
  for (auto& item : *arr) {
    const toml::table* tbl = item.as_table();
    if (!tbl)
      return bad(item.source(), hint);
    registered_lane r;
    r.line = static_cast<std::int64_t>(item.source().begin.line);
    bool has_name = false, has_vram = false;
    for (auto&& [k, v] : *tbl) {
      auto key = k.str();
      if (key == "name") {
        auto s = v.value<std::string>();
        if (!v.is_string() || !s || !valid_lane_name(*s))
          return bad(v.source(),
                     "'gpu.lanes.name' must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
        for (auto& other : seen)
          if (other.lane.name == *s)
            return bad(v.source(), fmt::format("'gpu.lanes.name' \"{}\" is already the name of the "
                                               "lane registered on line {}",
                                               *s, other.line));
        r.lane.name = *s;
        has_name = true;
      } else if (key == "index") {
        auto i = v.value_exact<std::int64_t>();
        if (!v.is_integer() || !i || *i < 0)
          return bad(v.source(), "'gpu.lanes.index' must be an integer >= 0 (a CUDA device index)");
        for (auto& other : seen)
          if (other.lane.index == *i)
            return bad(v.source(), fmt::format("'gpu.lanes.index' {} is already the index of lane "
                                               "'{}' (line {})",
                                               *i, other.lane.name, other.line));
        r.lane.index = *i;
      } else if (key == "uuid") {
        auto s = v.value<std::string>();
        if (!v.is_string() || !s || s->empty())
          return bad(v.source(), "'gpu.lanes.uuid' must be a non-empty string");
        for (auto& other : seen)
          if (other.lane.uuid == *s)
            return bad(v.source(),
                       fmt::format("'gpu.lanes.uuid' \"{}\" is already the uuid of lane "
                                   "'{}' (line {})",
                                   *s, other.lane.name, other.line));
        r.lane.uuid = *s;
      } else if (key == "vram_bytes") {
        auto i = v.value_exact<std::int64_t>();
        if (!v.is_integer() || !i || *i < 0)
          return bad(v.source(), "'gpu.lanes.vram_bytes' must be an integer >= 0 (the lane's "
                                 "total VRAM in bytes)");
        r.lane.vram_total_bytes = static_cast<std::uint64_t>(*i);
        has_vram = true;
      } else {
        return bad(k.source(), fmt::format("unknown key 'gpu.lanes.{}' (known: name, index, uuid, "
                                           "vram_bytes)",
                                           key));
      }
    }
    if (!has_name)
      return bad(item.source(), "'gpu.lanes.name' is missing in this [[gpu.lanes]] table");
    if (!has_vram)
      return bad(item.source(),
                 fmt::format("'gpu.lanes.vram_bytes' is missing for lane '{}' (its total VRAM in "
                             "bytes)",
                             r.lane.name));
    seen.push_back(std::move(r));
  }
  std::vector<bus::lane_info> lanes;
  for (auto& r : seen)
    lanes.push_back(std::move(r.lane));
  return lanes;
}

} // namespace

bool valid_lane_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// ---- configuration ----------------------------------------------------------------

bus::result<gpu_config> load_gpu_config(const std::filesystem::path& node_toml) {
  gpu_config cfg;
  std::error_code ec;
  if (!std::filesystem::exists(node_toml, ec))
    return cfg;
  toml::table root;
  try {
    root = toml::parse_file(node_toml.string());
  } catch (const toml::parse_error& e) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}: not valid TOML: {}", node_toml.string(),
                                       e.source().begin.line, e.description())};
  } catch (const std::exception& e) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}: cannot read: {}", node_toml.string(), e.what())};
  }
  const toml::node* node = root.get("gpu");
  if (!node)
    return cfg;
  auto bad = [&](const toml::source_region& at, std::string what) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}: {}", node_toml.string(), at.begin.line, what)};
  };
  const toml::table* tbl = node->as_table();
  if (!tbl)
    return bad(node->source(), "'gpu' must be a table ([gpu])");
  for (auto&& [k, v] : *tbl) {
    if (k.str() == "nvidia_smi") {
      auto s = v.value<std::string>();
      if (!v.is_string() || !s || s->empty())
        return bad(v.source(), "'gpu.nvidia_smi' must be a non-empty string (a path or a name "
                               "in PATH)");
      cfg.nvidia_smi = *s;
    } else if (k.str() == "kernel_log") {
      auto s = v.value<std::string>();
      if (!v.is_string() || !s)
        return bad(v.source(), "'gpu.kernel_log' must be a string (\"\" = not followed)");
      cfg.kernel_log = *s;
    } else if (k.str() == "telemetry") {
      auto b = v.value<bool>();
      if (!v.is_boolean() || !b)
        return bad(v.source(), "'gpu.telemetry' must be true or false");
      cfg.telemetry = *b;
    } else if (k.str() == "lock_paths") {
      const toml::array* arr = v.as_array();
      if (!arr)
        return bad(v.source(), "'gpu.lock_paths' must be an array of absolute paths");
      for (auto& item : *arr) {
        auto s = item.value<std::string>();
        if (!item.is_string() || !s || s->empty() || s->front() != '/')
          return bad(item.source(), "'gpu.lock_paths' must hold absolute paths");
        cfg.lock_paths.push_back(*s);
      }
    } else if (k.str() == "lanes") {
      auto lanes = read_lanes(v, node_toml);
      if (!lanes)
        return lanes.error();
      cfg.lanes = std::move(*lanes);
    } else {
      return bad(k.source(), fmt::format("unknown key 'gpu.{}' (known: nvidia_smi, lock_paths, "
                                         "kernel_log, telemetry, lanes)",
                                         k.str()));
    }
  }
  return cfg;
}

// ---- parsing ------------------------------------------------------------------------

std::vector<gpu_device> parse_gpu_query(std::string_view text) {
  std::vector<gpu_device> out;
  for_each_line(text, [&](std::string_view line) {
    if (line.empty() || line.find("MIG") != std::string_view::npos)
      return;
    auto f = split(line, ',');
    // index, uuid, name (may itself hold commas), memory.total, memory.used
    if (f.size() < 5)
      return;
    gpu_device d;
    if (!parse_int(f[0], d.index) || d.index < 0 || d.index > 1023)
      return;
    if (f[1].substr(0, 4) != "GPU-")
      return;
    d.uuid = std::string(f[1]);
    std::string name;
    for (std::size_t i = 2; i + 2 < f.size(); ++i)
      name += fmt::format("{}{}", name.empty() ? "" : ", ", f[i]);
    d.name = std::move(name);
    auto total = parse_mib(f[f.size() - 2]);
    auto used = parse_mib(f[f.size() - 1]);
    if (!total || !used)
      return;
    d.total_bytes = *total;
    d.used_bytes = *used;
    for (auto& seen : out)
      if (seen.index == d.index || seen.uuid == d.uuid)
        return;
    out.push_back(std::move(d));
  });
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.index < b.index; });
  return out;
}

std::vector<gpu_app> parse_apps_query(std::string_view text) {
  std::vector<gpu_app> out;
  for_each_line(text, [&](std::string_view line) {
    auto f = split(line, ',');
    if (f.size() != 3)
      return;
    gpu_app a;
    if (!parse_int(f[0], a.pid) || a.pid <= 0 || f[1].empty())
      return;
    a.uuid = std::string(f[1]);
    auto used = parse_mib(f[2]);
    if (!used)
      return;
    a.used_bytes = *used;
    out.push_back(std::move(a));
  });
  return out;
}

std::vector<bus::lane_info> lanes_from_devices(const std::vector<gpu_device>& devices) {
  std::vector<bus::lane_info> lanes;
  for (auto& d : devices) {
    bus::lane_info l;
    l.name = fmt::format("gpu{}", d.index);
    l.index = d.index;
    l.uuid = d.uuid;
    l.vram_total_bytes = d.total_bytes;
    l.vram_used_bytes = d.used_bytes;
    lanes.push_back(std::move(l));
  }
  return lanes;
}

// ---- running nvidia-smi -------------------------------------------------------------------

bus::result<command_result> run_command(const std::vector<std::string>& argv,
                                        std::chrono::milliseconds timeout, std::size_t max_output) {
  if (argv.empty())
    return bus::error_info{errc::invalid_argument, "empty command"};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0)
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

std::optional<proc_facts> parse_stat_ppid_pgrp(std::string_view text) {
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  auto rest = trim(text.substr(close + 1));
  // state ppid pgrp ...
  std::vector<std::string_view> tok;
  while (tok.size() < 3 && !rest.empty()) {
    auto sp = rest.find(' ');
    tok.push_back(rest.substr(0, sp));
    if (sp == std::string_view::npos)
      break;
    rest = trim(rest.substr(sp + 1));
  }
  proc_facts f;
  if (tok.size() < 3 || !parse_int(tok[1], f.ppid) || !parse_int(tok[2], f.pgrp))
    return std::nullopt;
  return f;
}

std::optional<std::string> environ_allocation_id(std::string_view block) {
  constexpr std::string_view key = "CQ_ALLOCATION_ID=";
  while (!block.empty()) {
    auto end = block.find('\0');
    auto entry = block.substr(0, end);
    if (entry.substr(0, key.size()) == key)
      return std::string(entry.substr(key.size()));
    if (end == std::string_view::npos)
      break;
    block.remove_prefix(end + 1);
  }
  return std::nullopt;
}

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

std::uint64_t vram_use::total() const {
  std::uint64_t t = 0;
  for (auto& [lane, b] : per_lane)
    t += b;
  return t;
}

std::uint64_t vram_use::max_lane() const {
  std::uint64_t m = 0;
  for (auto& [lane, b] : per_lane)
    m = std::max(m, b);
  return m;
}

std::optional<std::pair<std::string, std::uint64_t>> over_vram_cap(const vram_use& use,
                                                                   std::uint64_t cap) {
  for (auto& [lane, b] : use.per_lane)
    if (b > cap)
      return std::pair{lane, b};
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
    : gpu_supervisor(cfg, std::move(state_dir), make_gpu_probes(cfg)) {
  wall_ = [] { return wall_ms(); };
}

} // namespace cq::node
