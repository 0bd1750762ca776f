// The daemon's start path: the last checks before a workload starts, its
// durable record, the launch through the process host, and its supervisor.
// Runs inside the daemon actor's start-order handler, so the order is
// acknowledged only once the allocation is launched or ended (daemon.hpp,
// invariants 1, 6, 7, 10, 12 and 13). Start orders that waited together are
// handled as one group, their records synced together (ADR 0068).
#include "cq/bus/output_pattern.hpp"
#include "node/actors/daemon_state.hpp"
#include "node/actors/records.hpp"

#include "cq/bus/codec.hpp"
#include "cq/json.hpp"
#include "cq/node/files.hpp"
#include "cq/node/terminal_frame.hpp"
#include "node/policy/admission.hpp"
#include "node/policy/cuda.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace cq::node {

namespace {

/// Ends allocation `o` without starting it: says why in its log, then
/// records and reports exit code 125, reason launch_failed (invariant 1).
/// (`reason` refused: not the job's fault; the coordinator requeues it.)
void refuse_launch(daemon_ptr self, const bus::start_order& o,
                   const std::filesystem::path& log_path, const std::string& why,
                   bus::reason reason = bus::reason::launch_failed) {
  spdlog::warn("allocation {} (job {}): {}", o.allocation, o.job, why);
  // The allocation's directory is made durable before its exit record is
  // written into it; where a sync of this start failed, the outbox keeps
  // the report as well (invariant 1).
  auto& st = self->state;
  if (auto synced = disk_of(self).sync_dirs(st.start_syncs); !synced) {
    spdlog::error("allocation {}: {}", o.allocation, synced.error().message);
    st.start_unsynced = true;
    // It may have held the group's other starts' directories too.
    st.group_unsynced = synced.error().message;
  }
  bool persist = std::exchange(st.start_unsynced, false);
  if (auto ap = disk_of(self).append(log_path, fmt::format("cq-node: {}\n", why)); !ap)
    spdlog::warn("{}", ap.error().message);
  finish(self, local_end(o.allocation, o.job, o.attempt, 125, reason, why), persist);
}

/// Pre-launch RAM admission, for jobs that opt in with a floor or a start
/// minimum: the last check before the workload starts, on a fresh sample.
/// Returns why the launch is refused, or nullopt.
std::optional<std::string> admit(daemon_ptr self, const bus::start_order& o) {
  auto floor = o.ram_floor_bytes.value_or(0);
  auto start_min = o.ram_start_min_bytes.value_or(0);
  if (floor == 0 && start_min == 0)
    return std::nullopt;
  auto m = sample_memory(self);
  std::optional<std::string> refusal;
  if (!m)
    refusal = "MemAvailable cannot be read (/proc/meminfo)";
  else if (m->total_bytes == 0 || m->available_bytes > m->total_bytes)
    refusal = fmt::format("invalid memory telemetry (MemTotal {}, MemAvailable {})", m->total_bytes,
                          m->available_bytes);
  else
    refusal = ram_admission(m->available_bytes, o.ram_bytes.value_or(0), floor, start_min);
  if (!refusal)
    spdlog::debug("allocation {}: RAM admission passed (MemAvailable {} bytes)", o.allocation,
                  m->available_bytes);
  return refusal;
}

/// A start whose checks passed and whose record is written, not yet synced.
struct prepared_start {
  const bus::start_order* order = nullptr;
  std::filesystem::path dir;
  launch_request req;
  mem_group group;
  std::optional<std::uint64_t> cap;
};

/// Ends prepared start `p` unlaunched: its group (and a standby in it) goes,
/// and it is refused as launch_failed, its record not written or not durable.
void unlaunched(daemon_ptr self, prepared_start& p, const std::string& why) {
  auto& st = self->state;
  st.seams.processes->unclaim(p.group); // a standby in it ends first
  (void)st.seams.probes->remove_group(p.group);
  refuse_launch(self, *p.order, p.req.log_path,
                fmt::format("launch failed: the allocation record cannot be written: {}; the "
                            "workload was not started",
                            why));
}

/// The start order `o` for an allocation whose directory `dir` was just made:
/// its checks, its group, and its record written for the group's sync; or
/// nullopt, the allocation ended as launch_failed or refused.
std::optional<prepared_start> prepare_start(daemon_ptr self, const bus::start_order& o,
                                            const std::filesystem::path& dir) {
  auto& st = self->state;
  auto& setup = st.setup;
  auto state_dir = setup.jobs_root / o.job / "state";
  launch_request req{o.argv, o.cwd, o.env, dir / "output.log"};
  // Invariant 14: the coordinator has given up an order read this late (and
  // may have placed the job again): it must not start.
  if (auto now = wall_now_ms(self); o.expires_ms && now > *o.expires_ms) {
    refuse_launch(self, o, req.log_path,
                  fmt::format("start order expired {} ms before this node read it (the node was "
                              "paused or cut off); the workload was not started",
                              now - *o.expires_ms),
                  bus::reason::refused);
    return std::nullopt;
  }
  req.env["CQ_JOB_ID"] = o.job;
  if (o.name)
    req.env["CQ_JOB_NAME"] = *o.name;
  req.env["CQ_NODE"] = setup.cfg.identity.name;
  req.env["CQ_ALLOCATION_ID"] = o.allocation;
  req.env["CQ_ATTEMPT"] = std::to_string(o.attempt);
  req.env["CQ_STATE_DIR"] = state_dir.string();
  if (o.output) {
    if (setup.shim.empty()) {
      refuse_launch(self, o, req.log_path,
                    "launch failed: --output needs cq-shim, which was not found");
      return std::nullopt;
    }
    auto index = o.env.find("CQ_ARRAY_INDEX");
    req.output_path = bus::expand_output(
        *o.output, {o.job, index != o.env.end() ? std::string_view(index->second) : "",
                    o.name.value_or(""), setup.cfg.identity.name});
  }
  if (o.pty.value_or(false)) {
    if (setup.shim.empty()) {
      refuse_launch(self, o, req.log_path,
                    "launch failed: --pty needs cq-shim, which was not found");
      return std::nullopt;
    }
    req.terminal = dir / terminal_fifo;
    if (!req.env.count("TERM"))
      req.env["TERM"] = "xterm-256color";
  }
  req.env["CQ_RESUME"] = o.resume.value_or(false) ? "1" : "0";
  req.env["CQ_YIELD_FILE"] = (dir / "control" / "yield").string();
  // The job sees exactly the lanes it holds; a job holding none does not get
  // the submitter's CUDA_VISIBLE_DEVICES either.
  req.env.erase("CUDA_VISIBLE_DEVICES");
  if (o.lanes && !o.lanes->empty()) {
    auto devices = cuda_visible_devices(*o.lanes, setup.gpu->lanes());
    if (!devices) {
      refuse_launch(self, o, req.log_path,
                    fmt::format("launch failed: {}", devices.error().message));
      return std::nullopt;
    }
    if (*devices) // lanes without a device index: the variable stays removed
      req.env["CUDA_VISIBLE_DEVICES"] = **devices;
  }
  if (auto made = disk_of(self).make_dirs_later(state_dir, st.start_syncs); !made) {
    refuse_launch(self, o, req.log_path, fmt::format("launch failed: {}", made.error().message));
    return std::nullopt;
  }
  // Run-as (SPEC section 6): the job runs as its identity's user, and its
  // state and output belong to that user. The coordinator places no job of
  // an unmapped identity here; one that arrives anyway is refused, not failed.
  if (auto& map = setup.cfg.run_as; !map.empty()) {
    auto c = map.find(o.owner.value_or(""));
    if (c == map.end()) {
      refuse_launch(self, o, req.log_path,
                    fmt::format("launch refused: node has no run-as mapping for identity '{}'",
                                o.owner.value_or("")),
                    bus::reason::refused);
      return std::nullopt;
    }
    if (setup.shim.empty()) {
      refuse_launch(self, o, req.log_path,
                    "launch failed: run-as needs cq-shim, which was not found");
      return std::nullopt;
    }
    req.as = c->second;
    req.owned = {state_dir, dir, req.log_path};
    req.env["USER"] = c->second.user;
    req.env["LOGNAME"] = c->second.user;
  }
  if (auto refusal = admit(self, o)) {
    refuse_launch(
        self, o, req.log_path,
        fmt::format("launch refused by RAM admission: {}; the workload was not started", *refusal));
    return std::nullopt;
  }
  // control/ is there from the start: a job may watch it for CQ_YIELD_FILE.
  // Made without a sync of its own: alloc.json's write below syncs `dir`,
  // which makes control/ durable with it, before the launch (ADR 0044).
  if (auto made = disk_of(self).make_dir_unsynced(dir / "control"); !made) {
    refuse_launch(self, o, req.log_path, fmt::format("launch failed: {}", made.error().message));
    return std::nullopt;
  }
  // GPU jobs: no latched fault, no busy lock probe, and the node's hold on
  // the first GPU lock path (gpu_lock.hpp); released by finish().
  if (o.lanes && !o.lanes->empty()) {
    if (auto ok = setup.gpu->before_launch(o.allocation, *o.lanes, o.vram_bytes,
                                           std::chrono::milliseconds(2000));
        !ok) {
      // Not the job's fault: the coordinator requeues it, and learns the
      // node's GPU state from the heartbeat sent right away.
      refuse_launch(self, o, req.log_path, fmt::format("launch refused: {}", ok.error().message),
                    bus::reason::refused);
      heartbeat_now(self);
      return std::nullopt;
    }
  }
  // Every allocation gets its own cgroup where the kernel offers one (SPEC
  // section 10), with its cap: the group exists before the workload starts
  // and the child joins it between fork and exec (launcher.hpp), so every
  // process it ever starts is found by cleanup, however it detaches.
  mem_group group;
  std::optional<std::uint64_t> cap;
  if (o.ram_bytes && *o.ram_bytes > 0)
    cap = o.ram_bytes;
  auto& probes = *st.seams.probes;
  if (setup.memcap.mode != memcap_mode::watchdog) {
    // A standby cq-shim already in a group of its own takes the start where
    // one is ready (ADR 0048); else a group is made and a shim started.
    if (auto warm = st.seams.processes->claim_standby(setup.memcap, o.allocation, cap, setup.shim))
      group = *warm;
    else if (auto g = probes.create_group(setup.memcap, o.allocation, cap); g)
      group = *g;
    else {
      refuse_launch(self, o, req.log_path, fmt::format("launch failed: {}", g.error().message));
      return std::nullopt;
    }
  }
  // Why this attempt differs from an earlier one, before its own output.
  if (o.previous)
    if (auto ap = disk_of(self).append(req.log_path, fmt::format("cq-node: {}\n", *o.previous));
        !ap)
      spdlog::warn("allocation {}: cannot write to its output: {}", o.allocation,
                   ap.error().message);
  auto started_wall = wall_now_ms(self);
  alloc_record rec;
  rec.allocation = o.allocation;
  rec.job = o.job;
  rec.attempt = o.attempt;
  rec.started_ms = started_wall;
  rec.argv = o.argv;
  rec.cwd = o.cwd;
  rec.lanes = o.lanes.value_or(bus::string_list{});
  rec.ram_bytes = o.ram_bytes;
  rec.timeout_ms = o.timeout_ms;
  rec.vram_bytes = o.vram_bytes;
  rec.mem_mode = to_string(group.mode);
  rec.cgroup = group.dir.string();
  rec.shim = !setup.shim.empty();
  // A standby's pid is known now: the record names the leader before it
  // runs the job (recovery finds it by this, not by a marker, ADR 0058).
  if (auto known = st.seams.processes->standby_leader(group)) {
    rec.pid = known->pid;
    rec.start_ticks = known->start_ticks;
  }
  // Its pid and start time mean something only within this boot.
  rec.boot = st.seams.processes->boot_id();
  // SPEC section 10: the workload starts only once its record is durable,
  // so a restarted cq-node always finds (and re-adopts or reports) it. The
  // record is written once, never replaced: a crash before its sync leaves
  // at worst an unreadable alloc.json, which recovery takes for a missing
  // one: the start never launched, and is reported refused (recovery.cpp).
  // The record and the directories this start made are synced after the
  // records of its group, not one by one as they were made: a journaling
  // file system commits them all together (ADRs 0045 and 0068,
  // start_allocations).
  req.shim = setup.shim;
  req.status_path = dir / "status";
  prepared_start p{&o, dir, std::move(req), group, cap};
  if (auto w = disk_of(self).write_once_later(dir / "alloc.json", json_text(rec) + "\n",
                                              st.start_files, st.start_syncs);
      !w) {
    unlaunched(self, p, w.error().message);
    return std::nullopt;
  }
  return p;
}

/// Launches prepared start `p`, whose record is durable, and supervises it.
void launch_prepared(daemon_ptr self, prepared_start& p) {
  auto& st = self->state;
  auto& setup = st.setup;
  auto& o = *p.order;
  auto& req = p.req;
  auto& group = p.group;
  auto& probes = *st.seams.probes;
  auto started = now_ms(self);
  auto leader = st.seams.processes->launch(req, group);
  if (!leader) {
    (void)probes.remove_group(group);
    refuse_launch(self, o, req.log_path, fmt::format("launch failed: {}", leader.error().message));
    return;
  }
  // Supervised before anything else can fail.
  supervised s;
  s.allocation = o.allocation;
  s.job = o.job;
  s.attempt = o.attempt;
  s.leader = *leader;
  s.started_ms = started;
  s.lanes = o.lanes.value_or(bus::string_list{});
  s.ram_cap = p.cap;
  s.group = group;
  if (o.timeout_ms && *o.timeout_ms > 0)
    s.timeout_at_ms =
        started + static_cast<std::int64_t>(std::min<std::uint64_t>(*o.timeout_ms, max_timeout_ms));
  supervise(self, s);
  if (!s.lanes.empty())
    setup.gpu->launched(o.allocation, leader->pid);
  // The leader's pid matters only while this machine stays up (a power loss
  // ends the workload too), so it is written without a sync, beside the
  // durable record rather than over it. Without it a restarted cq-node
  // finds the leader by its marker.
  if (auto w = disk_of(self).write_volatile(
          p.dir / "leader", fmt::format("{} {}\n", leader->pid, leader->start_ticks));
      !w)
    spdlog::error("allocation {}: {} (the running workload is found by its marker after a "
                  "restart)",
                  o.allocation, w.error().message);
  spdlog::info("allocation {} (job {} attempt {}): started pid {}: {}", o.allocation, o.job,
               o.attempt, leader->pid, fmt::join(o.argv, " "));
  queue_started(self, o.allocation, o.job);
}

} // namespace

