// The node daemon actor: heartbeats, the coordinator's orders and replies,
// approval, holds and the outbox (daemon.hpp numbers the node's invariants).
//
// It owns whatever a heartbeat reports, so that one message handler sees it
// whole: the registry of supervised allocations, the outbox (an exit leaves
// the registry and enters the outbox in one step, so no heartbeat misses
// it), the holds and the GPU side. The start path is launch.cpp, recovery at
// start recovery.cpp. Timed work (heartbeat, report resends, GPU telemetry,
// leftover cgroups) runs on ticks armed for the earliest deadline.
#include "node/actors/daemon_state.hpp"

#include "cq/bus/codec.hpp"
#include "cq/node/files.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cq::node {

namespace {

/// Reports (re)sent per tick.
constexpr std::size_t max_reports_per_tick = 64;
/// Retry delay after a send that found no connection.
constexpr std::int64_t send_retry_ms = 100;
/// A request without a reply after this long is forgotten (its report is resent anyway).
constexpr std::int64_t pending_reply_ttl_ms = 30'000;
/// Longest grace period a stop order may ask for.
constexpr std::uint64_t max_grace_ms = 24ull * 3600 * 1000;
/// How often an unauthenticated heartbeat is logged again while it persists.
constexpr std::int64_t auth_error_log_every_ms = 30'000;

/// Errors after which a report is kept and re-sent rather than dropped.
/// (already_exists: another daemon speaks for this node right now; once it
/// stops heartbeating, this one takes over and its reports go through.)
bool is_retryable(errc code) {
  return code == errc::internal || code == errc::unavailable || code == errc::unauthenticated ||
         code == errc::already_exists;
}

// ---- sending ----------------------------------------------------------------

void send_frame(daemon_ptr self, std::string bytes, std::uint64_t tag = 0) {
  self->state.seams.link->send(std::move(bytes), tag);
}

template <class Req>
void send_request(daemon_ptr self, const Req& req, request_kind kind, std::uint64_t seq) {
  auto& st = self->state;
  auto id = st.next_request_id++;
  st.pending[id] = pending_request{kind, seq, now_ms(self)};
  send_frame(self, bus::encode_request(id, st.cfg().identity.token, req), id);
}

void send_heartbeat(daemon_ptr self) {
  auto& st = self->state;
  auto& cfg = st.cfg();
  bus::heartbeat_req hb;
  if (auto m = sample_memory(self)) {
    hb.mem_total_bytes = m->total_bytes;
    hb.mem_available_bytes = m->available_bytes;
  }
  hb.cpus = cfg.identity.capacity.cpus.value_or(st.seams.probes->cpus());
  auto& pol = cfg.identity.policy;
  hb.ram_reserve_bytes = pol.ram_reserve_bytes;
  hb.ram_floor_bytes = pol.ram_floor_bytes;
  hb.vram_cap_bytes = pol.vram_cap_bytes;
  for (auto& [id, e] : st.registry)
    hb.allocations.push_back(id);
  // An allocation is held until the coordinator acknowledged its exit: a
  // heartbeat that stops listing one tells the coordinator it is lost.
  auto boxed = st.setup.box->allocations();
  for (auto& id : boxed)
    if (!st.registry.count(id))
      hb.allocations.push_back(id);
  // So is one whose exit record is being written (its exit not yet in the
  // outbox, though an unacknowledged start report may be).
  for (auto& id : st.recording)
    if (std::find(boxed.begin(), boxed.end(), id) == boxed.end())
      hb.allocations.push_back(id);
  std::vector<bus::alloc_usage> usage;
  for (auto& u : st.usage)
    if (st.registry.count(u.allocation))
      usage.push_back({u.allocation, u.rss_bytes, 0});
  hb.usage = std::move(usage);
  hb.daemon = st.setup.daemon_id;
  hb.boot_ms = st.boot_ms;
  hb.beat = ++st.beat;
  hb.wall_ms = wall_now_ms(self);
  hb.mem_cap_mode = std::string(to_string(st.setup.memcap.mode));
  hb.holds = st.setup.holds->all();
  if (!cfg.run_as.empty()) {
    bus::string_list ids;
    for (auto& [id, c] : cfg.run_as)
      ids.push_back(id);
    hb.run_as = std::move(ids);
  }
  st.setup.gpu->fill_heartbeat(hb);
  send_request(self, hb, request_kind::heartbeat, 0);
  st.next_heartbeat_ms = now_ms(self) + cfg.heartbeat_ms;
}

void send_due_reports(daemon_ptr self, std::int64_t now) {
  auto& st = self->state;
  auto& box = *st.setup.box;
  for (auto* r : box.due(now, max_reports_per_tick)) {
    auto seq = r->seq;
    auto req = *r;
    req.boot_ms = st.boot_ms;
    req.beat = st.beat;
    box.schedule(seq, now + st.cfg().report_resend_ms);
    send_request(self, req, request_kind::report, seq);
  }
}

// ---- timers -------------------------------------------------------------------

/// The GPU side's stops (a latched fault, a VRAM cap) go to the supervisors.
void apply_gpu_stops(daemon_ptr self, std::int64_t now) {
  auto& st = self->state;
  for (auto& s : st.setup.gpu->tick(now, st.cfg().heartbeat_ms)) {
    auto it = st.registry.find(s.allocation);
    if (it == st.registry.end())
      continue;
    auto reason = bus::reason::fault;
    bus::parse(s.reason, reason);
    self->send(it->second.supervisor, gpu_stop_atom::value, reason, s.detail);
  }
}

void on_timers(daemon_ptr self) {
  auto& st = self->state;
  auto now = now_ms(self);
  apply_gpu_stops(self, now);
  if (now >= st.next_heartbeat_ms)
    send_heartbeat(self);
  send_due_reports(self, now);
  sweep_if_due(self, now);
  auto& holds = *st.setup.holds;
  if (now >= st.next_leftover_ms && !holds.leftover_cgroups().empty()) {
    // cgroups of released holds that could not be removed at the time.
    auto dirs = holds.leftover_cgroups();
    for (auto& dir : dirs)
      if (remove_leftover_group(self, dir)) {
        spdlog::info("leftover cgroup {} removed", dir);
        holds.remove_leftover(dir);
      }
    st.next_leftover_ms = now + std::max<std::int64_t>(st.cfg().heartbeat_ms, 1000);
  }
  if (!st.pending.empty() && now >= st.next_purge_ms) {
    std::erase_if(st.pending,
                  [&](auto& kv) { return kv.second.sent_ms + pending_reply_ttl_ms < now; });
    st.next_purge_ms = now + pending_reply_ttl_ms / 2;
  }
}

std::int64_t next_deadline(daemon_ptr self) {
  auto& st = self->state;
  // The expiry of unanswered requests has no wake-up of its own: it rides on
  // the next one (at most a heartbeat later). Its own timer, armed with each
  // request, fired long after the reply had come: a wake-up for nothing
  // after every heartbeat where heartbeats are far apart (cq-sim's studies).
  auto next = std::min({st.next_heartbeat_ms, st.setup.box->next_due_ms(),
                        st.setup.gpu->next_deadline(), retention_due(self)});
  if (!st.setup.holds->leftover_cgroups().empty())
    next = std::min(next, st.next_leftover_ms);
  return next;
}

// ---- replies --------------------------------------------------------------------

/// Replaces <state>/status with `text` when it changes: how the coordinator
/// last answered a heartbeat ("approved", "pending approval", "refused: ...").
/// `cq-node install` waits on it; nothing else reads it.
void tell_status(daemon_ptr self, const std::string& text) {
  auto& st = self->state;
  if (st.status_told == text)
    return;
  if (auto w = disk_of(self).write_atomic(st.cfg().state_dir / "status", text + "\n"); !w)
    spdlog::warn("cannot write {}: {}", (st.cfg().state_dir / "status").string(),
                 w.error().message);
  else
    st.status_told = text;
}

void on_heartbeat_reply(daemon_ptr self, const bus::frame& f) {
  auto& st = self->state;
  auto& cfg = st.cfg();
  auto now = now_ms(self);
  if (!f.ok) {
    if (f.error.code == errc::unauthenticated || f.error.code == errc::already_exists)
      tell_status(self, fmt::format("refused: {}: {}", to_string(f.error.code), f.error.message));
    if (f.error.code == errc::unauthenticated) {
      if (now - st.auth_error_logged_ms >= auth_error_log_every_ms) {
        spdlog::error("THE COORDINATOR REJECTS THIS NODE'S TOKEN (unauthenticated: {}). "
                      "Re-join with `cq-node --join ENDPOINT CODE NAME`; retrying meanwhile",
                      f.error.message);
        st.auth_error_logged_ms = now;
      }
    } else if (f.error.code == errc::already_exists) {
      if (now - st.refused_logged_ms >= auth_error_log_every_ms) {
        spdlog::error("ANOTHER cq-node SPEAKS FOR NODE '{}' ({}); this daemon gets no work "
                      "while it does (a copied node.toml? give each daemon its own invite)",
                      cfg.identity.name, f.error.message);
        st.refused_logged_ms = now;
      }
    } else {
      spdlog::warn("heartbeat refused: {}: {}", to_string(f.error.code), f.error.message);
    }
    return;
  }
  st.auth_error_logged_ms = INT64_MIN / 2;
  st.refused_logged_ms = INT64_MIN / 2;
  auto rep = bus::decode_body<bus::heartbeat_rep>(f);
  if (!rep) {
    spdlog::warn("bad heartbeat reply: {}", rep.error().message);
    return;
  }
  if (st.approved != rep->approved) {
    if (rep->approved)
      spdlog::info("node '{}' is approved", cfg.identity.name);
    else
      spdlog::warn("node '{}' is pending approval (cq node approve {})", cfg.identity.name,
                   cfg.identity.name);
    st.approved = rep->approved;
  }
  tell_status(self, rep->approved ? "approved" : "pending approval");
}

void on_report_reply(daemon_ptr self, const bus::frame& f, std::uint64_t seq) {
  auto& box = *self->state.setup.box;
  if (!f.ok && is_retryable(f.error.code)) {
    spdlog::warn("report {} not accepted yet ({}: {}); will re-send", seq, to_string(f.error.code),
                 f.error.message);
    return;
  }
  std::string exited; // its exit is marked, or its directory goes, once out of the box
  if (auto* r = box.get(seq); r && r->kind == "exited" && is_valid_id(r->allocation))
    exited = r->allocation;
  if (!f.ok) {
    spdlog::error("the coordinator refused report {} ({}: {}); dropping it", seq,
                  to_string(f.error.code), f.error.message);
  } else if (auto rep = bus::decode_body<bus::report_rep>(f); !rep || rep->seq != seq) {
    spdlog::warn("report {} acknowledged with an unexpected body", seq);
  }
  if (box.remove(seq) && f.ok)
    spdlog::debug("report {} acknowledged", seq);
  if (!exited.empty())
    note_reported(self, exited, f.ok);
}

void handle_reply(daemon_ptr self, const bus::frame& f) {
  auto& st = self->state;
  auto it = st.pending.find(f.id);
  if (it == st.pending.end()) {
    spdlog::debug("reply {} matches no pending request (late or duplicate)", f.id);
    return;
  }
  auto req = it->second;
  st.pending.erase(it);
  if (req.kind == request_kind::heartbeat)
    on_heartbeat_reply(self, f);
  else
    on_report_reply(self, f, req.seq);
}

// ---- orders ---------------------------------------------------------------------

std::string on_order(daemon_ptr self, std::uint64_t id, const bus::start_order& o) {
  return on_starts(self, {{id, &o}}).front();
}

/// A stop is durable before it is acknowledged (control/stop holds the kill
/// deadline, so a restarted cq-node still kills a job that ignores TERM). A
/// stop for an allocation this node never saw leaves a tombstone (its dir
/// with exit.json) so that a start arriving later is ignored, and reports it
/// ended cancelled without starting.
std::string on_order(daemon_ptr self, std::uint64_t id, const bus::stop_order& o) {
  auto& st = self->state;
  if (!is_valid_id(o.allocation))
    return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
  auto dir = st.setup.alloc_root / o.allocation;
  auto it = st.registry.find(o.allocation);
  if (it == st.registry.end()) {
    if (disk_of(self).exists(dir)) {
      spdlog::debug("stop {}: not running, nothing to do", o.allocation);
      return ack(self, id);
    }
    if (auto made = disk_of(self).make_dirs(dir); !made)
      return bus::encode_error(id, errc::internal, made.error().message);
    spdlog::info("allocation {}: stopped before it started (no start order came)", o.allocation);
    finish(self, local_end(o.allocation, "", 0, std::nullopt, bus::reason::cancelled,
                           "stopped before it started: the start order never reached this node"));
    return ack(self, id);
  }
  auto& entry = it->second;
  auto wall = wall_now_ms(self);
  auto grace = static_cast<std::int64_t>(std::min(o.grace_ms, max_grace_ms));
  auto kill_at_wall = wall + grace;
  if (entry.stop_kill_at_wall_ms && *entry.stop_kill_at_wall_ms < kill_at_wall)
    kill_at_wall = *entry.stop_kill_at_wall_ms;
  nlohmann::json rec = {{"requested_ms", wall}, {"kill_at_ms", kill_at_wall}};
  if (auto made = disk_of(self).make_dirs(dir / "control"); !made)
    return bus::encode_error(id, errc::internal, made.error().message);
  if (auto w = disk_of(self).write_atomic(dir / "control" / "stop", to_text(rec)); !w)
    return bus::encode_error(id, errc::internal, w.error().message); // the coordinator re-sends
  entry.stop_kill_at_wall_ms = kill_at_wall;
  st.setup.gpu->stopped_elsewhere(o.allocation);
  self->send(entry.supervisor, stop_atom::value, now_ms(self) + (kill_at_wall - wall));
  return ack(self, id);
}

/// Records the order (control/yield-ordered: only then is exit 6 a
/// checkpoint), then creates the allocation's yield file (CQ_YIELD_FILE);
/// the job decides when to checkpoint and exit 6.
std::string on_order(daemon_ptr self, std::uint64_t id, const bus::yield_order& o) {
  auto& st = self->state;
  if (!is_valid_id(o.allocation))
    return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
  auto it = st.registry.find(o.allocation);
  if (it == st.registry.end())
    return bus::encode_error(id, errc::not_found,
                             fmt::format("allocation {} is not running here", o.allocation));
  auto control = st.setup.alloc_root / o.allocation / "control";
  if (auto made = disk_of(self).make_dirs(control); !made)
    return bus::encode_error(id, errc::internal, made.error().message);
  if (auto w = disk_of(self).write_atomic(control / "yield-ordered",
                                          fmt::format("{}\n", wall_now_ms(self)));
      !w)
    return bus::encode_error(id, errc::internal, w.error().message);
  self->send(it->second.supervisor, yield_atom::value);
  if (auto w = disk_of(self).append(control / "yield", ""); !w)
    return bus::encode_error(id, errc::internal,
                             fmt::format("cannot create the yield file: {}", w.error().message));
  spdlog::info("allocation {}: yield requested", o.allocation);
  return ack(self, id);
}

/// Removes exactly the hold `o.hold`; an unknown or stale id is not_found.
/// The cgroup the hold kept is emptied (its processes belong to the
/// allocation) and removed; if the kernel refuses, removal is retried later.
std::string on_order(daemon_ptr self, std::uint64_t id, const bus::release_order& o) {
  auto& holds = *self->state.setup.holds;
  std::string group;
  if (!holds.release(o.hold, &group))
    return bus::encode_error(id, errc::not_found, fmt::format("no hold {} on this node", o.hold));
  spdlog::info("hold {} released", o.hold);
  if (!group.empty() && !remove_leftover_group(self, group)) {
    holds.add_leftover(group);
    spdlog::warn("hold {}: its cgroup {} is not empty yet; removal is retried", o.hold, group);
  }
  return ack(self, id);
}

/// Archives KERNEL-FAULT.json (with the reason and who cleared it) and clears the latch.
std::string on_order(daemon_ptr self, std::uint64_t id, const bus::clear_fault_order& o) {
  auto r = self->state.setup.gpu->clear_fault(o.reason, o.by, wall_now_ms(self));
  if (!r)
    return bus::encode_error(id, r.error().code, r.error().message);
  heartbeat_now(self); // tell the coordinator at once
  return ack(self, id);
}

std::string on_order(daemon_ptr self, std::uint64_t id, const bus::read_log_order& o) {
  if (!is_valid_id(o.allocation))
    return bus::encode_error(id, errc::invalid_argument, "allocation: not a valid id");
  auto dir = self->state.setup.alloc_root / o.allocation;
  if (!disk_of(self).is_directory(dir))
    return bus::encode_error(id, errc::not_found,
                             fmt::format("allocation {} is unknown on this node", o.allocation));
  bus::log_chunk chunk;
  chunk.next_offset = o.offset;
  chunk.eof = true;
  auto want = std::min<std::uint64_t>(o.max_bytes, bus::limits::log_chunk_bytes);
  auto got = disk_of(self).read_at(dir / "output.log", o.offset, static_cast<std::size_t>(want));
  if (!got) {
    if (got.error().code == errc::not_found)
      return bus::encode_reply(id, chunk); // nothing written yet
    return bus::encode_error(id, errc::internal,
                             fmt::format("cannot read the log: {}", got.error().message));
  }
  chunk.data = std::move(got->data);
  chunk.next_offset = o.offset + chunk.data.size();
  chunk.eof = chunk.next_offset >= got->size;
  return bus::encode_reply(id, chunk);
}

std::string on_order(daemon_ptr self, std::uint64_t id, const bus::terminal_order& o) {
  return write_terminal(self, id, o);
}

std::string on_order(daemon_ptr self, std::uint64_t id, const bus::forget_order& o) {
  return forget_allocations(self, id, o);
}

/// Invariant 4: no order, however malformed, stops the daemon; every
/// decodable order gets exactly one reply.
void handle_order(daemon_ptr self, const bus::frame& f) {
  auto order = bus::decode_node_order(f);
  std::string reply;
  if (!order) {
    spdlog::warn("refused order {} ({}): {}", f.id, f.op, order.error().message);
    reply = bus::encode_error(f.id, order.error().code, order.error().message);
  } else {
    try {
      reply = std::visit([&](const auto& o) { return on_order(self, f.id, o); }, *order);
    } catch (const std::exception& e) {
      // Nothing below should throw; if something does, the daemon survives.
      spdlog::error("order {} ({}) failed: {}", f.id, f.op, e.what());
      reply = bus::encode_error(f.id, errc::internal, e.what());
    }
  }
  send_frame(self, std::move(reply));
}

/// Frame `bytes` decoded, or nullopt: without a decodable envelope we cannot
/// tell an order from a reply, so an error reply could confuse the
/// coordinator: it is logged and dropped.
std::optional<bus::frame> decoded(std::string_view bytes) {
  std::uint64_t seen = 0;
  auto f = bus::decode_frame(bytes, seen);
  if (f)
    return std::move(*f);
  spdlog::warn("dropped a malformed frame from the coordinator (id {}): {}", seen,
               f.error().message);
  return std::nullopt;
}

void handle_frame(daemon_ptr self, const bus::frame& f) {
  if (f.is_reply)
    handle_reply(self, f);
  else
    handle_order(self, f);
}

/// Invariant 14: the frames that waited together are read before any is
/// acted on: their stop orders at once, the rest into the backlog, which is
/// worked off one frame per message in arrival order, a run of start orders
/// as one group (drain_starts; a high-priority tick overtakes the backlog
/// between two messages: a burst of starts does not hold up the heartbeat).
/// A stop that queued behind its start (the daemon was paused, or the link
/// was down) so leaves a tombstone that the start then finds: it never
/// launches.
void handle_frames(daemon_ptr self, std::vector<std::string>& frames) {
  auto& st = self->state;
  for (auto& bytes : frames) {
    std::uint64_t seen = 0;
    auto f = bus::decode_frame(bytes, seen);
    if (f && !f->is_reply && f->op == bus::stop_order::op)
      handle_order(self, *f);
    else
      st.backlog.push_back(std::move(bytes));
  }
  if (!st.backlog.empty() && !st.draining) {
    st.draining = true;
    self->send(self, drain_atom::value);
  }
}

/// The most start orders handled as one group: a group's first launch waits
/// for all of its records, and a tick (a heartbeat) for the whole group.
constexpr std::size_t max_start_group = 32;

/// The start orders at the front of the backlog, as one group (ADR 0068).
void drain_starts(daemon_ptr self, std::uint64_t id, bus::start_order first) {
  auto& st = self->state;
  std::vector<std::pair<std::uint64_t, bus::start_order>> group;
  group.emplace_back(id, std::move(first));
  while (!st.backlog.empty() && group.size() < max_start_group) {
    std::uint64_t seen = 0;
    auto f = bus::decode_frame(st.backlog.front(), seen);
    auto next = f ? start_of(*f) : std::nullopt;
    if (!next)
      break; // decoded again when drain_one takes it
    group.emplace_back(f->id, std::move(*next));
    st.backlog.pop_front();
  }
  std::vector<numbered_start> orders;
  for (auto& [id, o] : group)
    orders.emplace_back(id, &o);
  std::vector<std::string> replies;
  try {
    replies = on_starts(self, orders);
  } catch (const std::exception& e) {
    // Nothing below should throw; if something does, the daemon survives.
    spdlog::error("start orders failed: {}", e.what());
    replies.clear();
    for (auto& [id, o] : group)
      replies.push_back(bus::encode_error(id, errc::internal, e.what()));
  }
  for (auto& r : replies)
    send_frame(self, std::move(r));
}

void drain_one(daemon_ptr self) {
  auto& st = self->state;
  st.draining = false;
  if (st.backlog.empty())
    return;
  auto bytes = std::move(st.backlog.front());
  st.backlog.pop_front();
  if (auto f = decoded(bytes)) {
    if (auto start = start_of(*f))
      drain_starts(self, f->id, std::move(*start));
    else
      handle_frame(self, *f);
  }
  if (!st.backlog.empty()) {
    st.draining = true;
    self->send(self, drain_atom::value);
  }
}

/// A send found no connection: try again soon rather than at the next interval.
void on_unsent(daemon_ptr self, std::uint64_t tag) {
  auto& st = self->state;
  auto it = st.pending.find(tag);
  if (it == st.pending.end())
    return; // a reply, or already answered
  auto req = it->second;
  st.pending.erase(it);
  auto retry_at = now_ms(self) + send_retry_ms;
  if (req.kind == request_kind::heartbeat)
    st.next_heartbeat_ms = std::min(st.next_heartbeat_ms, retry_at);
  else
    st.setup.box->schedule(req.seq, retry_at);
}

/// A supervisor's allocation ended: holds for what remains, then the exit is
/// recorded and reported; the registry lets it go in the same step as the
/// recording set takes it (recorder.cpp).
void on_finished(daemon_ptr self, const alloc_end& end) {
  auto& st = self->state;
  st.registry.erase(end.allocation);
  if (!end.hold_reason.empty()) {
    bus::string_list lanes = end.lanes;
    if (lanes.empty())
      lanes.push_back("");
    for (auto& lane : lanes) {
      auto hid = st.setup.holds->add(lane, end.allocation, end.hold_reason, wall_now_ms(self),
                                     end.group_dir);
      spdlog::error("HOLD {} on {}: {}. Check the machine, then `cq release --hold {}`", hid,
                    lane.empty() ? "the node" : "lane " + lane, end.hold_reason, hid);
    }
    // The hold reaches the coordinator before the exit's report (one link,
    // in order): the exit frees the allocation's resources there at once
    // (docs/adr/0057), and the hold keeps what remains of them.
    heartbeat_now(self);
  }
  finish_recorded(self, end);
}

daemon_actor::behavior_type daemon_behavior(daemon_ptr self, std::shared_ptr<node_setup> setup,
                                            node_seams seams) {
  auto& st = self->state;
  st.setup = std::move(*setup);
  st.seams = seams;
  st.steady0 = self->clock().now();
  st.boot_ms = next_boot_ms(self, seams.epoch_ms);
  auto& cfg = st.cfg();
  st.watchdog = spawn_watchdog(
      self->system(), seams.processes, seams.probes, caf::actor_cast<daemon_actor>(self),
      static_cast<std::int64_t>(cfg.identity.memory.sample_ms), cfg.heartbeat_ms);
  self->link_to(st.watchdog);
  st.recorder = spawn_recorder(self->system(), seams.disk);
  self->link_to(st.recorder);
  st.remover = spawn_remover(self->system(), seams.disk);
  self->link_to(st.remover);
  empty_trash(self);
  st.setup.gpu->set_wall_clock([self] { return wall_now_ms(self); });
  st.setup.gpu->start(now_ms(self));
  readopt(self);
  spdlog::info("cq-node '{}' running: coordinator {}, state {}, {} pending report(s)",
               cfg.identity.name, cfg.identity.endpoint, cfg.state_dir.string(),
               st.setup.box->size());
  arm(self);
  return {
      [=](frame_atom, std::vector<std::string>& frames) {
        handle_frames(self, frames);
        arm(self);
      },
      [=](drain_atom) {
        drain_one(self);
        arm(self);
      },
      [=](unsent_atom, std::uint64_t tag) {
        on_unsent(self, tag);
        arm(self);
      },
      [=](finished_atom, const alloc_end& end) {
        on_finished(self, end);
        arm(self);
      },
      [=](usage_atom, std::vector<usage_sample>& usage) { self->state.usage = std::move(usage); },
      [=](tick_atom, std::int64_t at) {
        self->state.armed.erase(at);
        on_timers(self);
        arm(self);
      },
  };
}

} // namespace

