#include "node_host.hpp"

#include "cq/bus/codec.hpp"
#include "cq/node/daemon.hpp"
#include "node/actors/node_actors.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

#include <fstream>

namespace cq::sim {

namespace {

constexpr std::int64_t term_exit_ms = 200;  ///< a child that honours TERM exits this soon
constexpr std::int64_t checkpoint_ms = 300; ///< a checkpointing child exits 6 this soon

std::string env_of(const bus::env_map& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

} // namespace

node_host::node_host(caf::actor_system& sys, node_spec spec, node_env env,
                     std::filesystem::path state_dir, std::function<bool()> link_up,
                     std::uint64_t seed)
    : sys_(sys), spec_(std::move(spec)), env_(std::move(env)), dir_(std::move(state_dir)),
      link_up_(std::move(link_up)), rng_(seed) {}

node_host::~node_host() = default;

bool node_host::boot(const std::string& token) {
  exit_reports_.clear(); // request ids start again with the new daemon
  (void)disk_.make_dirs(dir_);
  // The GPU lanes, registered with their uuids (telemetry comes from the
  // simulated GPU probes), a lock probe, and the kernel log followed. A node
  // without GPUs never asks.
  std::string toml = fmt::format("[gpu]\nkernel_log = \"simulated\"\ntelemetry = {}\n"
                                 "lock_paths = [\"/sim/gpu.lock\", \"/sim/probe.lock\"]\n",
                                 spec_.gpus > 0);
  for (int g = 0; g < spec_.gpus; ++g)
    toml += fmt::format("[[gpu.lanes]]\nname = \"gpu{}\"\nindex = {}\nuuid = \"GPU-{}-{}\"\n"
                        "vram_bytes = {}\n",
                        g, g, spec_.name, g, spec_.vram_of(g));
  disk_.exempt = true;
  (void)disk_.write_atomic(dir_ / "node.toml", toml);
  disk_.exempt = false;
  node::daemon_config dc;
  dc.state_dir = dir_;
  dc.identity.endpoint = "sim";
  dc.identity.name = spec_.name;
  dc.identity.token = token;
  dc.identity.policy.ram_reserve_bytes = spec_.ram_reserve_bytes;
  dc.identity.memory.sample_ms = timing_.sample_ms;
  dc.heartbeat_ms = timing_.heartbeat_ms;
  if (timing_.retention_ms > 0)
    dc.identity.retention.allocations_ms = timing_.retention_ms;
  if (timing_.fixed_available)
    dc.identity.capacity.mem_available_bytes = spec_.mem_total_bytes;
  auto setup = node::open_node(dc, *this, disk_);
  if (!setup) {
    env_.trace(fmt::format("node {} cannot start: {}", spec_.name, setup.error().message));
    return false;
  }
  std::size_t held = 0;
  for (auto& [pid, p] : procs_)
    held += p.running ? 1 : 0;
  env_.trace(fmt::format("node {} boots ({} workloads running)", spec_.name, held));
  up_ = true;
  node::node_seams seams{
      this, this, this, &disk_, 1'700'000'000'000 + env_.now_ms() + clock_offset_ms_, clock_rate_};
  auto d = node::spawn_daemon(sys_, std::move(*setup), seams);
  daemon_ = std::make_unique<caf::actor>(caf::actor_cast<caf::actor>(d));
  (void)start({[d](std::vector<std::string> frames) {
                 caf::anon_send(d, node::frame_atom::value, std::move(frames));
               },
               [d](std::uint64_t tag) { caf::anon_send(d, node::unsent_atom::value, tag); }});
  return true;
}

void node_host::crash() {
  if (!up_)
    return;
  env_.trace(fmt::format("node {} crashes", spec_.name));
  up_ = false;
  handlers_ = {};
  if (daemon_)
    caf::anon_send_exit(*daemon_, caf::exit_reason::kill);
  daemon_.reset();
  // Its supervisors die with it; the workloads run on, unwatched.
  for (auto& [pid, p] : procs_)
    p.on_exit = nullptr;
}

void node_host::power_loss() {
  if (!up_)
    return;
  crash();
  auto lost = disk_.power_loss();
  env_.trace(
      fmt::format("node {} loses power ({} files lose their latest writes)", spec_.name, lost));
  ++boots_;
  for (auto& [pid, p] : procs_) {
    if (!p.running)
      continue;
    p.running = false;
    if (!p.allocation.empty())
      env_.on_end(spec_.name, p.allocation, p.job);
    forget_later(pid);
  }
}

void node_host::power_loss_pids_reused() {
  if (!up_)
    return;
  std::vector<std::string> running;
  for (auto& [pid, p] : procs_)
    if (p.running && !p.allocation.empty())
      running.push_back(p.allocation);
  disk_.write_back();
  power_loss();
  for (auto& a : running)
    stranger_like(a);
}

void node_host::stranger_like(const std::string& allocation) {
  auto a = pid_of_.find(allocation);
  if (a == pid_of_.end())
    return;
  auto it = procs_.find(a->second);
  if (it == procs_.end() || it->second.running)
    return;
  process p; // no allocation, no marker, no memory group and no end of its own
  p.start_ticks = it->second.start_ticks;
  p.started_ms = env_.now_ms();
  p.ours = false;
  it->second = p;
  for (auto& [dir, g] : cgroups_) // the old boot's groups hold nothing now
    if (g.pid == a->second)
      g.pid = 0;
  env_.trace(
      fmt::format("node {}: pid {} now names a process of another boot", spec_.name, a->second));
}

std::string node_host::boot_id() {
  return fmt::format("{}-boot-{}", spec_.name, boots_);
}

void node_host::receive(const std::vector<std::string>& frames) {
  for (auto& bytes : frames) {
    std::uint64_t seen = 0;
    if (auto f = bus::decode_frame(bytes, seen)) {
      if (!f->is_reply) {
        if (auto o = bus::decode_node_order(*f))
          if (auto* s = std::get_if<bus::start_order>(&*o))
            orders_.emplace(s->allocation, *s);
      } else if (auto it = exit_reports_.find(f->id); it != exit_reports_.end()) {
        if (f->ok && env_.on_exit_acked)
          env_.on_exit_acked(it->second);
        exit_reports_.erase(it);
      }
    }
  }
  if (up_ && handlers_.on_frames)
    handlers_.on_frames(frames);
}

std::string node_host::busy(std::int64_t since_ms) const {
  auto now = env_.now_ms();
  for (auto& [pid, p] : procs_) {
    if (p.running && !p.allocation.empty()) // not a stranger (stranger_like)
      return fmt::format("allocation {} of job {} still runs (pid {})", p.allocation, p.job, pid);
    if (p.escapee_alive)
      return fmt::format("a process allocation {} left behind still runs", p.allocation);
    if (std::max(p.unmarked_until_ms, p.suspect_until_ms) > now)
      return fmt::format("a process allocation {} left behind runs until {:.3f}", p.allocation,
                         static_cast<double>(std::max(p.unmarked_until_ms, p.suspect_until_ms)) /
                             1000);
  }
  if (!up_)
    return "its daemon is down";
  if (heartbeat_ms_ < since_ms)
    return "no heartbeat since the jobs ended";
  if (!listed_.empty())
    return fmt::format("its daemon still holds allocation{} {}", listed_.size() > 1 ? "s" : "",
                       fmt::join(listed_, ", "));
  if (!holds_.empty())
    return fmt::format("its daemon keeps hold {}", holds_.front().id);
  return "";
}

void node_host::inject_fault(std::int64_t xid) {
  klog_.push_back(
      fmt::format("NVRM: Xid (PCI:0000:01:00): {}, pid=1, GPU has fallen off the bus.", xid));
  env_.trace(fmt::format("node {}: kernel log: Xid {}", spec_.name, xid));
}

void node_host::outside_gpu_process(int lane, std::uint64_t vram_bytes) {
  if (vram_bytes)
    outside_vram_[lane] = vram_bytes;
  else
    outside_vram_.erase(lane);
}

/// The GPU probes of a simulated machine: nvidia-smi's answers made from
/// what runs (each GPU workload uses its VRAM on each of its lanes; outside
/// processes have pids of their own), the kernel log's injected lines, and a
/// lock probe an outside process may hold. The real parsing, attribution and
/// cap checks of gpu_supervisor run on them.
class node_host::gpu_side final : public node::gpu_probes {
public:
  explicit gpu_side(node_host& h) : h_(h) {}
  bus::result<std::vector<bus::lane_info>> detect_lanes() override {
    return bus::error_info{errc::not_found, "nvidia-smi: not on a simulated host"};
  }
  std::optional<node::smi_answers> telemetry(std::int64_t) override {
    constexpr std::uint64_t mib = 1024 * 1024;
    std::map<int, std::uint64_t> used;
    std::string apps;
    for (auto& [pid, p] : h_.procs_) {
      auto o = h_.orders_.find(p.allocation);
      if (!p.running || !p.w.vram_bytes || o == h_.orders_.end() || !o->second.lanes)
        continue;
      for (auto& lane : *o->second.lanes) {
        auto g = std::atoi(lane.c_str() + 3); // "gpu<index>"
        used[g] += p.w.vram_bytes;
        apps += fmt::format("{}, GPU-{}-{}, {}\n", pid, h_.spec_.name, g, p.w.vram_bytes / mib);
      }
    }
    for (auto& [g, bytes] : h_.outside_vram_) {
      used[g] += bytes;
      apps += fmt::format("{}, GPU-{}-{}, {}\n", 900000 + g, h_.spec_.name, g, bytes / mib);
    }
    std::string devices;
    for (int g = 0; g < h_.spec_.gpus; ++g)
      devices += fmt::format("{}, GPU-{}-{}, Simulated GPU, {}, {}\n", g, h_.spec_.name, g,
                             h_.spec_.vram_of(g) / mib, used[g] / mib);
    return node::smi_answers{devices, apps};
  }
  std::optional<std::string> owner_of(pid_t pid,
                                      const std::vector<node::gpu_owner>& owners) override {
    for (auto& o : owners)
      if (o.pgid == pid)
        return o.allocation;
    return std::nullopt;
  }
  std::optional<std::string> process_name(pid_t) override { return std::string("outside-job"); }
  node::status open_kernel_log() override { return node::done{}; }
  std::vector<std::string> kernel_log_lines() override { return std::exchange(h_.klog_, {}); }
  node::status lock_acquire(std::chrono::milliseconds) override { return node::done{}; }
  void lock_release() override {}
  bus::string_list busy_probes() override {
    return h_.probe_held_ ? bus::string_list{"/sim/probe.lock"} : bus::string_list{};
  }
  bool has_probes() const override { return true; }

private:
  node_host& h_;
};

std::unique_ptr<node::gpu_probes> node_host::gpu(const node::gpu_config&) {
  return std::make_unique<gpu_side>(*this);
}

bool node_host::faulted() {
  return disk_.exists(dir_ / "KERNEL-FAULT.json");
}

std::uint64_t node_host::reserved_ram() const {
  std::uint64_t sum = 0;
  for (auto& [pid, p] : procs_)
    if (p.running)
      if (auto it = orders_.find(p.allocation); it != orders_.end())
        sum += it->second.ram_bytes.value_or(0);
  return sum;
}

std::size_t node_host::used_lanes() const {
  std::size_t sum = 0;
  for (auto& [pid, p] : procs_)
    if (p.running)
      if (auto it = orders_.find(p.allocation); it != orders_.end() && it->second.lanes)
        sum += it->second.lanes->size();
  return sum;
}

// ---- processes ------------------------------------------------------------------

bus::result<node::leader_id> node_host::launch(const node::launch_request& req,
                                               const node::mem_group& group) {
  process p;
  p.allocation = env_of(req.env, "CQ_ALLOCATION_ID");
  p.job = env_of(req.env, "CQ_JOB_ID");
  p.w = parse_workload(req.argv);
  p.start_ticks = static_cast<std::uint64_t>(env_.now_ms()) + 1;
  p.started_ms = env_.now_ms();
  p.status_file = req.status_path;
  p.yield_file = env_of(req.env, "CQ_YIELD_FILE");
  auto pid = next_pid_++;
  pid_of_[p.allocation] = pid;
  p.group = group.dir.string();
  std::optional<std::int64_t> oom_at;
  if (auto g = cgroups_.find(p.group); g != cgroups_.end()) {
    g->second.pid = pid;
    // Over its cap: the kernel kills it as soon as it grows there.
    if (g->second.cap && p.w.rss_bytes > *g->second.cap) {
      auto frac = static_cast<double>(*g->second.cap) / static_cast<double>(p.w.rss_bytes);
      auto half = static_cast<double>(std::max<std::int64_t>(2, p.w.run_ms) / 2);
      oom_at =
          p.started_ms + 1 + static_cast<std::int64_t>(std::max(0.0, (frac - 0.1) / 0.9) * half);
    }
  }
  procs_[pid] = p;
  if (auto it = orders_.find(p.allocation); it != orders_.end())
    env_.on_start(spec_.name, it->second);
  if (oom_at && *oom_at < p.started_ms + p.w.run_ms) {
    env_.at(*oom_at, [this, pid] {
      auto it = procs_.find(pid);
      if (it == procs_.end() || !it->second.running)
        return;
      ++cgroups_[it->second.group].oom_kills;
      end(pid, std::nullopt, 9);
    });
  } else if (p.w.crash_signal)
    end_after(pid, p.w.run_ms, std::nullopt, p.w.crash_signal);
  else
    end_after(pid, p.w.run_ms, p.w.exit_code, std::nullopt);
  if (p.w.checkpoints)
    poll_yield(pid);
  return node::leader_id{pid, p.start_ticks};
}

void node_host::end_after(pid_t pid, std::int64_t delay_ms, std::optional<int> code,
                          std::optional<int> signal) {
  auto gen = ++procs_[pid].gen;
  env_.at(env_.now_ms() + std::max<std::int64_t>(1, delay_ms), [this, pid, gen, code, signal] {
    auto it = procs_.find(pid);
    if (it != procs_.end() && it->second.running && it->second.gen == gen)
      end(pid, code, signal);
  });
}

void node_host::poll_yield(pid_t pid) {
  env_.at(env_.now_ms() + timing_.yield_poll_ms, [this, pid] {
    auto it = procs_.find(pid);
    if (it == procs_.end() || !it->second.running || it->second.terming)
      return;
    auto& p = it->second;
    if (disk_.exists(p.yield_file)) {
      p.terming = true; // checkpointing: a TERM changes nothing any more
      end_after(pid, checkpoint_ms, 6, std::nullopt);
      return;
    }
    poll_yield(pid);
  });
}

/// The workload ends: cq-shim's status file, then the watcher's report.
void node_host::end(pid_t pid, std::optional<int> code, std::optional<int> signal) {
  auto& p = procs_[pid];
  p.running = false;
  p.ended_ms = env_.now_ms();
  p.escapee_alive = p.w.escapee;
  if (p.w.escapee_unmarked)
    p.unmarked_until_ms = p.ended_ms + 60'000;
  if (p.w.suspect_ms)
    p.suspect_until_ms = env_.now_ms() + p.w.suspect_ms;
  auto peak = rss_at(p, p.ended_ms);
  auto kb = peak / 1024;
  // cq-shim writes it atomically and syncs it.
  disk_.exempt = true; // cq-shim's own write
  (void)disk_.write_atomic(p.status_file,
                           code ? fmt::format("exited {} {}\n", *code, kb)
                                : fmt::format("signaled {} {}\n", signal.value_or(9), kb));
  disk_.exempt = false;
  env_.on_end(spec_.name, p.allocation, p.job);
  // Forgotten two minutes after its end (and after whatever it left behind):
  // by then its supervisor has cleaned up, and a recovery that looks for it
  // finds it gone, as it would on a real machine.
  forget_later(pid);
  if (p.on_exit) {
    node::child_exit e;
    e.reaped = p.ours;
    if (code)
      e.exit_code = *code;
    if (signal)
      e.signal = *signal;
    e.maxrss_bytes = peak;
    auto h = std::move(p.on_exit);
    p.on_exit = nullptr;
    h(e);
  }
}

void node_host::forget_later(pid_t pid) {
  env_.at(env_.now_ms() + 120'000, [this, pid] {
    auto it = procs_.find(pid);
    if (it == procs_.end() || it->second.running || it->second.escapee_alive)
      return;
    if (std::max(it->second.suspect_until_ms, it->second.unmarked_until_ms) > env_.now_ms()) {
      forget_later(pid);
      return;
    }
    if (auto a = pid_of_.find(it->second.allocation); a != pid_of_.end() && a->second == pid)
      pid_of_.erase(a);
    orders_.erase(it->second.allocation);
    procs_.erase(it);
  });
}

bool node_host::adopt(const node::leader_id& leader) {
  auto it = procs_.find(leader.pid);
  if (it == procs_.end() || !it->second.running || it->second.start_ticks != leader.start_ticks)
    return false;
  it->second.ours = false;
  return true;
}

std::optional<node::leader_id> node_host::find_leader(const std::string& marker) {
  for (auto& [pid, p] : procs_)
    if (p.running && marker == "CQ_ALLOCATION_ID=" + p.allocation)
      return node::leader_id{pid, p.start_ticks};
  return std::nullopt;
}

void node_host::watch(pid_t pid, std::function<void(node::child_exit)> on_exit) {
  auto it = procs_.find(pid);
  if (it == procs_.end())
    return;
  auto& p = it->second;
  if (p.running) {
    p.on_exit = std::move(on_exit);
    return;
  }
  // Ended before it was watched: the pidfd is readable at once.
  env_.at(env_.now_ms(), [on_exit = std::move(on_exit)] { on_exit(node::child_exit{}); });
}

void node_host::terminate_group(pid_t pgid) {
  auto it = procs_.find(pgid);
  if (it != procs_.end() && it->second.running)
    it->second.signalled = true;
  if (it == procs_.end() || !it->second.running || it->second.terming || it->second.w.ignores_term)
    return;
  it->second.terming = true;
  end_after(pgid, term_exit_ms, std::nullopt, 15);
}

void node_host::kill_group(pid_t pgid) {
  auto it = procs_.find(pgid);
  if (it == procs_.end() || !it->second.running)
    return;
  it->second.signalled = true;
  end_after(pgid, 1, std::nullopt, 9);
}

std::vector<std::uint64_t> node_host::group_rss(const std::vector<pid_t>& pgids) {
  std::vector<std::uint64_t> out;
  for (auto g : pgids) {
    auto it = procs_.find(g);
    out.push_back(it != procs_.end() && it->second.running ? rss_at(it->second, env_.now_ms()) : 0);
  }
  return out;
}

/// A marked escapee is found and killed (gone at the next scan; with cgroups
/// it is in the allocation's); a process with an unreadable environment is a
/// suspect until it ends by itself.
node::scan_result node_host::cleanup_scan(const node::scan_request& req) {
  node::scan_result out;
  auto it = pid_of_.find(req.allocation);
  if (it == pid_of_.end())
    return out;
  auto pit = procs_.find(it->second);
  if (pit == procs_.end())
    return out;
  auto& p = pit->second;
  // A killed process ends at once (SIGKILL): when_gone answers at once.
  if (p.escapee_alive) {
    p.escapee_alive = false;
    ++out.count;
    out.found = fmt::format("pid {} (escapee)", it->second + 100000);
    out.killed.push_back({it->second + 100000, 1});
  }
  // Only its cgroup knows an unmarked escapee (a watchdog node never sees it).
  if (p.unmarked_until_ms > env_.now_ms() && !p.group.empty()) {
    p.unmarked_until_ms = 0;
    ++out.count;
    out.found +=
        fmt::format("{}pid {} (in its cgroup)", out.found.empty() ? "" : ", ", it->second + 300000);
    out.killed.push_back({it->second + 300000, 1});
  }
  // A suspect is outside the cgroup: a members-only scan does not see it.
  if (p.suspect_until_ms > env_.now_ms() && !(req.members_only && !req.group.dir.empty())) {
    ++out.count;
    out.found += fmt::format("{}pid {} (environment unreadable)", out.found.empty() ? "" : ", ",
                             it->second + 200000);
  }
  return out;
}

bool node_host::when_gone(const std::vector<node::leader_id>&, std::function<void()> on_gone) {
  // Every process a scan kills here ended with the kill (cleanup_scan).
  env_.at(env_.now_ms(), std::move(on_gone));
  return true;
}

// ---- host probes ----------------------------------------------------------------

std::optional<node::mem_info> node_host::memory() {
  std::uint64_t used = 0;
  auto now = env_.now_ms();
  for (auto& [pid, p] : procs_) {
    if (p.running)
      used += rss_at(p, now);
    else if (p.unmarked_until_ms > now)
      used += rss_at(p, p.ended_ms); // an escapee nobody found keeps its memory
  }
  auto total = spec_.mem_total_bytes;
  return node::mem_info{total, used >= total ? 0 : total - used};
}

bus::result<node::memcap_setup> node_host::detect_memcap(const node::memory_config&) {
  node::memcap_setup s;
  s.mode = spec_.cgroups ? node::memcap_mode::cgroup_v2 : node::memcap_mode::watchdog;
  if (spec_.cgroups)
    s.parent = "/sim/cgroup";
  s.note = "simulated host";
  return s;
}

bus::result<node::mem_group> node_host::create_group(const node::memcap_setup& setup,
                                                     const std::string& allocation,
                                                     std::optional<std::uint64_t> cap_bytes) {
  node::mem_group g{setup.mode, setup.parent / ("cq-" + allocation)};
  cgroups_[g.dir.string()] = cgroup{cap_bytes, 0, 0};
  return g;
}

std::optional<std::uint64_t> node_host::oom_kills(const node::mem_group& g) {
  auto it = cgroups_.find(g.dir.string());
  if (it == cgroups_.end())
    return std::nullopt;
  return it->second.oom_kills;
}

std::uint64_t node_host::rss_at(const process& p, std::int64_t t_ms) {
  auto half = std::max<std::int64_t>(1, p.w.run_ms / 2);
  auto f = std::min(1.0, static_cast<double>(std::max<std::int64_t>(0, t_ms - p.started_ms)) /
                             static_cast<double>(half));
  return static_cast<std::uint64_t>(static_cast<double>(p.w.rss_bytes) * (0.1 + 0.9 * f));
}

const node_host::process* node_host::process_in(const node::mem_group& g) const {
  auto it = cgroups_.find(g.dir.string());
  if (it == cgroups_.end() || !it->second.pid)
    return nullptr;
  auto p = procs_.find(it->second.pid);
  return p == procs_.end() ? nullptr : &p->second;
}

std::optional<std::uint64_t> node_host::peak_usage(const node::mem_group& g) {
  if (auto* p = process_in(g))
    return rss_at(*p, p->running ? env_.now_ms() : p->ended_ms);
  return std::nullopt;
}

std::optional<std::uint64_t> node_host::current_usage(const node::mem_group& g) {
  if (auto* p = process_in(g))
    return p->running ? rss_at(*p, env_.now_ms()) : 0;
  return std::nullopt;
}

node::status node_host::remove_group(const node::mem_group& g) {
  auto it = cgroups_.find(g.dir.string());
  if (it != cgroups_.end()) {
    if (auto p = procs_.find(it->second.pid); p != procs_.end() && p->second.running)
      return bus::error_info{errc::internal, "the cgroup is not empty"};
    cgroups_.erase(it);
  }
  return node::done{};
}

std::string node_host::random_id() {
  return fmt::format("{:016x}{:016x}", rng_(), rng_());
}

// ---- link -------------------------------------------------------------------------

node::status node_host::start(handlers h) {
  handlers_ = std::move(h);
  return node::done{};
}

void node_host::send(std::string bytes, std::uint64_t tag) {
  if (!up_)
    return;
  if (!link_up_()) {
    // No connection (ZMQ_IMMEDIATE): the frame is dropped and its tag handed back.
    if (tag != 0 && handlers_.on_unsent)
      handlers_.on_unsent(tag);
    return;
  }
  auto d = decode_from_node(bytes);
  if (d && d->request) {
    auto& req = *d->request;
    if (auto* r = std::get_if<bus::report_req>(&req); r && r->kind == "exited")
      exit_reports_[d->frame.id] = r->allocation;
    else if (auto* hb = std::get_if<bus::heartbeat_req>(&req)) {
      holds_ = hb->holds.value_or(std::vector<bus::hold_info>{});
      listed_ = hb->allocations;
      heartbeat_ms_ = env_.now_ms();
    }
  }
  if (env_.send_decoded)
    env_.send_decoded(bytes, std::move(d));
  else
    env_.send(bytes);
}

} // namespace cq::sim
