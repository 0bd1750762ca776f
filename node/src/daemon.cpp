// The node daemon's main loop.
//
// Why a single-threaded poll loop and no CAF here: the node daemon's work is
// I/O multiplexing over a handful of descriptors (one ZeroMQ socket to the
// coordinator, one pidfd per running child, a stop eventfd) plus a few timers
// (heartbeat, report resend, kill escalation). One `zmq::poll` over all of
// them serves that with no locks and no queues between threads:
//  - ZeroMQ sockets belong to one thread; with actors, a gateway thread and a
//    queue plus wake-up would be needed anyway (as in the coordinator).
//  - Children are reaped through pidfds polled in the same loop, which avoids
//    SIGCHLD (delivered to an arbitrary thread: the reason Boost's wait_for is
//    unreliable in threaded programs) and makes every signal we send race-free
//    against PID reuse (the leader is reaped only after its group is killed).
//  - The daemon must stay small (idle RSS target 15 MB): CAF's scheduler
//    threads, middleman and type registry cost more than this whole loop.
//  - Everything happens in a fixed order on one thread, so a bug reproduces.
// The price: a slow step (a launch, an fsync) delays the other events by its
// duration. Launches take milliseconds and reports are rare, so this is fine
// for a node. The peak-RSS sampler reads /proc/<pid>/stat of every process
// once per heartbeat interval, and only while allocations run: about 5 us per
// process (measured: 0.5 ms for 100 processes). Jobs with a RAM cap add a
// check every [memory] sample_ms (150 ms): one small file read per job in the
// cgroup modes, one /proc scan for all of them in watchdog mode. Cleanup scans
// (every [cleanup] poll_ms while an allocation is being cleaned up) also read
// the environment of each process started after the job's leader. If GPU telemetry or watchdog
// sampling ever becomes slow, it gets its own thread that hands results to this loop through an
// eventfd.

#include "cq/node/daemon.hpp"

#include "cq/bus/codec.hpp"
#include "cq/node/clock.hpp"
#include "cq/node/files.hpp"
#include "cq/node/gpu.hpp"
#include "cq/node/holds.hpp"
#include "cq/node/launcher.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/meminfo.hpp"
#include "cq/node/outbox.hpp"
#include "cq/node/procscan.hpp"
#include "node/policy/admission.hpp"
#include "node/policy/cuda.hpp"
#include "node/policy/exit_reason.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace cq::node {

namespace {

/// Messages handled per wake-up, so that a flood cannot starve the timers.
constexpr std::size_t max_messages_per_wake = 64;
/// Reports (re)sent per loop turn.
constexpr std::size_t max_reports_per_turn = 64;
/// Retry delay after a send that found no connection.
constexpr std::int64_t send_retry_ms = 100;
/// A request without a reply after this long is forgotten (its report is resent anyway).
constexpr std::int64_t pending_reply_ttl_ms = 30'000;
/// Longest grace period a stop order may ask for.
constexpr std::uint64_t max_grace_ms = 24ull * 3600 * 1000;
/// Longest poll timeout: timers are checked at least this often.
constexpr std::int64_t max_poll_ms = 1000;
/// How often an unauthenticated heartbeat is logged again while it persists.
constexpr std::int64_t auth_error_log_every_ms = 30'000;
/// After a job's timeout: SIGTERM to its group, then SIGKILL this much later.
constexpr std::int64_t timeout_kill_after_ms = 10'000;
/// Longest timeout honoured (larger ones are clamped; keeps deadlines far from overflow).
constexpr std::uint64_t max_timeout_ms = 100ull * 365 * 24 * 3600 * 1000;

/// A workload this node supervises (launched by this process, or re-adopted
/// after a restart) whose leader has not ended yet.
struct allocation {
  std::string id;                            ///< allocation id (valid id)
  std::string job;                           ///< job id (valid id)
  std::uint64_t attempt = 0;                 ///< attempt number from the start order
  pid_t pid = -1;                            ///< leader (cq-shim) pid == process group id
  int pidfd = -1;                            ///< owned; polled for the leader's exit
  std::uint64_t start_ticks = 0;             ///< leader's start time (/proc/<pid>/stat field 22)
  bool adopted = false;                      ///< re-adopted after a restart: not our child
  std::int64_t started_mono_ms = 0;          ///< for wall_ms
  bus::string_list lanes;                    ///< GPU lanes held
  std::optional<std::uint64_t> ram_cap;      ///< RAM cap in bytes
  mem_group group;                           ///< its memory cgroup (capped jobs, cgroup modes)
  bool oom = false;                          ///< the cap was hit (OOM kill or watchdog kill)
  std::uint64_t last_rss_bytes = 0;          ///< latest usage sample (heartbeat telemetry)
  bool stop_requested = false;               ///< a stop order arrived: the exit is "cancelled"
  bool yield_ordered = false;                ///< a yield order arrived: exit 6 is then a checkpoint
  std::optional<std::int64_t> kill_at_ms;    ///< when to SIGKILL the group (after a stop)
  std::optional<std::int64_t> timeout_at_ms; ///< when the hard wall-time limit stops it
  bool timed_out = false;                    ///< stopped by its timeout: the exit is "timeout"
  std::uint64_t peak_rss_bytes = 0;          ///< largest sampled RSS sum of the group
};

/// An allocation whose leader has ended: its exit is known, its processes are
/// being stopped; the exit is reported once cleanup ends (confirmed or hold).
struct cleanup_state {
  allocation a;                          ///< as it was when the leader ended
  std::optional<std::int64_t> exit_code; ///< the exit to report
  std::optional<std::int64_t> signal;
  bus::reason reason = bus::reason::none;
  std::uint64_t wall = 0;
  std::optional<std::uint64_t> peak;
  std::string detail;
  std::int64_t deadline_ms = 0;  ///< then whatever remains makes a hold
  std::int64_t next_scan_ms = 0; ///< next scan
  int empty_scans = 0;           ///< consecutive empty scans (2 = done)
  std::string remaining;         ///< what the last non-empty scan found (for the hold)
  /// Whether members of the process group count (not when the leader ended
  /// long ago, while cq-node was down: its pgid may be in use by now).
  bool by_group = true;
  bool lost = false;       ///< no exit status could be found
  std::string group_error; ///< why the last attempt to remove its cgroup failed
};

enum class request_kind { heartbeat, report };

/// A request sent to the coordinator whose reply has not arrived.
struct pending_request {
  request_kind kind = request_kind::heartbeat;
  std::uint64_t seq = 0;    ///< report seq (kind == report)
  std::int64_t sent_ms = 0; ///< for expiry
};

/// Errors after which a report is kept and re-sent rather than dropped.
/// (already_exists: another daemon speaks for this node right now; once it
/// stops heartbeating, this one takes over and its reports go through.)
bool is_retryable(errc code) {
  return code == errc::internal || code == errc::unavailable || code == errc::unauthenticated ||
         code == errc::already_exists;
}

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

/// What cq-shim wrote when the workload ended (see node/shim.cpp).
struct shim_status {
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::uint64_t maxrss_bytes = 0;
};

std::optional<shim_status> read_shim_status(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string kind;
  std::int64_t value = 0;
  std::uint64_t maxrss_kb = 0;
  if (!(in >> kind >> value >> maxrss_kb))
    return std::nullopt;
  shim_status st;
  if (kind == "exited")
    st.exit_code = value;
  else if (kind == "signaled")
    st.signal = value;
  else
    return std::nullopt;
  st.maxrss_bytes = maxrss_kb * 1024;
  return st;
}

/// cq-shim next to this executable (it is built and installed beside cq-node).
std::string find_shim() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return {};
  auto shim = self.parent_path() / "cq-shim";
  if (::access(shim.c_str(), X_OK) != 0)
    return {};
  return shim.string();
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A small JSON file of ours, or nullopt when it is missing or unreadable.
std::optional<nlohmann::json> read_json(const std::filesystem::path& p) {
  auto text = read_file_bounded(p, 1 << 20);
  if (!text)
    return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return std::nullopt;
  return j;
}

/// Pretty JSON; invalid UTF-8 (argv may hold any bytes) is replaced, never thrown on.
std::string to_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

} // namespace