// ---- shared with launch.cpp and recovery.cpp ------------------------------------

alloc_end local_end(std::string id, std::string job, std::uint64_t attempt,
                    std::optional<std::int64_t> exit_code, bus::reason reason, std::string why) {
  alloc_end e;
  e.allocation = std::move(id);
  e.job = std::move(job);
  e.attempt = attempt;
  e.exit_code = exit_code;
  e.reason = reason;
  e.detail = std::move(why);
  return e;
}

std::int64_t now_ms(daemon_ptr self) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             self->clock().now().time_since_epoch())
      .count();
}

std::int64_t wall_now_ms(daemon_ptr self) {
  auto& st = self->state;
  auto elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(self->clock().now() - st.steady0)
          .count();
  if (st.seams.clock_rate != 1.0)
    elapsed = static_cast<std::int64_t>(static_cast<double>(elapsed) * st.seams.clock_rate);
  return st.seams.epoch_ms + elapsed;
}

std::optional<nlohmann::json> read_json(node_disk& disk, const std::filesystem::path& p) {
  auto text = disk.read(p, 1 << 20);
  if (!text)
    return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return std::nullopt;
  return j;
}

std::string to_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<mem_info> sample_memory(daemon_ptr self) {
  auto& cap = self->state.cfg().identity.capacity;
  std::optional<mem_info> measured;
  if (!cap.mem_total_bytes || !cap.mem_available_bytes)
    measured = self->state.seams.probes->memory();
  return apply_capacity(measured, cap.mem_total_bytes, cap.mem_available_bytes);
}

