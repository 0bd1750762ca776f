// cq-node doctor (doctor.hpp).
#include "node/adapters/doctor.hpp"

#include "cq/node/config.hpp"
#include "cq/node/files.hpp"
#include "cq/node/gpu.hpp"
#include "node/adapters/adapters.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/gpu_host.hpp"
#include "node/adapters/posix/primitives.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <pwd.h>
#if defined(__linux__)
#include <sys/statfs.h>
#endif
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace cq::node {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr long cgroup2_magic = 0x63677270; // CGROUP2_SUPER_MAGIC
constexpr std::uint64_t test_cap_bytes = 32ull << 20;
constexpr auto test_deadline = std::chrono::seconds(5);

struct finding {
  std::string check;  ///< short key, also the JSON name
  std::string value;  ///< what was found
  bool ok = true;     ///< false: it stops cq from working well here
  std::string advice; ///< what to do ("" when nothing)
};

std::string read_text(const fs::path& p) {
  return read_file_bounded(p, 64 << 10).value_or("");
}

std::string cgroup_version() {
#if !defined(__linux__)
  return "none";
#else
  struct statfs s {};
  if (::statfs("/sys/fs/cgroup", &s) != 0)
    return "none";
  if (static_cast<long>(s.f_type) == cgroup2_magic)
    return "cgroup_v2";
  std::error_code ec;
  return fs::is_directory("/sys/fs/cgroup/memory", ec) ? "cgroup_v1" : "none";
#endif
}

/// The driver version nvidia-smi reports, or nullopt.
std::optional<std::string> driver_version(const std::string& nvidia_smi) {
  auto r = run_command({nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"},
                       std::chrono::seconds(10), 4096);
  if (!r || r->exit_code != 0)
    return std::nullopt;
  auto line = trim(std::string_view(r->output).substr(0, r->output.find('\n')));
  return line.empty() ? std::nullopt : std::optional<std::string>(line);
}

/// A shell function that runs its arguments in a session of their own:
/// setsid(1) where there is one (Linux), perl's POSIX::setsid on a Mac.
constexpr const char* new_session_sh =
    "new_session() { if command -v setsid >/dev/null; then setsid \"$@\"; "
    "else perl -MPOSIX -e 'POSIX::setsid(); exec @ARGV' \"$@\"; fi; }; ";

/// Waits for a watched leader's end (process_host::watch's handler).
struct ending {
  std::mutex m;
  std::condition_variable cv;
  std::optional<child_exit> exit;
  bool wait_for(std::chrono::milliseconds d) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, d, [&] { return exit.has_value(); });
  }
};

/// One self-test job, started as the daemon starts a job: in a group of its
/// own (cgroup modes), through cq-shim, with its allocation marker.
struct test_job {
  std::string id; ///< its allocation id: the marker CQ_ALLOCATION_ID=<id>
  mem_group group;
  leader_id leader;
  std::shared_ptr<ending> end = std::make_shared<ending>(); ///< watch()'s handler writes it
  fs::path log;
  clock_type::time_point started;
};

/// Starts `/bin/sh -c script` capped at `cap` (none: no limit); nullopt and
/// `why` when it cannot.
std::optional<test_job> start_test_job(host_probes& probes, process_host& host,
                                       const memcap_setup& setup, std::optional<std::uint64_t> cap,
                                       const std::string& name, const std::string& script,
                                       const std::string& shim, const fs::path& scratch,
                                       std::string& why) {
  test_job job;
  auto id = job.id = probes.random_id();
  if (setup.mode != memcap_mode::watchdog) {
    auto g = probes.create_group(setup, id, cap);
    if (!g) {
      why = "cannot create a memory group: " + g.error().message;
      return std::nullopt;
    }
    job.group = *g;
  }
  launch_request req;
  req.argv = {"/bin/sh", "-c", script};
  req.cwd = "/";
  req.env = {{"PATH", std::string(default_path)}, {"CQ_ALLOCATION_ID", id}, {"CQ_DOCTOR", "1"}};
  req.log_path = job.log = scratch / (name + ".log");
  req.shim = shim;
  req.status_path = scratch / (name + ".status");
  job.started = clock_type::now();
  auto leader = host.launch(req, job.group);
  if (!leader) {
    why = "cannot start the test job: " + leader.error().message;
    if (!job.group.dir.empty())
      probes.remove_group(job.group);
    return std::nullopt;
  }
  job.leader = *leader;
  host.watch(leader->pid, [end = job.end](child_exit e) {
    std::lock_guard lock(end->m);
    end->exit = e;
    end->cv.notify_all();
  });
  return job;
}

