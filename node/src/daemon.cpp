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
// process (measured: 0.5 ms for 100 processes). If GPU telemetry or watchdog sampling
// ever becomes slow, it gets its own thread that hands results to this loop
// through an eventfd.

#include "cq/node/daemon.hpp"

#include "cq/bus/codec.hpp"
#include "cq/node/clock.hpp"
#include "cq/node/files.hpp"
#include "cq/node/launcher.hpp"
#include "cq/node/meminfo.hpp"
#include "cq/node/outbox.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <fcntl.h>
#include <signal.h>
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
#include <map>
#include <optional>
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

/// A child this process launched and has not reaped yet.
struct allocation {
  std::string id;                            ///< allocation id (valid id)
  std::string job;                           ///< job id (valid id)
  std::uint64_t attempt = 0;                 ///< attempt number from the start order
  pid_t pid = -1;                            ///< leader pid == process group id
  int pidfd = -1;                            ///< owned; polled for the leader's exit
  std::int64_t started_mono_ms = 0;          ///< for wall_ms
  bool stop_requested = false;               ///< a stop order arrived: the exit is "cancelled"
  std::optional<std::int64_t> kill_at_ms;    ///< when to SIGKILL the group (after a stop)
  std::optional<std::int64_t> timeout_at_ms; ///< when the hard wall-time limit stops it
  bool timed_out = false;                    ///< stopped by its timeout: the exit is "timeout"
  std::uint64_t peak_rss_bytes = 0;          ///< largest sampled RSS sum of the group
};

enum class request_kind { heartbeat, report };

/// A request sent to the coordinator whose reply has not arrived.
struct pending_request {
  request_kind kind = request_kind::heartbeat;
  std::uint64_t seq = 0;    ///< report seq (kind == report)
  std::int64_t sent_ms = 0; ///< for expiry
};

/// Errors after which a report is kept and re-sent rather than dropped.
bool is_retryable(errc code) {
  return code == errc::internal || code == errc::unavailable || code == errc::unauthenticated;
}

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