void heartbeat_now(daemon_ptr self) {
  self->state.next_heartbeat_ms = 0;
}

void arm(daemon_ptr self) {
  auto& st = self->state;
  auto next = next_deadline(self);
  if (next == INT64_MAX || (!st.armed.empty() && *st.armed.begin() <= next))
    return;
  st.armed.insert(next);
  auto delay = std::max<std::int64_t>(0, next - now_ms(self));
  // High priority: a tick overtakes the frames already in the mailbox, so a
  // flood of orders cannot hold up the heartbeat that keeps this node alive
  // (ADR 0002). One due now (a report just queued) is a send: a delayed_send
  // goes through CAF's clock thread even for no delay (ADR 0078).
  if (delay == 0)
    self->send<caf::message_priority::high>(self, tick_atom::value, next);
  else
    self->delayed_send<caf::message_priority::high>(self, std::chrono::milliseconds(delay),
                                                    tick_atom::value, next);
}

void queue_report(daemon_ptr self, bus::report_req r, bool persist) {
  auto& st = self->state;
  r.at_ms = wall_now_ms(self);
  if (auto added = st.setup.box->add(r, now_ms(self), persist); !added)
    spdlog::error("report {} for allocation {} is not persisted: {}", r.seq, r.allocation,
                  added.error().message);
}

daemon_actor spawn_daemon(caf::actor_system& sys, node_setup setup, node_seams seams) {
  return sys.spawn(daemon_behavior, std::make_shared<node_setup>(std::move(setup)), seams);
}

} // namespace cq::node