void start_allocations(daemon_ptr self, const std::vector<start_item>& starts) {
  auto& st = self->state;
  std::vector<prepared_start> ready;
  ready.reserve(starts.size());
  for (auto& s : starts)
    if (auto p = prepare_start(self, *s.order, s.dir))
      ready.push_back(std::move(*p));
  // SPEC section 10: a workload starts only once its record is durable. The
  // group's records and its directories are synced together, each once:
  // shared parents (allocations/, jobs/) once for the group (ADR 0068), all
  // of them side by side (ADR 0077). A sync that failed is not tried again
  // (seams.hpp): no start of the group launches, and each refusal's report
  // is persisted in the outbox.
  if (starts.size() > 1)
    spdlog::debug("{} start orders as one group: {} records to sync", starts.size(), ready.size());
  auto w = disk_of(self).sync_together(st.start_files, st.start_syncs);
  auto failed = std::exchange(st.group_unsynced, std::string());
  if (!w)
    failed = w.error().message;
  for (auto& p : ready) {
    if (failed.empty()) {
      launch_prepared(self, p);
      continue;
    }
    st.start_unsynced = true;
    unlaunched(self, p, failed);
  }
  // The refusals above found no directory left to sync (sync_together
  // clears them, failed or not): what they set concerns this group alone.
  st.group_unsynced.clear();
}