struct node_daemon::impl {
  daemon_config cfg;                                 ///< as given
  std::filesystem::path alloc_root;                  ///< <state>/allocations
  std::filesystem::path jobs_root;                   ///< <state>/jobs
  zmq::context_t ctx{1};                             ///< one I/O thread
  zmq::socket_t sock{ctx, zmq::socket_type::dealer}; ///< to the coordinator
  std::optional<outbox> box;                         ///< set by setup()
  std::map<std::string, allocation> live;            ///< launched, not reaped; by allocation id
  std::map<std::string, cleanup_state> cleaning;     ///< leader ended, cleanup running
  memcap_setup memcap;                               ///< memory cap mode (detected at start)
  std::optional<hold_store> holds;                   ///< set by setup()
  std::optional<gpu_supervisor> gpu;                 ///< lanes, GPU lock, fault latch; setup()
  std::string shim;                                  ///< path of cq-shim ("" = launch directly)
  std::int64_t next_cap_check_ms = 0;                ///< next OOM-counter / watchdog sample
  std::unordered_map<std::uint64_t, pending_request> pending; ///< by request id
  std::uint64_t next_request_id = 1;                          ///< id of our next request
  std::int64_t next_heartbeat_ms = 0;                         ///< monotonic; 0 = right away
  std::int64_t next_purge_ms = 0;                             ///< next expiry scan of `pending`
  std::int64_t next_sample_ms = 0;   ///< next RSS sample of the live allocations
  std::vector<group_rss> sample_buf; ///< reused by sample_peaks()
  std::optional<bool> approved;      ///< last approval state the coordinator reported
  std::optional<bool> link_up;       ///< whether the last send found a connection
  std::int64_t auth_error_logged_ms = INT64_MIN / 2; ///< throttles the unauthenticated log
  std::int64_t refused_logged_ms = INT64_MIN / 2;    ///< throttles the second-daemon log
  int lock_fd = -1;                  ///< flock on <state>/node.lock, held for the daemon's life
  std::string daemon_id;             ///< <state>/daemon.id: this state dir's identity (heartbeats)
  std::int64_t next_leftover_ms = 0; ///< next retry of leftover cgroups
  /// The node's clock on the wire (heartbeat_req::beat): this daemon's start,
  /// and the number of the last heartbeat sent. Acknowledgements and reports
  /// carry it, so the coordinator never reconciles with an older heartbeat.
  std::int64_t boot_ms = wall_ms();
  std::uint64_t beat = 0;

  explicit impl(daemon_config c) : cfg(std::move(c)) {}

  // ---- setup ----------------------------------------------------------------

  /// Exit code of run() when setup() fails.
  int setup_rc = 1;

