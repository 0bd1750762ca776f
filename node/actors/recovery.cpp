// Restart safety (daemon.hpp, invariants 2 and 11). Every allocation dir with
// alloc.json and no exit.json:
//  - whose exit report is still in the outbox ended before the restart: its
//    exit.json is written from the report (a crash came between the two);
//  - is re-adopted when its leader is still the process that was launched
//    (same pid and start time, from the `leader` file written after the
//    launch without a sync, or alloc.json's: a standby cq-shim's, known
//    before the launch (ADR 0058), or in records of earlier versions;
//    without either the leader is found by its marker), keeping its stop
//    request, kill deadline and yield order (control/), unless alloc.json
//    names another boot of the machine (a pid and a start time name a
//    process within one boot only);
//  - else ended while cq-node was down and is finished from the shim's
//    status file (or as lost when there is none).
// An exit.json neither acknowledged (reported) nor queued is reported again.
// A directory whose alloc.json is missing, empty or unreadable is a start
// cut short: its workload was never launched (alloc.json is written once and
// synced before the launch; ADR 0045). It is ended refused (the coordinator
// starts the job again), unless something says it was launched (its leader
// file, cq-shim's status file, or a process with its marker): then its
// record was damaged after the launch, and it is left to the coordinator's
// reconciliation (it is not listed, so it is lost).
// Then this node's stale memory groups are removed (daemon.hpp, invariant 15).
//
// The daemon's clock on the wire, (boot_ms, beat), must grow across its
// restarts whatever the machine's wall clock does: the coordinator ignores a
// heartbeat not newer than one it saw from the same state dir (ADR 0019). So
// boot_ms is the wall clock at start, or one more than the last start's
// (<state>/boot) if the wall clock stepped back meanwhile (next_boot_ms).
#include "node/actors/daemon_state.hpp"
#include "node/actors/records.hpp"

#include "cq/json.hpp"
#include "cq/node/files.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace cq::node {