/// The start report, in memory only (no fsync on a job's start path):
/// alloc.json is the start's durable record, and a restarted daemon queues
/// the report again for every allocation it re-adopts (recovery.cpp). A
/// coordinator that already has it ignores the repeat.
void queue_started(daemon_ptr self, const std::string& allocation, const std::string& job) {
  bus::report_req r;
  r.kind = "started";
  r.allocation = allocation;
  r.job = job;
  queue_report(self, std::move(r), false);
}

void supervise(daemon_ptr self, supervised s) {
  auto& st = self->state;
  supervisor_deps deps{st.seams.processes,
                       st.seams.probes,
                       st.seams.disk,
                       caf::actor_cast<daemon_actor>(self),
                       st.watchdog,
                       st.setup.alloc_root,
                       st.cfg().identity.cleanup};
  registry_entry entry;
  auto id = s.allocation;
  entry.supervisor = spawn_supervisor(self->system(), std::move(deps), std::move(s));
  self->link_to(entry.supervisor);
  st.registry[id] = std::move(entry);
}

std::string ack(daemon_ptr self, std::uint64_t id) {
  return bus::encode_reply(id, bus::order_ack{self->state.boot_ms, self->state.beat});
}

std::optional<bus::start_order> start_of(const bus::frame& f) {
  if (f.is_reply || f.op != bus::start_order::op)
    return std::nullopt;
  auto order = bus::decode_node_order(f);
  auto* start = order ? std::get_if<bus::start_order>(&*order) : nullptr;
  if (!start)
    return std::nullopt;
  return std::move(*start);
}