  /// SPEC section 10: one state dir, one daemon. The lock is held until the
  /// process ends (the kernel drops it even on kill -9).
  bool lock_state_dir() {
    auto path = cfg.state_dir / "node.lock";
    lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      spdlog::critical("cannot open {}: {}", path.string(), std::strerror(errno));
      return false;
    }
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      auto holder = read_file_bounded(path, 64).value_or("");
      spdlog::critical("another cq-node (pid {}) already runs on the state directory {}; one "
                       "state directory (one node identity) is one daemon",
                       trim(holder).empty() ? std::string("unknown") : std::string(trim(holder)),
                       cfg.state_dir.string());
      setup_rc = 5;
      return false;
    }
    auto pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(lock_fd, 0) != 0 || ::pwrite(lock_fd, pid.data(), pid.size(), 0) < 0)
      spdlog::warn("cannot write the pid into {}", path.string());
    return true;
  }

  /// The state dir's identity, created at its first start.
  bool load_daemon_id() {
    auto path = cfg.state_dir / "daemon.id";
    if (auto t = read_file_bounded(path, 256)) {
      auto id = std::string(trim(*t));
      if (!id.empty() && is_valid_id(id)) {
        daemon_id = id;
        return true;
      }
    }
    daemon_id = random_hex_id();
    if (auto st = write_file_atomic(path, daemon_id + "\n", 0600); !st) {
      spdlog::critical("{}", st.error().message);
      return false;
    }
    return true;
  }

  bool setup() {
    alloc_root = cfg.state_dir / "allocations";
    jobs_root = cfg.state_dir / "jobs";
    if (auto st = make_dirs(cfg.state_dir); !st) {
      spdlog::critical("{}", st.error().message);
      return false;
    }
    if (!lock_state_dir() || !load_daemon_id())
      return false;
    for (auto& dir : {cfg.state_dir, alloc_root, jobs_root}) {
      if (auto st = make_dirs(dir); !st) {
        spdlog::critical("{}", st.error().message);
        return false;
      }
    }
    auto ob = outbox::open(cfg.state_dir / "outbox");
    if (!ob) {
      spdlog::critical("{}", ob.error().message);
      return false;
    }
    box.emplace(std::move(*ob));
    holds.emplace(cfg.state_dir / "holds.json");
    for (auto& h : holds->all())
      spdlog::warn("HOLD {} on {} (allocation {}): {}; release it after checking the machine", h.id,
                   h.lane.empty() ? "the node" : "lane " + h.lane, h.allocation, h.reason);
    auto mc = detect_memcap(cfg.identity.memory, read_text("/proc/self/cgroup"));
    if (!mc) {
      spdlog::critical("{}", mc.error().message);
      return false;
    }
    memcap = *mc;
    spdlog::info("memory caps: {}{}{}", to_string(memcap.mode),
                 memcap.parent.empty() ? "" : " under " + memcap.parent.string(),
                 memcap.note.empty() ? "" : " (" + memcap.note + ")");
    shim = find_shim();
    if (shim.empty())
      spdlog::warn("cq-shim not found beside cq-node: workloads are launched directly, and the "
                   "exit status of a job that ends while cq-node is down is lost");
    try {
      sock.set(zmq::sockopt::linger, 0);
      sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(bus::limits::frame_bytes));
      // Queue nothing while disconnected: a send then fails at once and we retry
      // ourselves, instead of a burst of stale heartbeats on reconnect.
      sock.set(zmq::sockopt::immediate, true);
      // ZMTP heartbeats notice a silently dead connection (a cut cable) and reconnect.
      sock.set(zmq::sockopt::heartbeat_ivl, 1000);
      sock.set(zmq::sockopt::heartbeat_timeout, 5000);
      sock.connect(cfg.identity.endpoint);
    } catch (const zmq::error_t& e) {
      spdlog::critical("cannot connect to {}: {}", cfg.identity.endpoint, e.what());
      return false;
    }
    auto gpu_cfg = load_gpu_config(cfg.state_dir / "node.toml");
    if (!gpu_cfg) {
      spdlog::critical("{}", gpu_cfg.error().message);
      return false;
    }
    gpu.emplace(std::move(*gpu_cfg), cfg.state_dir);
    gpu->start(mono_ms());
    readopt();
    spdlog::info("cq-node '{}' running: coordinator {}, state {}, {} pending report(s)",
                 cfg.identity.name, cfg.identity.endpoint, cfg.state_dir.string(), box->size());
    return true;
  }

  // Restart safety. Every allocation dir with alloc.json and no exit.json:
  //  - whose exit report is still in the outbox ended before the restart: its
  //    exit.json is written from the report (a crash came between the two);
  //  - is re-adopted when its leader is still the process that was launched
  //    (same pid and start time; a record written before the launch has no pid:
  //    the leader is found by its marker), keeping its stop request, kill
  //    deadline and yield order (control/);
  //  - else ended while cq-node was down and is finished from the shim's
  //    status file (or as lost when there is none).
  void readopt() {
    std::error_code ec;
    auto now_mono = mono_ms();
    auto now_wall = wall_ms();
    for (std::filesystem::directory_iterator it(alloc_root, ec), end; !ec && it != end;
         it.increment(ec)) {
      auto dir = it->path();
      std::error_code e2;
      auto name = dir.filename().string();
      if (std::filesystem::exists(dir / "exit.json", e2)) {
        // Recorded, but neither acknowledged nor queued (a crash between the
        // two files): report it from exit.json.
        if (!std::filesystem::exists(dir / "reported", e2) && !box->find(name, "exited") &&
            is_valid_id(name))
          requeue_exit(dir);
        continue;
      }
      if (!std::filesystem::exists(dir / "alloc.json", e2))
        continue;
      if (auto* r = box->find(name, "exited")) {
        spdlog::info("allocation {}: its exit was queued but exit.json is missing; writing it",
                     name);
        write_exit_record(*r, 0);
        continue;
      }
      nlohmann::json rec;
      allocation a;
      std::int64_t started_wall = 0;
      try {
        rec = nlohmann::json::parse(read_text(dir / "alloc.json"));
        a.id = rec.at("allocation").get<std::string>();
        a.job = rec.at("job").get<std::string>();
        a.attempt = rec.at("attempt").get<std::uint64_t>();
        a.pid = rec.value("pid", pid_t{0});
        started_wall = rec.at("started_ms").get<std::int64_t>();
        a.start_ticks = rec.value("start_ticks", std::uint64_t{0});
        a.lanes = rec.value("lanes", bus::string_list{});
        if (rec.contains("ram_bytes") && !rec["ram_bytes"].is_null())
          a.ram_cap = rec["ram_bytes"].get<std::uint64_t>();
        auto mode = rec.value("mem_mode", std::string("watchdog"));
        a.group.mode = mode == "cgroup_v1"   ? memcap_mode::cgroup_v1
                       : mode == "cgroup_v2" ? memcap_mode::cgroup_v2
                                             : memcap_mode::watchdog;
        a.group.dir = rec.value("cgroup", std::string());
        if (a.group.dir.empty())
          a.group.mode = memcap_mode::watchdog;
        if (rec.contains("timeout_ms") && !rec["timeout_ms"].is_null()) {
          auto t = std::min<std::uint64_t>(rec["timeout_ms"].get<std::uint64_t>(), max_timeout_ms);
          if (t > 0)
            a.timeout_at_ms = static_cast<std::int64_t>(t); // made absolute below
        }
      } catch (const std::exception& e) {
        spdlog::error("{}: unreadable ({}); this allocation is not re-adopted",
                      (dir / "alloc.json").string(), e.what());
        continue;
      }
      if (!is_valid_id(a.id) || !is_valid_id(a.job) || dir.filename() != a.id) {
        spdlog::error("{}: ids do not match its directory; ignored", (dir / "alloc.json").string());
        continue;
      }
      a.adopted = true;
      a.started_mono_ms = now_mono - std::max<std::int64_t>(0, now_wall - started_wall);
      if (a.timeout_at_ms)
        a.timeout_at_ms = a.started_mono_ms + *a.timeout_at_ms;
      // A stop or yield the coordinator ordered before the restart still holds.
      if (auto stop = read_json(dir / "control" / "stop")) {
        a.stop_requested = true;
        auto kill_at_wall = stop->value("kill_at_ms", now_wall);
        a.kill_at_ms = now_mono + std::max<std::int64_t>(0, kill_at_wall - now_wall);
      }
      a.yield_ordered = std::filesystem::exists(dir / "control" / "yield-ordered", e2);
      if (a.pid <= 0) {
        // Recorded before its launch: the leader, if it started, carries the marker.
        auto needle = "CQ_ALLOCATION_ID=" + a.id;
        for (auto& p : scan_processes())
          if (p.pid == p.pgrp && p.state != 'Z' && environ_has(p.pid, needle) == marker::present) {
            a.pid = p.pid;
            a.start_ticks = p.start_ticks;
          }
      }
      auto proc = a.pid > 0 ? read_process(a.pid) : std::nullopt;
      bool same = proc && a.start_ticks != 0 && proc->start_ticks == a.start_ticks &&
                  proc->state != 'Z' && proc->state != 'X';
      if (same) {
        a.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, a.pid, 0));
        if (a.pidfd >= 0) {
          spdlog::info("allocation {} (job {}): re-adopted running pid {}{}", a.id, a.job, a.pid,
                       a.stop_requested ? " (stopping)" : "");
          if (!a.lanes.empty()) {
            std::optional<std::uint64_t> vram_cap;
            if (rec.contains("vram_bytes") && rec["vram_bytes"].is_number_unsigned())
              vram_cap = rec["vram_bytes"].get<std::uint64_t>();
            gpu->adopt(a.id, a.pid, a.lanes, vram_cap);
          }
          live.emplace(a.id, a);
          continue;
        }
      }
      spdlog::info("allocation {} (job {}): ended while cq-node was down", a.id, a.job);
      end_allocation(a, std::nullopt, 0, false);
    }
  }

  /// Queues the exited report of an exit.json again (see readopt).
  void requeue_exit(const std::filesystem::path& dir) {
    auto rec = read_json(dir / "exit.json");
    bus::report_req r;
    r.kind = "exited";
    r.allocation = dir.filename().string();
    try {
      if (!rec)
        throw std::runtime_error("not a JSON object");
      r.job = rec->value("job", std::string());
      if (auto& v = (*rec)["exit_code"]; v.is_number_integer())
        r.exit_code = v.get<std::int64_t>();
      if (auto& v = (*rec)["signal"]; v.is_number_integer())
        r.signal = v.get<std::int64_t>();
      if (!bus::parse(rec->value("reason", std::string()), r.reason))
        throw std::runtime_error("reason: not a known reason");
      r.wall_ms = rec->value("wall_ms", std::uint64_t{0});
      if (auto& v = (*rec)["peak_ram_bytes"]; v.is_number_unsigned())
        r.peak_ram_bytes = v.get<std::uint64_t>();
      if (auto& v = (*rec)["peak_vram_bytes"]; v.is_number_unsigned())
        r.peak_vram_bytes = v.get<std::uint64_t>();
      if (rec->contains("detail") && (*rec)["detail"].is_string())
        r.detail = (*rec)["detail"].get<std::string>();
    } catch (const std::exception& e) {
      r.reason = bus::reason::lost;
      r.detail = fmt::format("exit.json is unreadable ({})", e.what());
    }
    spdlog::info("allocation {}: its exit was recorded but never reported; reporting it",
                 r.allocation);
    queue_report(std::move(r));
  }

  // ---- sending ----------------------------------------------------------------

  /// Sends one frame without blocking; false if there is no connection.
  bool send(const std::string& bytes) {
    bool ok = false;
    try {
      ok = sock.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t& e) {
      spdlog::warn("send failed: {}", e.what());
    }
    if (ok && link_up != true)
      spdlog::info("connected to the coordinator at {}", cfg.identity.endpoint);
    if (!ok && link_up == true)
      spdlog::warn("coordinator at {} unreachable; retrying", cfg.identity.endpoint);
    link_up = ok;
    return ok;
  }

  template <class Req>
  bool send_request(const Req& req, request_kind kind, std::uint64_t seq, std::int64_t now) {
    auto id = next_request_id++;
    if (!send(bus::encode_request(id, cfg.identity.token, req)))
      return false;
    pending[id] = pending_request{kind, seq, now};
    return true;
  }

  void send_heartbeat(std::int64_t now) {
    bus::heartbeat_req hb;
    if (auto m = sample_memory()) {
      hb.mem_total_bytes = m->total_bytes;
      hb.mem_available_bytes = m->available_bytes;
    }
    hb.cpus = cfg.identity.capacity.cpus.value_or(cpu_count());
    auto& pol = cfg.identity.policy;
    hb.ram_reserve_bytes = pol.ram_reserve_bytes;
    hb.ram_floor_bytes = pol.ram_floor_bytes;
    hb.vram_cap_bytes = pol.vram_cap_bytes;
    hb.allocations.reserve(live.size() + cleaning.size());
    std::vector<bus::alloc_usage> usage;
    for (auto& [id, a] : live) {
      hb.allocations.push_back(id);
      usage.push_back({id, a.last_rss_bytes, 0});
    }
    for (auto& [id, c] : cleaning)
      hb.allocations.push_back(id);
    // An allocation is held until the coordinator acknowledged its exit: a
    // heartbeat that stops listing one tells the coordinator it is lost.
    for (auto& id : box->allocations())
      if (!live.count(id) && !cleaning.count(id))
        hb.allocations.push_back(id);
    hb.usage = std::move(usage);
    hb.daemon = daemon_id;
    hb.boot_ms = boot_ms;
    hb.beat = ++beat;
    hb.mem_cap_mode = std::string(to_string(memcap.mode));
    hb.holds = holds->all();
    gpu->fill_heartbeat(hb);
    bool ok = send_request(hb, request_kind::heartbeat, 0, now);
    next_heartbeat_ms = now + (ok ? cfg.heartbeat_ms : std::min(send_retry_ms, cfg.heartbeat_ms));
  }

  /// MemTotal and MemAvailable as this node reports them: measured, with the
  /// [capacity] overrides applied (/proc is not read when both are overridden).
  std::optional<mem_info> sample_memory() const {
    auto& cap = cfg.identity.capacity;
    std::optional<mem_info> measured;
    if (!cap.mem_total_bytes || !cap.mem_available_bytes)
      measured = read_meminfo();
    return apply_capacity(measured, cap.mem_total_bytes, cap.mem_available_bytes);
  }

  /// One /proc scan for all live allocations: updates each one's peak RSS.
  void sample_peaks() {
    sample_buf.clear();
    for (auto& [id, a] : live)
      sample_buf.push_back({a.pid, 0});
    sample_group_rss(sample_buf);
    std::size_t i = 0;
    for (auto& [id, a] : live) {
      auto rss = sample_buf[i++].rss_bytes;
      a.peak_rss_bytes = std::max(a.peak_rss_bytes, rss);
      if (a.group.mode == memcap_mode::watchdog)
        a.last_rss_bytes = rss;
      else if (auto u = current_usage(a.group))
        a.last_rss_bytes = *u;
    }
  }

  /// Every sample_ms, for allocations with a RAM cap: a cgroup's OOM-kill
  /// counter (v1 kills only the largest process: the rest of the group is
  /// killed here, so the job ends "oom" within one period), or in watchdog mode
  /// the RSS of the process tree (one /proc scan for all), killed over the cap.
  void check_caps() {
    std::optional<std::vector<proc_entry>> procs;
    for (auto& [id, a] : live) {
      if (!a.ram_cap || a.oom)
        continue;
      if (a.group.mode != memcap_mode::watchdog) {
        auto kills = oom_kills(a.group);
        if (kills && *kills > 0) {
          spdlog::warn("allocation {}: memory cap of {} bytes hit (cgroup OOM kill); killing "
                       "process group {}",
                       id, *a.ram_cap, a.pid);
          a.oom = true;
          ::killpg(a.pid, SIGKILL);
        }
        continue;
      }
      if (!procs)
        procs = scan_processes();
      std::vector<const proc_entry*> members;
      auto rss = tree_rss_bytes(*procs, a.pid, &members);
      a.last_rss_bytes = rss;
      a.peak_rss_bytes = std::max(a.peak_rss_bytes, rss);
      if (rss > *a.ram_cap) {
        spdlog::warn("allocation {}: RSS {} bytes is over its cap of {} bytes (watchdog); "
                     "killing it",
                     id, rss, *a.ram_cap);
        a.oom = true;
        ::killpg(a.pid, SIGKILL);
        for (auto* p : members)
          if (p->pgrp != a.pid)
            signal_same_process(p->pid, p->start_ticks, SIGKILL);
      }
    }
  }

  void send_due_reports(std::int64_t now) {
    for (auto* r : box->due(now, max_reports_per_turn)) {
      auto seq = r->seq;
      auto req = *r;
      req.boot_ms = boot_ms;
      req.beat = beat;
      bool ok = send_request(req, request_kind::report, seq, now);
      box->schedule(seq, now + (ok ? cfg.report_resend_ms : send_retry_ms));
      if (!ok)
        break; // no connection: the others would fail too
    }
  }

  /// Persists `r` in the outbox; the loop sends it on its next turn.
  void queue_report(bus::report_req r) {
    r.at_ms = wall_ms();
    if (auto st = box->add(r, mono_ms()); !st)
      spdlog::error("report {} for allocation {} is not persisted: {}", r.seq, r.allocation,
                    st.error().message);
  }

  // ---- timers -----------------------------------------------------------------

  void on_timers(std::int64_t now) {
    apply_gpu_stops(now);
    if (now >= next_heartbeat_ms)
      send_heartbeat(now);
    send_due_reports(now);
    if (!live.empty() && now >= next_sample_ms) {
      sample_peaks();
      next_sample_ms = now + cfg.heartbeat_ms;
    }
    if (needs_cap_checks() && now >= next_cap_check_ms) {
      check_caps();
      next_cap_check_ms = now + static_cast<std::int64_t>(cfg.identity.memory.sample_ms);
    }
    for (auto it = cleaning.begin(); it != cleaning.end();) {
      auto cur = it++;
      if (cur->second.next_scan_ms <= now)
        cleanup_step(cur->first, now);
    }
    for (auto& [id, a] : live) {
      if (a.timeout_at_ms && *a.timeout_at_ms <= now) {
        a.timeout_at_ms.reset();
        if (!a.stop_requested) {
          // A stop already in progress keeps its own reason and deadline.
          spdlog::warn("allocation {}: timeout reached after {} ms; stopping (SIGTERM to group "
                       "{}, SIGKILL after {} ms)",
                       id, now - a.started_mono_ms, a.pid, timeout_kill_after_ms);
          a.timed_out = true;
          ::killpg(a.pid, SIGTERM);
          if (!a.kill_at_ms || now + timeout_kill_after_ms < *a.kill_at_ms)
            a.kill_at_ms = now + timeout_kill_after_ms;
        }
      }
      if (a.kill_at_ms && *a.kill_at_ms <= now) {
        spdlog::warn("allocation {}: grace period over, killing process group {}", id, a.pid);
        ::killpg(a.pid, SIGKILL);
        a.kill_at_ms.reset();
      }
    }
    if (now >= next_leftover_ms && !holds->leftover_cgroups().empty()) {
      // cgroups of released holds that could not be removed at the time.
      auto dirs = holds->leftover_cgroups();
      for (auto& dir : dirs)
        if (remove_leftover_group(dir)) {
          spdlog::info("leftover cgroup {} removed", dir);
          holds->remove_leftover(dir);
        }
      next_leftover_ms = now + std::max<std::int64_t>(cfg.heartbeat_ms, 1000);
    }
    if (now >= next_purge_ms) {
      std::erase_if(pending,
                    [&](auto& kv) { return kv.second.sent_ms + pending_reply_ttl_ms < now; });
      next_purge_ms = now + pending_reply_ttl_ms / 2;
    }
  }

  /// Kernel log, GPU detection and telemetry (gpu.hpp); stops what it asks to
  /// stop (a latched fault, a VRAM cap) like a timeout: SIGTERM to the group,
  /// SIGKILL 10 s later. A stop already in progress keeps its own reason.
  void apply_gpu_stops(std::int64_t now) {
    for (auto& s : gpu->tick(now, cfg.heartbeat_ms)) {
      auto it = live.find(s.allocation);
      if (it == live.end())
        continue;
      auto& a = it->second;
      if (a.stop_requested || a.timed_out) {
        gpu->stopped_elsewhere(a.id);
        continue;
      }
      spdlog::warn("allocation {}: {}; stopping ({}: SIGTERM to group {}, SIGKILL after {} ms)",
                   a.id, s.detail, s.reason, a.pid, timeout_kill_after_ms);
      a.stop_requested = true; // no later timeout or stop order replaces the reason
      ::killpg(a.pid, SIGTERM);
      if (!a.kill_at_ms || now + timeout_kill_after_ms < *a.kill_at_ms)
        a.kill_at_ms = now + timeout_kill_after_ms;
    }
  }

  bool needs_cap_checks() const {
    for (auto& [id, a] : live)
      if (a.ram_cap && !a.oom)
        return true;
    return false;
  }

  std::int64_t next_deadline() const {
    auto next = std::min({next_heartbeat_ms, box->next_due_ms(), next_purge_ms});
    if (!live.empty())
      next = std::min(next, next_sample_ms);
    if (needs_cap_checks())
      next = std::min(next, next_cap_check_ms);
    next = std::min(next, gpu->next_deadline());
    if (!holds->leftover_cgroups().empty())
      next = std::min(next, next_leftover_ms);
    for (auto& [id, c] : cleaning)
      next = std::min(next, c.next_scan_ms);
    for (auto& [id, a] : live) {
      if (a.kill_at_ms)
        next = std::min(next, *a.kill_at_ms);
      if (a.timeout_at_ms)
        next = std::min(next, *a.timeout_at_ms);
    }
    return next;
  }

  // ---- receiving --------------------------------------------------------------

  void receive() {
    for (std::size_t i = 0; i < max_messages_per_wake; ++i) {
      zmq::message_t msg;
      try {
        if (!sock.recv(msg, zmq::recv_flags::dontwait))
          return;
        if (msg.more()) {
          // The protocol is one frame per message: drop the whole multipart message.
          while (msg.more() && sock.recv(msg, zmq::recv_flags::dontwait)) {
          }
          spdlog::warn("dropped a multipart message from the coordinator");
          continue;
        }
      } catch (const zmq::error_t& e) {
        spdlog::warn("receive failed: {}", e.what());
        return;
      }
      handle_frame(msg.to_string_view());
    }
  }

  void handle_frame(std::string_view bytes) {
    std::uint64_t seen = 0;
    auto f = bus::decode_frame(bytes, seen);
    if (!f) {
      // Without a decodable envelope we cannot tell an order from a reply, so an
      // error reply could confuse the coordinator: log and drop.
      spdlog::warn("dropped a malformed frame from the coordinator (id {}): {}", seen,
                   f.error().message);
      return;
    }
    if (f->is_reply)
      handle_reply(*f);
    else
      handle_order(*f);
  }

  void handle_reply(const bus::frame& f) {
    auto it = pending.find(f.id);
    if (it == pending.end()) {
      spdlog::debug("reply {} matches no pending request (late or duplicate)", f.id);
      return;
    }
    auto req = it->second;
    pending.erase(it);
    if (req.kind == request_kind::heartbeat)
      on_heartbeat_reply(f);
    else
      on_report_reply(f, req.seq);
  }

  void on_heartbeat_reply(const bus::frame& f) {
    auto now = mono_ms();
    if (!f.ok) {
      if (f.error.code == errc::unauthenticated) {
        if (now - auth_error_logged_ms >= auth_error_log_every_ms) {
          spdlog::error("THE COORDINATOR REJECTS THIS NODE'S TOKEN (unauthenticated: {}). "
                        "Re-join with `cq-node --join ENDPOINT CODE NAME`; retrying meanwhile",
                        f.error.message);
          auth_error_logged_ms = now;
        }
      } else if (f.error.code == errc::already_exists) {
        if (now - refused_logged_ms >= auth_error_log_every_ms) {
          spdlog::error("ANOTHER cq-node SPEAKS FOR NODE '{}' ({}); this daemon gets no work "
                        "while it does (a copied node.toml? give each daemon its own invite)",
                        cfg.identity.name, f.error.message);
          refused_logged_ms = now;
        }
      } else {
        spdlog::warn("heartbeat refused: {}: {}", to_string(f.error.code), f.error.message);
      }
      return;
    }
    auth_error_logged_ms = INT64_MIN / 2;
    refused_logged_ms = INT64_MIN / 2;
    auto rep = bus::decode_body<bus::heartbeat_rep>(f);
    if (!rep) {
      spdlog::warn("bad heartbeat reply: {}", rep.error().message);
      return;
    }
    if (approved != rep->approved) {
      if (rep->approved)
        spdlog::info("node '{}' is approved", cfg.identity.name);
      else
        spdlog::warn("node '{}' is pending approval (cq node approve {})", cfg.identity.name,
                     cfg.identity.name);
      approved = rep->approved;
    }
  }

  void on_report_reply(const bus::frame& f, std::uint64_t seq) {
    if (!f.ok) {
      if (is_retryable(f.error.code)) {
        spdlog::warn("report {} not accepted yet ({}: {}); will re-send", seq,
                     to_string(f.error.code), f.error.message);
        return;
      }
      spdlog::error("the coordinator refused report {} ({}: {}); dropping it", seq,
                    to_string(f.error.code), f.error.message);
      box->remove(seq);
      return;
    }
    auto rep = bus::decode_body<bus::report_rep>(f);
    if (!rep || rep->seq != seq)
      spdlog::warn("report {} acknowledged with an unexpected body", seq);
    // An acknowledged exit is marked (not synced: losing the mark only
    // re-sends an exit the coordinator acknowledges again as already applied).
    if (auto* r = box->get(seq); r && r->kind == "exited" && is_valid_id(r->allocation))
      if (auto st = append_to_file(alloc_root / r->allocation / "reported", ""); !st)
        spdlog::warn("{}", st.error().message);
    if (box->remove(seq))
      spdlog::debug("report {} acknowledged", seq);
  }

  // ---- orders -----------------------------------------------------------------

  /// The acknowledgement of order `id`, stamped with the node's clock.
  std::string ack(std::uint64_t id) const {
    return bus::encode_reply(id, bus::order_ack{boot_ms, beat});
  }

  void handle_order(const bus::frame& f) {
    auto order = bus::decode_node_order(f);
    std::string reply;
    if (!order) {
      spdlog::warn("refused order {} ({}): {}", f.id, f.op, order.error().message);
      reply = bus::encode_error(f.id, order.error().code, order.error().message);
    } else {
      try {
        reply = std::visit([&](const auto& o) { return on_order(f.id, o); }, *order);
      } catch (const std::exception& e) {
        // Nothing below should throw; if something does, the daemon survives.
        spdlog::error("order {} ({}) failed: {}", f.id, f.op, e.what());
        reply = bus::encode_error(f.id, errc::internal, e.what());
      }
    }
    send(reply);
  }

  std::string on_order(std::uint64_t id, const bus::start_order& o) {
    if (!is_valid_id(o.allocation))
      return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
    if (!is_valid_id(o.job))
      return bus::encode_error(id, errc::invalid_argument, "job: not a valid id");
    std::error_code ec;
    auto dir = alloc_root / o.allocation;
    if (live.count(o.allocation) || std::filesystem::exists(dir, ec)) {
      spdlog::debug("start {}: already known, ignored", o.allocation);
      return ack(id);
    }
    if (auto st = make_dirs(dir); !st) {
      spdlog::error("start {}: {}", o.allocation, st.error().message);
      return bus::encode_error(id, errc::internal, st.error().message);
    }
    start_allocation(o, dir);
    return ack(id);
  }

  /// A stop is durable before it is acknowledged (control/stop holds the kill
  /// deadline, so a restarted cq-node still kills a job that ignores TERM). A
  /// stop for an allocation this node never saw leaves a tombstone (its dir
  /// with exit.json) so that a start arriving later is ignored, and reports it
  /// ended cancelled without starting.
  std::string on_order(std::uint64_t id, const bus::stop_order& o) {
    if (!is_valid_id(o.allocation))
      return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
    auto dir = alloc_root / o.allocation;
    auto it = live.find(o.allocation);
    if (it == live.end()) {
      std::error_code ec;
      if (cleaning.count(o.allocation) || std::filesystem::exists(dir, ec)) {
        spdlog::debug("stop {}: not running, nothing to do", o.allocation);
        return ack(id);
      }
      if (auto st = make_dirs(dir); !st)
        return bus::encode_error(id, errc::internal, st.error().message);
      spdlog::info("allocation {}: stopped before it started (no start order came)", o.allocation);
      finish(o.allocation, "", 0, std::nullopt, std::nullopt, bus::reason::cancelled, 0,
             std::nullopt, "stopped before it started: the start order never reached this node");
      return ack(id);
    }
    auto& a = it->second;
    auto now = mono_ms();
    auto grace = static_cast<std::int64_t>(std::min(o.grace_ms, max_grace_ms));
    if (!a.stop_requested) {
      spdlog::info("allocation {}: stopping (SIGTERM to group {}, SIGKILL after {} ms)", a.id,
                   a.pid, grace);
      a.stop_requested = true;
      gpu->stopped_elsewhere(a.id);
      ::killpg(a.pid, SIGTERM);
    }
    if (!a.kill_at_ms || now + grace < *a.kill_at_ms)
      a.kill_at_ms = now + grace;
    auto wall = wall_ms();
    nlohmann::json rec = {{"requested_ms", wall}, {"kill_at_ms", wall + (*a.kill_at_ms - now)}};
    if (auto st = make_dirs(dir / "control"); !st)
      return bus::encode_error(id, errc::internal, st.error().message);
    if (auto st = write_file_atomic(dir / "control" / "stop", to_text(rec)); !st)
      return bus::encode_error(id, errc::internal, st.error().message); // the coordinator re-sends
    return ack(id);
  }

  /// Records the order (control/yield-ordered: only then is exit 6 a
  /// checkpoint), then creates the allocation's yield file (CQ_YIELD_FILE);
  /// the job decides when to checkpoint and exit 6.
  std::string on_order(std::uint64_t id, const bus::yield_order& o) {
    if (!is_valid_id(o.allocation))
      return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
    auto it = live.find(o.allocation);
    if (it == live.end())
      return bus::encode_error(id, errc::not_found,
                               fmt::format("allocation {} is not running here", o.allocation));
    auto control = alloc_root / o.allocation / "control";
    if (auto st = make_dirs(control); !st)
      return bus::encode_error(id, errc::internal, st.error().message);
    if (auto st = write_file_atomic(control / "yield-ordered", fmt::format("{}\n", wall_ms())); !st)
      return bus::encode_error(id, errc::internal, st.error().message);
    it->second.yield_ordered = true;
    int fd = ::open((control / "yield").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return bus::encode_error(
          id, errc::internal,
          fmt::format("cannot create the yield file: {}", std::strerror(errno)));
    ::close(fd);
    spdlog::info("allocation {}: yield requested", o.allocation);
    return ack(id);
  }

  /// Removes exactly the hold `o.hold`; an unknown or stale id is not_found.
  /// The cgroup the hold kept is emptied (its processes belong to the
  /// allocation) and removed; if the kernel refuses, removal is retried later.
  std::string on_order(std::uint64_t id, const bus::release_order& o) {
    std::string group;
    if (!holds->release(o.hold, &group))
      return bus::encode_error(id, errc::not_found, fmt::format("no hold {} on this node", o.hold));
    spdlog::info("hold {} released", o.hold);
    if (!group.empty() && !remove_leftover_group(group)) {
      holds->add_leftover(group);
      spdlog::warn("hold {}: its cgroup {} is not empty yet; removal is retried", o.hold, group);
    }
    return ack(id);
  }

  /// Kills what is left in a cgroup of ours and removes it; true once it is gone.
  bool remove_leftover_group(const std::string& dir) {
    // The group was made in a cgroup mode; the node may run in watchdog mode
    // now, where remove_group would do nothing. v1 and v2 read alike here.
    mem_group g{memcap.mode == memcap_mode::watchdog ? memcap_mode::cgroup_v1 : memcap.mode, dir};
    if (auto pids = group_pids(g)) {
      for (auto pid : *pids)
        if (auto p = read_process(pid))
          signal_same_process(pid, p->start_ticks, SIGKILL);
    }
    return static_cast<bool>(remove_group(g));
  }

  /// Archives KERNEL-FAULT.json (with the reason and who cleared it) and clears the latch.
  std::string on_order(std::uint64_t id, const bus::clear_fault_order& o) {
    auto r = gpu->clear_fault(o.reason, o.by, wall_ms());
    if (!r)
      return bus::encode_error(id, r.error().code, r.error().message);
    next_heartbeat_ms = 0; // tell the coordinator at once
    return ack(id);
  }

  std::string on_order(std::uint64_t id, const bus::read_log_order& o) {
    if (!is_valid_id(o.allocation))
      return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
    auto dir = alloc_root / o.allocation;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      return bus::encode_error(id, errc::not_found,
                               fmt::format("allocation {} is unknown on this node", o.allocation));
    bus::log_chunk chunk;
    chunk.next_offset = o.offset;
    chunk.eof = true;
    auto file = dir / "output.log";
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        return bus::encode_reply(id, chunk); // nothing written yet
      return bus::encode_error(id, errc::internal,
                               fmt::format("cannot open the log: {}", std::strerror(errno)));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return bus::encode_error(id, errc::internal, "cannot stat the log");
    }
    auto size = static_cast<std::uint64_t>(st.st_size);
    std::uint64_t want = std::min<std::uint64_t>(o.max_bytes, bus::limits::log_chunk_bytes);
    if (o.offset < size)
      want = std::min(want, size - o.offset);
    else
      want = 0;
    chunk.data.resize(want);
    std::size_t got = 0;
    while (got < want) {
      auto n = ::pread(fd, chunk.data.data() + got, want - got, static_cast<off_t>(o.offset + got));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    chunk.data.resize(got);
    chunk.next_offset = o.offset + got;
    chunk.eof = chunk.next_offset >= size;
    return bus::encode_reply(id, chunk);
  }

  // ---- allocations --------------------------------------------------------------

  void start_allocation(const bus::start_order& o, const std::filesystem::path& dir) {
    auto state_dir = jobs_root / o.job / "state";
    launch_request req{o.argv, o.cwd, o.env, dir / "output.log"};
    req.env["CQ_JOB_ID"] = o.job;
    req.env["CQ_ALLOCATION_ID"] = o.allocation;
    req.env["CQ_ATTEMPT"] = std::to_string(o.attempt);
    req.env["CQ_STATE_DIR"] = state_dir.string();
    req.env["CQ_RESUME"] = o.resume.value_or(false) ? "1" : "0";
    req.env["CQ_YIELD_FILE"] = (dir / "control" / "yield").string();
    // The job sees exactly the lanes it holds; a job holding none does not get
    // the submitter's CUDA_VISIBLE_DEVICES either.
    req.env.erase("CUDA_VISIBLE_DEVICES");
    if (o.lanes && !o.lanes->empty()) {
      auto devices = cuda_visible_devices(*o.lanes, gpu->lanes());
      if (!devices) {
        refuse_launch(o, req.log_path, fmt::format("launch failed: {}", devices.error().message));
        return;
      }
      if (*devices) // lanes without a device index: the variable stays removed
        req.env["CUDA_VISIBLE_DEVICES"] = **devices;
    }
    if (auto st = make_dirs(state_dir); !st) {
      refuse_launch(o, req.log_path, fmt::format("launch failed: {}", st.error().message));
      return;
    }
    // Pre-launch RAM admission, for jobs that opt in with a floor or a start
    // minimum: the last check before the workload starts, on a fresh sample.
    auto floor = o.ram_floor_bytes.value_or(0);
    auto start_min = o.ram_start_min_bytes.value_or(0);
    if (floor != 0 || start_min != 0) {
      auto m = sample_memory();
      std::optional<std::string> refusal;
      if (!m)
        refusal = "MemAvailable cannot be read (/proc/meminfo)";
      else if (m->total_bytes == 0 || m->available_bytes > m->total_bytes)
        refusal = fmt::format("invalid memory telemetry (MemTotal {}, MemAvailable {})",
                              m->total_bytes, m->available_bytes);
      else
        refusal = ram_admission(m->available_bytes, o.ram_bytes.value_or(0), floor, start_min);
      if (refusal) {
        refuse_launch(o, req.log_path,
                      fmt::format("launch refused by RAM admission: {}; the workload was not "
                                  "started",
                                  *refusal));
        return;
      }
      spdlog::debug("allocation {}: RAM admission passed (MemAvailable {} bytes)", o.allocation,
                    m->available_bytes);
    }
    if (auto st = make_dirs(dir / "control"); !st) {
      refuse_launch(o, req.log_path, fmt::format("launch failed: {}", st.error().message));
      return;
    }
    // GPU jobs: no latched fault, no busy lock probe, and the node's hold on
    // the first GPU lock path (gpu_lock.hpp); released by finish().
    if (o.lanes && !o.lanes->empty()) {
      if (auto st = gpu->before_launch(o.allocation, *o.lanes, o.vram_bytes,
                                       std::chrono::milliseconds(2000));
          !st) {
        // Not the job's fault: the coordinator requeues it, and learns the
        // node's GPU state from the heartbeat sent right away.
        refuse_launch(o, req.log_path, fmt::format("launch refused: {}", st.error().message),
                      bus::reason::refused);
        next_heartbeat_ms = 0;
        return;
      }
    }
    // Every allocation gets its own cgroup where the kernel offers one (SPEC
    // section 10), with its cap: the group exists before the workload starts
    // and the child joins it between fork and exec (launcher.hpp), so every
    // process it ever starts is found by cleanup, however it detaches.
    mem_group group;
    int procs_fd = -1;
    std::optional<std::uint64_t> cap;
    if (o.ram_bytes && *o.ram_bytes > 0)
      cap = o.ram_bytes;
    if (memcap.mode != memcap_mode::watchdog) {
      auto g = create_group(memcap, o.allocation, cap);
      if (!g) {
        refuse_launch(o, req.log_path, fmt::format("launch failed: {}", g.error().message));
        return;
      }
      group = *g;
      procs_fd = open_procs_file(group);
      if (procs_fd < 0) {
        auto why = fmt::format("launch failed: cannot open {}/cgroup.procs: {}", group.dir.string(),
                               std::strerror(errno));
        (void)remove_group(group);
        refuse_launch(o, req.log_path, why);
        return;
      }
    }
    auto started_wall = wall_ms();
    nlohmann::json rec = {{"allocation", o.allocation},
                          {"job", o.job},
                          {"attempt", o.attempt},
                          {"started_ms", started_wall},
                          {"argv", o.argv},
                          {"cwd", o.cwd},
                          {"lanes", o.lanes.value_or(bus::string_list{})},
                          {"ram_bytes", opt_json(o.ram_bytes)},
                          {"timeout_ms", opt_json(o.timeout_ms)},
                          {"vram_bytes", opt_json(o.vram_bytes)},
                          {"mem_mode", to_string(group.mode)},
                          {"cgroup", group.dir.string()},
                          {"shim", !shim.empty()}};
    // SPEC section 10: the workload starts only once its record is durable,
    // so a restarted cq-node always finds (and re-adopts or reports) it.
    if (auto w = write_file_atomic(dir / "alloc.json", to_text(rec)); !w) {
      if (procs_fd >= 0)
        ::close(procs_fd);
      (void)remove_group(group);
      refuse_launch(o, req.log_path,
                    fmt::format("launch failed: the allocation record cannot be written: {}; the "
                                "workload was not started",
                                w.error().message));
      return;
    }
    req.cgroup_procs_fd = procs_fd;
    req.shim = shim;
    req.status_path = dir / "status";
    auto started_mono = mono_ms();
    auto child = launch(req);
    if (procs_fd >= 0)
      ::close(procs_fd);
    if (!child) {
      (void)remove_group(group);
      refuse_launch(o, req.log_path, fmt::format("launch failed: {}", child.error().message));
      return;
    }
    // Registered before anything else can fail, so the child is always supervised.
    allocation a;
    a.id = o.allocation;
    a.job = o.job;
    a.attempt = o.attempt;
    a.pid = child->pid;
    a.pidfd = child->pidfd;
    a.started_mono_ms = started_mono;
    // The leader is our unreaped child: its pid cannot be reused yet.
    if (auto p = read_process(a.pid))
      a.start_ticks = p->start_ticks;
    a.lanes = o.lanes.value_or(bus::string_list{});
    a.ram_cap = cap;
    a.group = group;
    if (o.timeout_ms && *o.timeout_ms > 0)
      a.timeout_at_ms = started_mono + static_cast<std::int64_t>(
                                           std::min<std::uint64_t>(*o.timeout_ms, max_timeout_ms));
    live.emplace(a.id, a);
    if (!a.lanes.empty())
      gpu->launched(a.id, a.pid);
    rec["pid"] = a.pid;
    rec["start_ticks"] = a.start_ticks;
    // Without the pid a restarted cq-node finds the leader by its marker.
    if (auto w = write_file_atomic(dir / "alloc.json", to_text(rec)); !w)
      spdlog::error("allocation {}: {} (the running workload is found by its marker after a "
                    "restart)",
                    o.allocation, w.error().message);
    spdlog::info("allocation {} (job {} attempt {}): started pid {}: {}", o.allocation, o.job,
                 o.attempt, a.pid, fmt::join(o.argv, " "));
    bus::report_req r;
    r.kind = "started";
    r.allocation = o.allocation;
    r.job = o.job;
    queue_report(std::move(r));
  }

  /// Ends allocation `o` without starting it: says why in its log, then
  /// records and reports exit code 125, reason launch_failed (invariant 1).
  /// (`reason` refused: not the job's fault; the coordinator requeues it.)
  void refuse_launch(const bus::start_order& o, const std::filesystem::path& log_path,
                     const std::string& why, bus::reason reason = bus::reason::launch_failed) {
    spdlog::warn("allocation {} (job {}): {}", o.allocation, o.job, why);
    if (auto ap = append_to_file(log_path, fmt::format("cq-node: {}\n", why)); !ap)
      spdlog::warn("{}", ap.error().message);
    finish(o.allocation, o.job, o.attempt, 125, std::nullopt, reason, 0, std::nullopt, why);
  }

  /// The leader of `id` has exited (its pidfd is readable): collect its exit,
  /// then clean up; the exit is recorded and reported when cleanup ends.
  void reap(const std::string& id) {
    auto it = live.find(id);
    if (it == live.end())
      return;
    auto a = it->second;
    live.erase(it);
    std::optional<siginfo_t> info;
    std::uint64_t leader_maxrss = 0;
    if (!a.adopted) {
      // Invariant 3: the leader is not reaped yet, so its pid (== the pgid)
      // cannot have been reused; kill whatever of the group survives it.
      ::killpg(a.pid, SIGKILL);
      siginfo_t si{};
      struct rusage ru {};
      long rc;
      do {
        // The raw syscall, for its rusage argument (glibc's waitid has none).
        rc = ::syscall(SYS_waitid, P_PIDFD, a.pidfd, &si, WEXITED, &ru);
      } while (rc < 0 && errno == EINTR);
      if (rc == 0) {
        info = si;
        if (ru.ru_maxrss > 0)
          leader_maxrss = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024; // kB on Linux
      } else {
        spdlog::error("allocation {}: cannot reap pid {}: {}", id, a.pid, std::strerror(errno));
      }
    }
    ::close(a.pidfd);
    a.pidfd = -1;
    end_allocation(a, info, leader_maxrss);
  }

  /// Works out the exit of `a` (from cq-shim's status file, else from the
  /// leader's own wait status) and starts its cleanup.
  void end_allocation(allocation a, std::optional<siginfo_t> info, std::uint64_t leader_maxrss = 0,
                      bool by_group = true) {
    auto now = mono_ms();
    cleanup_state c;
    c.by_group = by_group;
    auto dir = alloc_root / a.id;
    auto peak = std::max(a.peak_rss_bytes, leader_maxrss);
    if (auto st = read_shim_status(dir / "status")) {
      c.exit_code = st->exit_code;
      c.signal = st->signal;
      peak = std::max(peak, st->maxrss_bytes);
    } else if (info && info->si_code == CLD_EXITED) {
      c.exit_code = info->si_status;
    } else if (info && (info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED)) {
      c.signal = info->si_status;
    } else {
      c.detail = "the workload ended while cq-node was not running and left no exit status";
      c.lost = true;
    }
    if (a.group.mode != memcap_mode::watchdog) {
      if (auto p = peak_usage(a.group))
        peak = std::max(peak, *p);
      if (auto k = oom_kills(a.group); k && *k > 0)
        a.oom = true;
    }
    c.wall = static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - a.started_mono_ms));
    auto gpu_stop = bus::reason::none; // fault or vram_cap: the stop the GPU supervisor made
    bus::parse(gpu->stop_reason(a.id), gpu_stop);
    c.reason = exit_reason(
        {a.oom, c.exit_code, a.yield_ordered, a.timed_out, a.stop_requested, gpu_stop, c.lost});
    c.peak = peak > 0 ? std::optional<std::uint64_t>(peak) : std::nullopt;
    c.deadline_ms = now + static_cast<std::int64_t>(cfg.identity.cleanup.max_wait_ms);
    c.next_scan_ms = now;
    auto key = a.id;
    c.a = std::move(a);
    cleaning[key] = std::move(c);
    cleanup_step(key, now);
  }

  /// One cleanup scan of allocation `id` (SPEC section 5, seed semantics):
  /// every process of its group (other than the reaped leader) and every
  /// process whose environment carries CQ_ALLOCATION_ID=<id>, started at or
  /// after the leader, gets SIGKILL (pidfd, after a start-time check). A
  /// process of our own user whose environment cannot be read and that started
  /// at or after the leader is a suspect: never signalled, but the scan is not
  /// empty. Two consecutive empty scans, poll_ms apart, end the cleanup; at
  /// the deadline whatever remains puts the lanes (or the node) into a hold.
  void cleanup_step(std::string id, std::int64_t now) {
    auto it = cleaning.find(id);
    if (it == cleaning.end())
      return;
    auto& c = it->second;
    auto needle = "CQ_ALLOCATION_ID=" + id;
    auto self = ::getpid();
    auto me = ::geteuid();
    std::string found;
    std::size_t count = 0;
    // Every process in the allocation's cgroup is the allocation's, whatever
    // its session, process group or environment (SPEC section 10).
    std::vector<pid_t> members;
    if (auto pids = group_pids(c.a.group))
      members = std::move(*pids);
    std::sort(members.begin(), members.end());
    for (auto& p : scan_processes()) {
      if (p.pid == self || p.state == 'Z' || p.state == 'X')
        continue;
      bool in_group = std::binary_search(members.begin(), members.end(), p.pid);
      if (!in_group && p.start_ticks < c.a.start_ticks)
        continue;
      bool target = in_group || (c.by_group && p.pgrp == c.a.pid && p.pid != c.a.pid);
      bool suspect = false;
      if (!target) {
        auto m = environ_has(p.pid, needle);
        target = m == marker::present;
        suspect = m == marker::unreadable && p.uid == me;
      }
      if (!target && !suspect)
        continue;
      if (target)
        signal_same_process(p.pid, p.start_ticks, SIGKILL);
      if (count++ < 16)
        found += fmt::format("{}pid {} (start {}, state {}{})", found.empty() ? "" : ", ", p.pid,
                             p.start_ticks, p.state, suspect ? ", environment unreadable" : "");
    }
    if (count == 0) {
      if (++c.empty_scans >= 2) {
        // Gone from every scan; the cgroup goes too (the kernel may need a
        // moment after the last exit: tried again until the deadline).
        auto removed = remove_group(c.a.group);
        if (removed) {
          c.a.group.dir.clear();
          finish_cleanup(id, false);
          return;
        }
        c.group_error = removed.error().message;
        if (now >= c.deadline_ms) {
          finish_cleanup(id, false);
          return;
        }
      }
    } else {
      c.empty_scans = 0;
      c.remaining = count > 16 ? fmt::format("{} and {} more", found, count - 16) : found;
    }
    if (now >= c.deadline_ms) {
      finish_cleanup(id, count != 0);
      return;
    }
    c.next_scan_ms = now + static_cast<std::int64_t>(cfg.identity.cleanup.poll_ms);
  }

  /// Ends the cleanup of `id`: a hold if processes remain, then the group is
  /// removed (when empty) and the exit recorded and reported.
  void finish_cleanup(std::string id, bool unconfirmed) {
    auto it = cleaning.find(id);
    if (it == cleaning.end())
      return;
    auto c = std::move(it->second);
    cleaning.erase(it);
    // A cgroup that cannot be removed still holds something of the allocation
    // that no scan saw: a hold, never a success (SPEC section 10).
    bool group_left = false;
    if (!c.a.group.dir.empty()) {
      if (auto st = remove_group(c.a.group); st)
        c.a.group.dir.clear();
      else
        group_left = true, c.group_error = st.error().message;
    }
    if (unconfirmed || group_left) {
      auto why = unconfirmed
                     ? fmt::format("cleanup of allocation {} could not confirm these processes "
                                   "gone after {} ms: {}",
                                   id, cfg.identity.cleanup.max_wait_ms, c.remaining)
                     : fmt::format("cleanup of allocation {}: its cgroup could not be removed "
                                   "after {} ms ({})",
                                   id, cfg.identity.cleanup.max_wait_ms, c.group_error);
      bus::string_list lanes = c.a.lanes;
      if (lanes.empty())
        lanes.push_back("");
      for (auto& lane : lanes) {
        auto hid = holds->add(lane, id, why, wall_ms(), c.a.group.dir.string());
        spdlog::error("HOLD {} on {}: {}. Check the machine, then `cq release --hold {}`", hid,
                      lane.empty() ? "the node" : "lane " + lane, why, hid);
      }
      if (!c.detail.empty())
        c.detail += "; ";
      c.detail += why;
    }
    spdlog::info("allocation {} (job {}): exited{}{}{} after {} ms", id, c.a.job,
                 c.exit_code ? fmt::format(" with code {}", *c.exit_code) : "",
                 c.signal ? fmt::format(" on signal {}", *c.signal) : "",
                 c.reason == bus::reason::none ? "" : fmt::format(" ({})", to_string(c.reason)),
                 c.wall);
    finish(id, c.a.job, c.a.attempt, c.exit_code, c.signal, c.reason, c.wall, c.peak, c.detail);
  }

  /// Queues the exited report (persisted in the outbox), then writes
  /// exit.json (invariant 2): a crash between the two leaves the report, from
  /// which readopt() writes the missing exit.json; a crash before the first
  /// leaves neither, and readopt() finishes the allocation again.
  void finish(const std::string& id, const std::string& job, std::uint64_t attempt,
              std::optional<std::int64_t> exit_code, std::optional<std::int64_t> signal,
              bus::reason reason, std::uint64_t wall, std::optional<std::uint64_t> peak_ram_bytes,
              const std::string& detail) {
    // A GPU allocation gives back its GPU lock reference here: after its
    // cleanup, or when its launch failed.
    std::optional<std::uint64_t> peak_vram_bytes;
    if (auto g = gpu->finish(id))
      peak_vram_bytes = g->peak_vram_bytes;
    bus::report_req r;
    r.kind = "exited";
    r.allocation = id;
    r.job = job;
    r.exit_code = exit_code;
    r.signal = signal;
    r.reason = reason;
    r.wall_ms = wall;
    r.peak_ram_bytes = peak_ram_bytes;
    r.peak_vram_bytes = peak_vram_bytes;
    if (!detail.empty())
      r.detail = detail.substr(0, 16 * 1024);
    queue_report(r);
    write_exit_record(r, attempt);
  }

  /// exit.json of an exited report.
  void write_exit_record(const bus::report_req& r, std::uint64_t attempt) {
    nlohmann::json rec = {{"allocation", r.allocation},
                          {"job", r.job},
                          {"attempt", attempt},
                          {"exit_code", opt_json(r.exit_code)},
                          {"signal", opt_json(r.signal)},
                          {"reason", std::string(to_string(r.reason))},
                          {"wall_ms", r.wall_ms},
                          {"peak_ram_bytes", opt_json(r.peak_ram_bytes)},
                          {"peak_vram_bytes", opt_json(r.peak_vram_bytes)},
                          {"finished_ms", r.at_ms ? r.at_ms : wall_ms()}};
    if (r.detail)
      rec["detail"] = *r.detail;
    if (auto w = write_file_atomic(alloc_root / r.allocation / "exit.json", to_text(rec)); !w)
      spdlog::error("{}", w.error().message);
  }

  void shutdown() {
    // Allocations in cleanup are finished from their status files at the next start.
    if (!live.empty())
      spdlog::info("leaving {} allocation(s) running", live.size());
    for (auto& [id, a] : live)
      ::close(a.pidfd);
    live.clear();
  }
};