/// Removes the job's group once the kernel lets it go (its last process reaped).
void remove_test_group(host_probes& probes, const test_job& job) {
  if (job.group.dir.empty())
    return;
  while (!probes.remove_group(job.group) && clock_type::now() - job.started < 3 * test_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

/// Self-test 1: a job whose memory grows past a 32 MiB cap is killed, by
/// the kernel (cgroup modes) or by sampling (watchdog mode).
finding oom_self_test(host_probes& probes, process_host& host, const memcap_setup& setup,
                      std::int64_t sample_ms, const std::string& shim, const fs::path& scratch) {
  finding f{"self_test_oom", "", false, ""};
  bool kernel = setup.mode != memcap_mode::watchdog;
  // A string that doubles up to 256 MiB (a few ms to pass 32 MiB); bounded,
  // so that a machine whose caps do not act is not run out of memory.
  auto job = start_test_job(probes, host, setup, test_cap_bytes, "oom",
                            "exec awk 'BEGIN { s = \"x\"; while (length(s) < 268435456) s = s s }'",
                            shim, scratch, f.value);
  if (!job) {
    f.advice = "run cq-node doctor as root, where the node runs";
    return f;
  }
  auto pid = job->leader.pid;
  std::uint64_t seen_peak = 0;
  bool done = false;
  while (!done && clock_type::now() - job->started < test_deadline) {
    if (!kernel) {
      // The watchdog's rule: the job's whole process tree against its cap.
      auto rss = host.tree_rss({pid});
      seen_peak = std::max(seen_peak, rss.empty() ? 0 : rss[0]);
      if (!rss.empty() && rss[0] > test_cap_bytes)
        host.kill_tree(pid);
    }
    done = job->end->wait_for(std::chrono::milliseconds(kernel ? 100 : sample_ms));
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - job->started);
  if (!done) {
    host.kill_tree(pid);
    job->end->wait_for(test_deadline);
    f.value = fmt::format("a job over a {} MiB cap still ran after {} s", test_cap_bytes >> 20,
                          test_deadline.count());
    f.advice = "memory caps are not enforced here: check the cgroup memory controller";
  } else if (kernel) {
    auto kills = probes.oom_kills(job->group).value_or(0);
    f.ok = kills > 0;
    f.value = f.ok ? fmt::format("a job over a {} MiB cap was killed by the kernel (oom) in "
                                 "{} ms",
                                 test_cap_bytes >> 20, ms.count())
                   : fmt::format("the test job ended in {} ms without an OOM kill in its group",
                                 ms.count());
    if (!f.ok)
      f.advice = "the memory group's limit did not act: check memory.limit_in_bytes / "
                 "memory.max support";
  } else {
    f.ok = seen_peak > test_cap_bytes;
    f.value = fmt::format("a job over a {} MiB cap was killed by the watchdog at {} MiB in {} ms "
                          "(sampled: it can overshoot between samples)",
                          test_cap_bytes >> 20, seen_peak >> 20, ms.count());
  }
  remove_test_group(probes, *job);
  return f;
}

/// Self-test 2: a job's child that starts a session of its own (setsid) is
/// found after the job's group is killed, and killed too.
finding cleanup_self_test(host_probes& probes, process_host& host, const memcap_setup& setup,
                          const std::string& shim, const fs::path& scratch) {
  finding f{"self_test_cleanup", "", false, ""};
  // "escaped" is printed from inside the new session, so the group kill
  // below cannot reach it.
  auto job = start_test_job(probes, host, setup, std::nullopt, "cleanup",
                            std::string(new_session_sh) +
                                "new_session sh -c 'echo escaped; exec sleep 300' </dev/null & "
                                "exec sleep 300",
                            shim, scratch, f.value);
  if (!job)
    return f;
  auto& group = job->group;
  while (read_text(job->log).find("escaped") == std::string::npos &&
         clock_type::now() - job->started < test_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  host.kill_group(job->leader.pid); // what a stop does first: the escaped child survives it
  job->end->wait_for(test_deadline);
  std::size_t found = 0;
  std::size_t scans = 0;
  for (;;) {
    auto r = host.cleanup_scan({job->id, job->leader, true, group});
    ++scans;
    found += r.count;
    if (r.count == 0 && found > 0)
      break;
    if (clock_type::now() - job->started > 2 * test_deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - job->started);
  // The group removes only once no process is left in it (rmdir of a cgroup
  // with members fails); watchdog mode has no group.
  bool empty = group.dir.empty() || static_cast<bool>(probes.remove_group(group));
  f.ok = found > 0 && empty;
  f.value = f.ok ? fmt::format("a child that left its session was found and killed ({} "
                               "process(es), {} scans, {} ms)",
                               found, scans, ms.count())
                 : fmt::format("a child that left its session was {}",
                               found ? "found but its group is not empty" : "not found");
  if (!f.ok)
    f.advice = "cleanup cannot see escaped processes: run cq-node as root (it reads other "
               "processes' environments)";
  remove_test_group(probes, *job);
  return f;
}

/// `label` in a column of 20, `text` wrapped at 80 columns beside it.
void print_wrapped(const std::string& label, const std::string& text) {
  constexpr std::size_t indent = 20, width = 80;
  std::string line = fmt::format("  {:<{}}", label, indent - 2);
  std::size_t col = line.size();
  std::istringstream words(text);
  std::string w;
  bool first = true;
  while (words >> w) {
    // A word longer than the column (a deep cgroup path) is cut where it must be.
    while (col + (first ? 0 : 1) + w.size() > width && w.size() > width - indent) {
      auto room = width - col - (first ? 0 : 1);
      if (room > 0 && room < width) {
        line += (first ? "" : " ") + w.substr(0, room);
        w = w.substr(room);
      }
      fmt::print("{}\n", line);
      line = std::string(indent, ' ');
      col = indent;
      first = true;
    }
    if (!first && col + 1 + w.size() > width) {
      fmt::print("{}\n", line);
      line = std::string(indent, ' ');
      col = indent;
      first = true;
    }
    if (!first)
      line += ' ', ++col;
    line += w;
    col += w.size();
    first = false;
  }
  fmt::print("{}\n", line);
}

} // namespace

int run_doctor(const doctor_options& o) {
  std::vector<finding> out;
  auto toml = o.state_dir / "node.toml";
  std::optional<node_config> cfg;
  if (auto c = load_node_config(toml))
    cfg = *c;
  memory_config mem = cfg ? cfg->memory : memory_config{};
  gpu_config gcfg;
  if (auto g = load_gpu_config(toml))
    gcfg = *g;
  bool root = ::geteuid() == 0;

  bool posix = o.platform == platform_kind::posix;
  out.push_back({"platform",
                 posix
                     ? fmt::format("posix (no cgroups, no pidfds; {} primitives)", platform::name())
                     : std::string("linux (cgroups, pidfds, /proc)"),
                 true, ""});
  auto cgv = cgroup_version();
  if (posix)
    out.push_back(
        {"cgroups", cgv == "none" ? "none" : cgv + ", not used by the posix platform", true, ""});
  else
    out.push_back({"cgroups", cgv, cgv != "none",
                   cgv == "none" ? "no cgroup file system: memory "
                                   "caps fall back to a watchdog"
                                 : ""});
  auto probes = make_host_probes(o.platform);
  auto setup = probes->detect_memcap(mem);
  memcap_setup ms;
  if (!setup) {
    out.push_back({"memory_caps", "unusable: " + setup.error().message, false,
                   "fix [memory] in node.toml, or remove it (mode auto)"});
  } else {
    ms = *setup;
    ms.owner = "doctor"; // its groups are cq-doctor-<id>: never a daemon's
    bool kernel = ms.mode != memcap_mode::watchdog;
    out.push_back(
        {"memory_caps",
         kernel
             ? fmt::format("kernel-enforced ({} under {})", to_string(ms.mode), ms.parent.string())
             : fmt::format("watchdog (sampled every {} ms: a job can overshoot its cap "
                           "between samples){}",
                           mem.sample_ms, ms.note.empty() ? "" : "; " + ms.note),
         true,
         kernel  ? ""
         : posix ? (cgv == "none" ? "" : "for kernel-enforced caps run cq-node --platform linux")
                 : "for kernel-enforced caps run cq-node as root where the memory "
                   "controller is available (cgroup v1, or v2 with Delegate=yes)"});
    if (ms.mode == memcap_mode::cgroup_v2) {
      auto ctl = read_text(ms.parent / "cgroup.subtree_control");
      bool delegated =
          ::access(ms.parent.c_str(), W_OK) == 0 && ctl.find("memory") != std::string::npos;
      out.push_back({"delegation",
                     delegated ? fmt::format("{} is ours, memory enabled for its children",
                                             ms.parent.string())
                               : fmt::format("{} is not delegated", ms.parent.string()),
                     delegated,
                     delegated ? ""
                               : "run cq-node under cq-node.service "
                                 "(Delegate=yes)"});
    } else {
      out.push_back(
          {"delegation",
           ms.mode == memcap_mode::cgroup_v1 ? "not needed (cgroup v1)" : "not used (watchdog)",
           true, ""});
    }
  }
  probes->platform_gpu_defaults(gcfg);
  auto gpu = probes->gpu(gcfg);
  // Lanes registered in node.toml (or by the platform: a Mac's gpu0) are
  // the lanes; only without them does the daemon ask nvidia-smi.
  auto lanes = gcfg.lanes.empty() ? gpu->detect_lanes()
                                  : bus::result<std::vector<bus::lane_info>>(gcfg.lanes);
  if (lanes && !lanes->empty()) {
    std::string names;
    for (auto& l : *lanes)
      names +=
          fmt::format("{}{} ({} MiB)", names.empty() ? "" : ", ", l.name, l.vram_total_bytes >> 20);
    auto driver = gcfg.telemetry ? driver_version(gcfg.nvidia_smi) : std::nullopt;
    out.push_back(
        {"gpus",
         fmt::format("{} lane(s): {}{}", lanes->size(), names, driver ? "; driver " + *driver : ""),
         true, ""});
  } else {
    out.push_back(
        {"gpus",
         fmt::format("none ({}): CPU jobs only", lanes ? "no lanes" : lanes.error().message), true,
         ""});
  }
  if (gcfg.kernel_log.empty()) {
    out.push_back({"kernel_log", "not followed ([gpu] kernel_log = \"\")", true,
                   "GPU faults (Xid) will not latch"});
  } else if (auto k = gpu->open_kernel_log(); !k) {
    out.push_back({"kernel_log", "not readable: " + k.error().message, !(lanes && !lanes->empty()),
                   "GPU faults (Xid) will not latch: run cq-node as root"});
  } else {
    out.push_back({"kernel_log", gcfg.kernel_log + " readable: GPU faults (Xid) latch", true, ""});
  }
  if (gcfg.lock_paths.empty()) {
    out.push_back({"gpu_locks", "none configured", true,
                   lanes && !lanes->empty() ? "to share GPUs with programs outside cq, set [gpu] "
                                              "lock_paths (docs/operations.md)"
                                            : ""});
  } else {
    std::string bad;
    for (auto& p : gcfg.lock_paths)
      if (::access(fs::path(p).parent_path().c_str(), W_OK) != 0)
        bad += (bad.empty() ? "" : ", ") + p;
    out.push_back({"gpu_locks",
                   bad.empty()
                       ? fmt::format("{} path(s), their folders writable", gcfg.lock_paths.size())
                       : "cannot create: " + bad,
                   bad.empty(), bad.empty() ? "" : "create the lock paths' folders"});
  }
  auto shim = probes->find_shim();
  std::string missing_users;
  if (cfg)
    for (auto& [who, user] : cfg->run_as)
      if (!::getpwnam(user.c_str()))
        missing_users += (missing_users.empty() ? "" : ", ") + user;
  bool run_as_ok = !shim.empty() && (root || !cfg || cfg->run_as.empty()) && missing_users.empty();
  out.push_back({"run_as",
                 shim.empty() ? "cq-shim is missing beside cq-node"
                 : !missing_users.empty()
                     ? "[run_as] names users this machine lacks: " + missing_users
                 : root ? fmt::format("ready (root; cq-shim at {})", shim)
                        : "jobs run as this user (not root: no run-as, no memory groups)",
                 run_as_ok,
                 shim.empty()             ? "reinstall the package (cq-shim sits beside cq-node)"
                 : !missing_users.empty() ? "create those users, or fix [run_as] in node.toml"
                 : root                   ? ""
                                          : "run cq-node as root (cq-node.service does)"});
  std::error_code ec;
  out.push_back(
      {"state",
       cfg ? fmt::format("{}: joined as '{}' to {}", o.state_dir.string(), cfg->name, cfg->endpoint)
           : fmt::format("{}: not joined yet", o.state_dir.string()),
       true, cfg ? "" : "cq-node install CODE NAME (CODE from cq node invite NAME)"});

  if (o.self_tests && setup) {
    auto scratch = fs::temp_directory_path() / ("cq-doctor-" + probes->random_id().substr(0, 12));
    fs::create_directories(scratch, ec);
    auto host = make_process_host(o.platform);
    out.push_back(
        oom_self_test(*probes, *host, ms, static_cast<std::int64_t>(mem.sample_ms), shim, scratch));
    out.push_back(cleanup_self_test(*probes, *host, ms, shim, scratch));
    host->close();
    fs::remove_all(scratch, ec);
  }

  bool all_ok = std::all_of(out.begin(), out.end(), [](auto& f) { return f.ok; });
  if (o.json) {
    nlohmann::json j;
    j["ok"] = all_ok;
    j["platform"] = std::string(to_string(o.platform));
    j["memory_cap_mode"] = setup ? std::string(to_string(ms.mode)) : "unusable";
    j["cgroups"] = cgv;
    j["gpus"] = lanes ? lanes->size() : 0;
    for (auto& f : out)
      j["checks"].push_back(
          {{"check", f.check}, {"value", f.value}, {"ok", f.ok}, {"advice", f.advice}});
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("cq-node doctor: this machine as cq-node sees it\n\n");
    for (auto& f : out) {
      print_wrapped(f.check, (f.ok ? "" : "PROBLEM: ") + f.value);
      if (!f.advice.empty())
        print_wrapped("", "-> " + f.advice);
    }
    fmt::print("\n{}\n", all_ok ? "All checks passed." : "Some checks failed: see PROBLEM above.");
  }
  std::fflush(stdout); // before what install prints next, on stderr
  return all_ok ? 0 : 1;
}

} // namespace cq::node