namespace {

/// Queues the exited report of an exit.json again.
void requeue_exit(daemon_ptr self, const std::filesystem::path& dir) {
  auto rec = read_json(disk_of(self), dir / "exit.json");
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
  queue_report(self, std::move(r), false); // exit.json stays its durable record
}

/// The `leader` file's "PID START_TICKS\n" (launch.cpp), if it is whole.
std::optional<leader_id> read_leader(node_disk& disk, const std::filesystem::path& dir) {
  auto text = disk.read(dir / "leader", 64);
  if (!text || text->empty() || text->back() != '\n')
    return std::nullopt; // missing, or cut short (it is never synced)
  std::string_view rest(*text);
  leader_id l;
  if (!parse_num(next_token(rest), l.pid) || !parse_num(next_token(rest), l.start_ticks) ||
      l.pid <= 0 || l.start_ticks == 0 || !next_token(rest).empty())
    return std::nullopt;
  return l;
}

/// Reads alloc.json into `s` (times still relative) and the boot it was
/// written in (`boot`, "" when it names none); nullopt when unreadable.
std::optional<nlohmann::json> read_record(node_disk& disk, const std::filesystem::path& dir,
                                          supervised& s, std::int64_t& started_wall,
                                          std::string& boot) {
  nlohmann::json rec;
  try {
    auto text = disk.read(dir / "alloc.json", 1 << 20);
    if (!text)
      throw std::runtime_error("cannot be read");
    rec = nlohmann::json::parse(*text);
    s.allocation = rec.at("allocation").get<std::string>();
    s.job = rec.at("job").get<std::string>();
    s.attempt = rec.at("attempt").get<std::uint64_t>();
    s.leader.pid = rec.value("pid", pid_t{0});
    started_wall = rec.at("started_ms").get<std::int64_t>();
    s.leader.start_ticks = rec.value("start_ticks", std::uint64_t{0});
    boot = rec.contains("boot") && rec["boot"].is_string() ? rec["boot"].get<std::string>() : "";
    if (auto l = read_leader(disk, dir))
      s.leader = *l;
    s.lanes = rec.value("lanes", bus::string_list{});
    if (rec.contains("ram_bytes") && !rec["ram_bytes"].is_null())
      s.ram_cap = rec["ram_bytes"].get<std::uint64_t>();
    auto mode = rec.value("mem_mode", std::string("watchdog"));
    s.group.mode = mode == "cgroup_v1"   ? memcap_mode::cgroup_v1
                   : mode == "cgroup_v2" ? memcap_mode::cgroup_v2
                                         : memcap_mode::watchdog;
    s.group.dir = rec.value("cgroup", std::string());
    if (s.group.dir.empty())
      s.group.mode = memcap_mode::watchdog;
    if (rec.contains("timeout_ms") && !rec["timeout_ms"].is_null()) {
      auto t = std::min<std::uint64_t>(rec["timeout_ms"].get<std::uint64_t>(), max_timeout_ms);
      if (t > 0)
        s.timeout_at_ms = static_cast<std::int64_t>(t); // made absolute by the caller
    }
  } catch (const std::exception& e) {
    spdlog::error("{}: unreadable ({}); this allocation is not re-adopted",
                  (dir / "alloc.json").string(), e.what());
    return std::nullopt;
  }
  return rec;
}

/// Invariant 15, after re-adoption: groups of this daemon's (named for its state
/// dir) that no re-adopted allocation and no hold owns are left from a
/// daemon that died before its cleanup; what is in them is killed and they
/// are removed (a group the kernel will not remove yet is retried later).
void remove_stale_groups(daemon_ptr self) {
  auto& st = self->state;
  auto& memcap = st.setup.memcap;
  auto& holds = *st.setup.holds;
  std::set<std::string> kept(holds.cgroups().begin(), holds.cgroups().end());
  kept.insert(holds.leftover_cgroups().begin(), holds.leftover_cgroups().end());
  for (auto& name : st.seams.probes->own_groups(memcap)) {
    auto dir = (memcap.parent / name).string();
    if (st.registry.count(allocation_of_group(memcap, name)) || kept.count(dir))
      continue;
    if (remove_leftover_group(self, dir)) {
      spdlog::info("stale cgroup {} removed (left by an earlier run of this node)", dir);
    } else {
      spdlog::warn("stale cgroup {} is not empty yet; removal is retried", dir);
      holds.add_leftover(dir);
    }
  }
}

/// Ends the start of the allocation in `dir` that a crash cut short before
/// its record was durable (see the top of this file).
void never_launched(daemon_ptr self, const std::filesystem::path& dir) {
  auto& st = self->state;
  auto allocation = dir.filename().string();
  if (!is_valid_id(allocation) || st.setup.box->find(allocation, "exited"))
    return;
  auto launched = disk_of(self).exists(dir / "leader") || disk_of(self).exists(dir / "status");
  auto found = st.seams.processes->find_leader("CQ_ALLOCATION_ID=" + allocation);
  if (launched || found) {
    spdlog::error("allocation {}: its alloc.json is missing or unreadable, but it was launched "
                  "({}); left to the coordinator",
                  allocation,
                  found ? fmt::format("pid {} carries its marker", found->pid)
                        : std::string("its leader or status file is there"));
    return;
  }
  spdlog::warn("allocation {}: its start was cut short before its record was durable; ended "
               "refused (the workload was not started)",
               allocation);
  finish(self, local_end(allocation, "", 0, std::nullopt, bus::reason::refused,
                         "cq-node stopped before this start was recorded; the workload was not "
                         "started"));
}

} // namespace

bool remove_leftover_group(daemon_ptr self, const std::string& dir) {
  auto& st = self->state;
  // The group was made in a cgroup mode; the node may run in watchdog mode
  // now. v1 and v2 read alike here.
  mem_group g{st.setup.memcap.mode == memcap_mode::watchdog ? memcap_mode::cgroup_v1
                                                            : st.setup.memcap.mode,
              dir};
  return st.seams.probes->remove_leftover_group(g);
}

std::int64_t next_boot_ms(daemon_ptr self, std::int64_t wall_ms) {
  auto& disk = disk_of(self);
  auto file = self->state.cfg().state_dir / "boot";
  std::int64_t last = 0;
  if (auto text = disk.read(file, 64)) {
    auto begin = text->data();
    if (std::from_chars(begin, begin + text->size(), last).ec != std::errc{})
      last = 0; // damaged: the wall clock alone
  }
  auto boot = std::max(wall_ms, last + 1);
  if (boot != wall_ms)
    spdlog::warn("the wall clock is {} ms behind this daemon's last start; its heartbeats count "
                 "from then",
                 last + 1 - wall_ms);
  if (auto w = disk.write_atomic(file, fmt::format("{}\n", boot)); !w)
    spdlog::warn("cannot write {}: {}", file.string(), w.error().message);
  return boot;
}