std::vector<std::string> on_starts(daemon_ptr self, const std::vector<numbered_start>& orders) {
  auto& st = self->state;
  std::vector<std::string> replies(orders.size());
  std::vector<start_item> starts;
  for (std::size_t i = 0; i < orders.size(); ++i) {
    auto id = orders[i].first;
    auto& o = *orders[i].second;
    if (!is_valid_id(o.allocation)) {
      replies[i] = bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
      continue;
    }
    if (!is_valid_id(o.job)) {
      replies[i] = bus::encode_error(id, errc::invalid_argument, "job: not a valid id");
      continue;
    }
    auto dir = st.setup.alloc_root / o.allocation;
    if (st.registry.count(o.allocation) || disk_of(self).exists(dir)) {
      spdlog::debug("start {}: already known, ignored", o.allocation);
      continue;
    }
    // Synced with the group's other directories, after its record (launch.cpp).
    if (auto made = disk_of(self).make_dirs_later(dir, st.start_syncs); !made) {
      spdlog::error("start {}: {}", o.allocation, made.error().message);
      replies[i] = bus::encode_error(id, errc::internal, made.error().message);
      continue;
    }
    starts.push_back({&o, std::move(dir)});
  }
  start_allocations(self, starts);
  for (std::size_t i = 0; i < orders.size(); ++i)
    if (replies[i].empty())
      replies[i] = ack(self, orders[i].first);
  return replies;
}