/// CUDA_VISIBLE_DEVICES for `lanes`: the numeric suffixes of the lane names,
/// comma-separated, in order ("gpu0", "gpu2" -> "0,2"). A name without a
/// numeric suffix, or a lane given twice, is an error: a GPU job never runs
/// with a device list other than the one it was placed on.
bus::result<std::string> cuda_visible_devices(const bus::string_list& lanes) {
  std::string out;
  std::vector<unsigned long> seen;
  for (auto& lane : lanes) {
    auto digits = lane.size();
    while (digits > 0 && lane[digits - 1] >= '0' && lane[digits - 1] <= '9')
      --digits;
    unsigned long index = 0;
    auto [p, ec] = std::from_chars(lane.data() + digits, lane.data() + lane.size(), index);
    if (digits == lane.size() || ec != std::errc{})
      return bus::error_info{errc::invalid_argument,
                             fmt::format("lane '{}' has no device index", lane)};
    if (std::find(seen.begin(), seen.end(), index) != seen.end())
      return bus::error_info{errc::invalid_argument,
                             fmt::format("lane '{}': device {} listed twice", lane, index)};
    seen.push_back(index);
    out += fmt::format("{}{}", out.empty() ? "" : ",", index);
  }
  return out;
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
  std::unordered_map<std::uint64_t, pending_request> pending; ///< by request id
  std::uint64_t next_request_id = 1;                          ///< id of our next request
  std::int64_t next_heartbeat_ms = 0;                         ///< monotonic; 0 = right away
  std::int64_t next_purge_ms = 0;                             ///< next expiry scan of `pending`
  std::int64_t next_sample_ms = 0;   ///< next RSS sample of the live allocations
  std::vector<group_rss> sample_buf; ///< reused by sample_peaks()
  std::optional<bool> approved;      ///< last approval state the coordinator reported
  std::optional<bool> link_up;       ///< whether the last send found a connection
  std::int64_t auth_error_logged_ms = INT64_MIN / 2; ///< throttles the unauthenticated log

  explicit impl(daemon_config c) : cfg(std::move(c)) {}

  // ---- setup ----------------------------------------------------------------

  bool setup() {
    alloc_root = cfg.state_dir / "allocations";
    jobs_root = cfg.state_dir / "jobs";
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
    warn_about_orphans();
    spdlog::info("cq-node '{}' running: coordinator {}, state {}, {} pending report(s)",
                 cfg.identity.name, cfg.identity.endpoint, cfg.state_dir.string(), box->size());
    return true;
  }

  // Allocations of an earlier run with no exit record are not supervised by
  // this process. Re-adopting them is issue 4; until then, say so.
  void warn_about_orphans() {
    std::error_code ec;
    std::size_t orphans = 0;
    for (std::filesystem::directory_iterator it(alloc_root, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code e2;
      if (std::filesystem::exists(it->path() / "alloc.json", e2) &&
          !std::filesystem::exists(it->path() / "exit.json", e2))
        ++orphans;
    }
    if (orphans > 0)
      spdlog::warn("{} allocation(s) of an earlier run have no exit record; this version does "
                   "not re-adopt them",
                   orphans);
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
    hb.allocations.reserve(live.size());
    for (auto& [id, a] : live)
      hb.allocations.push_back(id);
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
    for (auto& [id, a] : live)
      a.peak_rss_bytes = std::max(a.peak_rss_bytes, sample_buf[i++].rss_bytes);
  }

  void send_due_reports(std::int64_t now) {
    for (auto* r : box->due(now, max_reports_per_turn)) {
      auto seq = r->seq;
      bool ok = send_request(*r, request_kind::report, seq, now);
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
    if (now >= next_heartbeat_ms)
      send_heartbeat(now);
    send_due_reports(now);
    if (!live.empty() && now >= next_sample_ms) {
      sample_peaks();
      next_sample_ms = now + cfg.heartbeat_ms;
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
    if (now >= next_purge_ms) {
      std::erase_if(pending,
                    [&](auto& kv) { return kv.second.sent_ms + pending_reply_ttl_ms < now; });
      next_purge_ms = now + pending_reply_ttl_ms / 2;
    }
  }

  std::int64_t next_deadline() const {
    auto next = std::min({next_heartbeat_ms, box->next_due_ms(), next_purge_ms});
    if (!live.empty())
      next = std::min(next, next_sample_ms);
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
      } else {
        spdlog::warn("heartbeat refused: {}: {}", to_string(f.error.code), f.error.message);
      }
      return;
    }
    auth_error_logged_ms = INT64_MIN / 2;
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
    if (box->remove(seq))
      spdlog::debug("report {} acknowledged", seq);
  }

  // ---- orders -----------------------------------------------------------------

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
      return bus::encode_reply(id, bus::empty_rep{});
    }
    if (auto st = make_dirs(dir); !st) {
      spdlog::error("start {}: {}", o.allocation, st.error().message);
      return bus::encode_error(id, errc::internal, st.error().message);
    }
    start_allocation(o, dir);
    return bus::encode_reply(id, bus::empty_rep{});
  }

  std::string on_order(std::uint64_t id, const bus::stop_order& o) {
    if (!is_valid_id(o.allocation))
      return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
    auto it = live.find(o.allocation);
    if (it == live.end()) {
      spdlog::debug("stop {}: not running, nothing to do", o.allocation);
      return bus::encode_reply(id, bus::empty_rep{});
    }
    auto& a = it->second;
    auto now = mono_ms();
    auto grace = static_cast<std::int64_t>(std::min(o.grace_ms, max_grace_ms));
    if (!a.stop_requested) {
      spdlog::info("allocation {}: stopping (SIGTERM to group {}, SIGKILL after {} ms)", a.id,
                   a.pid, grace);
      a.stop_requested = true;
      ::killpg(a.pid, SIGTERM);
    }
    if (!a.kill_at_ms || now + grace < *a.kill_at_ms)
      a.kill_at_ms = now + grace;
    return bus::encode_reply(id, bus::empty_rep{});
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
    if (o.ram_bytes)
      spdlog::debug("allocation {}: RAM cap {} bytes is not enforced yet", o.allocation,
                    *o.ram_bytes);
    // The job sees exactly the lanes it holds; a job holding none does not get
    // the submitter's CUDA_VISIBLE_DEVICES either.
    req.env.erase("CUDA_VISIBLE_DEVICES");
    if (o.lanes && !o.lanes->empty()) {
      auto devices = cuda_visible_devices(*o.lanes);
      if (!devices) {
        refuse_launch(o, req.log_path, fmt::format("launch failed: {}", devices.error().message));
        return;
      }
      req.env["CUDA_VISIBLE_DEVICES"] = *devices;
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
    auto started_mono = mono_ms();
    auto started_wall = wall_ms();
    auto child = launch(req);
    if (!child) {
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
    if (o.timeout_ms && *o.timeout_ms > 0)
      a.timeout_at_ms = started_mono + static_cast<std::int64_t>(
                                           std::min<std::uint64_t>(*o.timeout_ms, max_timeout_ms));
    live.emplace(a.id, a);
    nlohmann::json rec = {{"allocation", o.allocation},
                          {"job", o.job},
                          {"attempt", o.attempt},
                          {"pid", a.pid},
                          {"started_ms", started_wall},
                          {"argv", o.argv},
                          {"cwd", o.cwd},
                          {"lanes", o.lanes.value_or(bus::string_list{})},
                          {"ram_bytes", opt_json(o.ram_bytes)},
                          {"timeout_ms", opt_json(o.timeout_ms)}};
    if (auto w = write_file_atomic(dir / "alloc.json", to_text(rec)); !w)
      spdlog::warn("{}", w.error().message);
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
  void refuse_launch(const bus::start_order& o, const std::filesystem::path& log_path,
                     const std::string& why) {
    spdlog::warn("allocation {} (job {}): {}", o.allocation, o.job, why);
    if (auto ap = append_to_file(log_path, fmt::format("cq-node: {}\n", why)); !ap)
      spdlog::warn("{}", ap.error().message);
    finish(o.allocation, o.job, o.attempt, 125, std::nullopt, "launch_failed", 0, std::nullopt,
           why);
  }

  /// The leader of `id` has exited (its pidfd is readable): clean up, record, report.
  void reap(const std::string& id) {
    auto it = live.find(id);
    if (it == live.end())
      return;
    auto a = it->second;
    live.erase(it);
    // Invariant 3: the leader is not reaped yet, so its pid (== the pgid) cannot
    // have been reused; kill whatever of the group survives it.
    ::killpg(a.pid, SIGKILL);
    siginfo_t info{};
    struct rusage ru {};
    long rc;
    do {
      // The raw syscall, for its rusage argument (glibc's waitid has none): the
      // leader's own peak RSS, which covers a job too short for any sample.
      rc = ::syscall(SYS_waitid, P_PIDFD, a.pidfd, &info, WEXITED, &ru);
    } while (rc < 0 && errno == EINTR);
    int err = errno;
    ::close(a.pidfd);
    auto wall =
        static_cast<std::uint64_t>(std::max<std::int64_t>(0, mono_ms() - a.started_mono_ms));
    std::optional<std::int64_t> exit_code, signal;
    if (rc != 0) {
      spdlog::error("allocation {}: cannot reap pid {}: {}", id, a.pid, std::strerror(err));
    } else if (info.si_code == CLD_EXITED) {
      exit_code = info.si_status;
    } else if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
      signal = info.si_status;
    }
    auto peak = a.peak_rss_bytes;
    if (rc == 0 && ru.ru_maxrss > 0)
      peak = std::max(peak, static_cast<std::uint64_t>(ru.ru_maxrss) * 1024); // kB on Linux
    std::string reason = a.timed_out ? "timeout" : a.stop_requested ? "cancelled" : "";
    spdlog::info("allocation {} (job {}): exited{}{}{} after {} ms", id, a.job,
                 exit_code ? fmt::format(" with code {}", *exit_code) : "",
                 signal ? fmt::format(" on signal {}", *signal) : "",
                 reason.empty() ? "" : " (" + reason + ")", wall);
    finish(id, a.job, a.attempt, exit_code, signal, reason, wall,
           peak > 0 ? std::optional<std::uint64_t>(peak) : std::nullopt, "");
  }

  /// Writes exit.json, then queues the exited report (invariant 2).
  void finish(const std::string& id, const std::string& job, std::uint64_t attempt,
              std::optional<std::int64_t> exit_code, std::optional<std::int64_t> signal,
              const std::string& reason, std::uint64_t wall,
              std::optional<std::uint64_t> peak_ram_bytes, const std::string& detail) {
    auto finished = wall_ms();
    nlohmann::json rec = {{"allocation", id},
                          {"job", job},
                          {"attempt", attempt},
                          {"exit_code", opt_json(exit_code)},
                          {"signal", opt_json(signal)},
                          {"reason", reason},
                          {"wall_ms", wall},
                          {"peak_ram_bytes", opt_json(peak_ram_bytes)},
                          {"finished_ms", finished}};
    if (!detail.empty())
      rec["detail"] = detail;
    if (auto w = write_file_atomic(alloc_root / id / "exit.json", to_text(rec)); !w)
      spdlog::error("{}", w.error().message);
    bus::report_req r;
    r.kind = "exited";
    r.allocation = id;
    r.job = job;
    r.exit_code = exit_code;
    r.signal = signal;
    r.reason = reason;
    r.wall_ms = wall;
    r.peak_ram_bytes = peak_ram_bytes;
    queue_report(std::move(r));
  }

  void shutdown() {
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
    return 1;
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