void readopt(daemon_ptr self) {
  auto& st = self->state;
  auto& box = *st.setup.box;
  auto& processes = *st.seams.processes;
  auto now = now_ms(self);
  auto now_wall = wall_now_ms(self);
  auto this_boot = processes.boot_id();
  // In name order (the disk lists sorted), so that recovery is the same on
  // every run of a seed.
  std::vector<std::filesystem::path> dirs;
  for (auto& name : disk_of(self).list(st.setup.alloc_root))
    dirs.push_back(st.setup.alloc_root / name);
  for (auto& dir : dirs) {
    auto name = dir.filename().string();
    if (disk_of(self).exists(dir / "exit.json")) {
      // Recorded, but neither acknowledged nor queued (a crash between the
      // two files): report it from exit.json.
      if (!disk_of(self).exists(dir / "reported") && !box.find(name, "exited") && is_valid_id(name))
        requeue_exit(self, dir);
      continue;
    }
    if (auto* r = box.find(name, "exited"); r && disk_of(self).exists(dir / "alloc.json")) {
      spdlog::info("allocation {}: its exit was queued but exit.json is missing; writing it", name);
      write_exit_record(self, *r, 0);
      continue;
    }
    supervised s;
    std::int64_t started_wall = 0;
    std::string boot;
    auto rec = disk_of(self).exists(dir / "alloc.json")
                   ? read_record(disk_of(self), dir, s, started_wall, boot)
                   : std::nullopt;
    if (!rec) {
      never_launched(self, dir);
      continue;
    }
    if (!is_valid_id(s.allocation) || !is_valid_id(s.job) || name != s.allocation) {
      spdlog::error("{}: ids do not match its directory; ignored", (dir / "alloc.json").string());
      continue;
    }
    s.adopted = true;
    s.started_ms = now - std::max<std::int64_t>(0, now_wall - started_wall);
    if (s.timeout_at_ms)
      s.timeout_at_ms = s.started_ms + *s.timeout_at_ms;
    // A stop or yield the coordinator ordered before the restart still holds.
    std::optional<std::int64_t> stop_kill_at_wall;
    if (auto stop = read_json(disk_of(self), dir / "control" / "stop")) {
      s.stop_requested = true;
      stop_kill_at_wall = stop->value("kill_at_ms", now_wall);
      s.kill_at_ms = now + std::max<std::int64_t>(0, *stop_kill_at_wall - now_wall);
    }
    s.yield_ordered = disk_of(self).exists(dir / "control" / "yield-ordered");
    if (auto why = disk_of(self).read(dir / "control" / "stop-reason", 64))
      if (!bus::parse(std::string(trim(*why)), s.own_stop))
        s.own_stop = bus::reason::none;
    // Started in an earlier boot: nothing it launched runs now, and its
    // leader's pid and start time (both counted from the boot) may name a
    // process of this one.
    bool rebooted = !boot.empty() && !this_boot.empty() && boot != this_boot;
    if (!rebooted && s.leader.pid <= 0) {
      // Recorded before a launch without a standby: the leader, if it
      // started, carries the marker.
      if (auto found = processes.find_leader("CQ_ALLOCATION_ID=" + s.allocation))
        s.leader = *found;
    }
    if (!rebooted && s.leader.pid > 0 && s.leader.start_ticks != 0 && processes.adopt(s.leader)) {
      spdlog::info("allocation {} (job {}): re-adopted running pid {}{}", s.allocation, s.job,
                   s.leader.pid, s.stop_requested ? " (stopping)" : "");
      // Its start report may never have been acknowledged (it lives in
      // memory only, launch.cpp): report it again; a repeat is ignored.
      if (!box.find(name, "started"))
        queue_started(self, s.allocation, s.job);
      if (!s.lanes.empty()) {
        std::optional<std::uint64_t> vram_cap;
        if (rec->contains("vram_bytes") && (*rec)["vram_bytes"].is_number_unsigned())
          vram_cap = (*rec)["vram_bytes"].get<std::uint64_t>();
        st.setup.gpu->adopt(s.allocation, s.leader.pid, s.lanes, vram_cap);
      }
    } else {
      spdlog::info("allocation {} (job {}): ended while cq-node was down{}", s.allocation, s.job,
                   rebooted ? " (the machine restarted since its start)" : "");
      s.ended_while_down = true;
    }
    auto id = s.allocation;
    supervise(self, std::move(s));
    if (stop_kill_at_wall)
      st.registry[id].stop_kill_at_wall_ms = stop_kill_at_wall;
  }
  remove_stale_groups(self);
}

} // namespace cq::node