static_assert(bus::limits::terminal_input_bytes + 2 * terminal_header + 4 <= terminal_write_max);

/// cq run --pty: what was typed, and the window size, into the allocation's
/// terminal FIFO, which its cq-shim reads (terminal_frame.hpp).
std::string write_terminal(daemon_ptr self, std::uint64_t id, const bus::terminal_order& o) {
  if (!is_valid_id(o.allocation))
    return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
  constexpr std::uint64_t max_side = 0xffff;
  if (o.data.size() > bus::limits::terminal_input_bytes ||
      (o.rows && (*o.rows == 0 || *o.rows > max_side)) ||
      (o.cols && (*o.cols == 0 || *o.cols > max_side)) || o.rows.has_value() != o.cols.has_value())
    return bus::encode_error(id, errc::invalid_argument,
                             fmt::format("terminal: at most {} bytes, rows and cols 1 to {}",
                                         bus::limits::terminal_input_bytes, max_side));
  auto frames = terminal_frames(o.data, static_cast<std::uint16_t>(o.rows.value_or(0)),
                                static_cast<std::uint16_t>(o.cols.value_or(0)));
  if (frames.empty())
    return ack(self, id);
  auto fifo = self->state.setup.alloc_root / o.allocation / terminal_fifo;
  if (auto w = self->state.seams.processes->write_terminal(fifo, frames); !w)
    return bus::encode_error(id, w.error().code, w.error().message);
  return ack(self, id);
}

} // namespace cq::node