node_daemon::node_daemon(daemon_config cfg) : impl_(std::make_unique<impl>(std::move(cfg))) {}

node_daemon::~node_daemon() = default;

int node_daemon::run(int stop_fd) {
  auto& s = *impl_;
  if (!s.setup())
    return s.setup_rc;
  std::vector<zmq::pollitem_t> items;
  std::vector<std::string> ids; // allocation of items[2 + i]
  for (;;) {
    auto now = mono_ms();
    s.on_timers(now);
    auto timeout = std::clamp<std::int64_t>(s.next_deadline() - mono_ms(), 0, max_poll_ms);
    items.clear();
    ids.clear();
    items.push_back({s.sock.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, stop_fd, ZMQ_POLLIN, 0});
    for (auto& [id, a] : s.live) {
      items.push_back({nullptr, a.pidfd, ZMQ_POLLIN, 0});
      ids.push_back(id);
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      spdlog::critical("poll failed: {}", e.what());
      s.shutdown();
      return 1;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      spdlog::info("stop requested; exiting");
      break;
    }
    try {
      if (items[0].revents & ZMQ_POLLIN)
        s.receive();
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (items[2 + i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
          s.reap(ids[i]);
    } catch (const std::exception& e) {
      // Invariant 4: nothing from outside stops the loop. Reaching this is a bug.
      spdlog::error("unexpected failure in the event loop (continuing): {}", e.what());
    }
  }
  s.shutdown();
  return 0;
}

} // namespace cq::node
