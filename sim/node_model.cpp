#include "node_model.hpp"

#include "cq/bus/codec.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cq::sim {

namespace {

constexpr std::int64_t heartbeat_ms = 1000;
constexpr std::int64_t resend_ms = 1000;
constexpr std::int64_t launch_ms = 20;     ///< fork to "started"
constexpr std::int64_t term_exit_ms = 200; ///< a child that honours TERM exits this soon
constexpr std::int64_t checkpoint_ms = 300;
constexpr std::uint64_t kill_grace_ms = 10000; ///< timeout and fault stops: TERM -> KILL

} // namespace

workload parse_workload(const bus::string_list& argv) {
  workload w;
  for (auto& a : argv) {
    auto eq = a.find('=');
    auto key = a.substr(0, eq);
    auto val = eq == std::string::npos ? std::string() : a.substr(eq + 1);
    auto num = [&] { return val.empty() ? 0LL : std::stoll(val); };
    if (key == "run_ms")
      w.run_ms = num();
    else if (key == "exit")
      w.exit_code = static_cast<int>(num());
    else if (key == "rss")
      w.rss_bytes = static_cast<std::uint64_t>(num());
    else if (key == "ignore_term")
      w.ignores_term = true;
    else if (key == "checkpoints")
      w.checkpoints = true;
    else if (key == "crash")
      w.crash_signal = static_cast<int>(num());
    else if (key == "escapee")
      w.escapee = true;
    else if (key == "escapee_unmarked")
      w.escapee_unmarked = true;
    else if (key == "over_cap")
      w.over_cap = true;
    else if (key == "vram")
      w.vram_bytes = static_cast<std::uint64_t>(num());
    else if (key == "suspect_ms")
      w.suspect_ms = num();
  }
  return w;
}

bus::string_list workload_argv(const workload& w, std::uint64_t index) {
  bus::string_list v{"sim-job", fmt::format("w{}", index), fmt::format("run_ms={}", w.run_ms),
                     fmt::format("exit={}", w.exit_code), fmt::format("rss={}", w.rss_bytes)};
  if (w.ignores_term)
    v.push_back("ignore_term");
  if (w.checkpoints)
    v.push_back("checkpoints");
  if (w.crash_signal)
    v.push_back(fmt::format("crash={}", w.crash_signal));
  if (w.escapee)
    v.push_back("escapee");
  if (w.escapee_unmarked)
    v.push_back("escapee_unmarked");
  if (w.over_cap)
    v.push_back("over_cap");
  if (w.vram_bytes)
    v.push_back(fmt::format("vram={}", w.vram_bytes));
  if (w.suspect_ms)
    v.push_back(fmt::format("suspect_ms={}", w.suspect_ms));
  return v;
}

node_model::node_model(node_spec spec, node_env env)
    : daemon_id_("daemon-" + spec.name), spec_(std::move(spec)), env_(std::move(env)) {}

void node_model::after(std::int64_t delay_ms, std::function<void()> f) {
  auto boot = boot_;
  env_.at(env_.now_ms() + delay_ms, [this, boot, f = std::move(f)] {
    if (up_ && boot_ == boot)
      f();
  });
}

void node_model::boot(const std::string& token) {
  up_ = true;
  ++boot_;
  token_ = token;
  // The real daemon's clock starts at its wall time; a later boot is later.
  boot_ms_ = std::max(env_.now_ms(), boot_ms_ + 1);
  beat_ = 0;
  env_.trace(fmt::format("node {} boots ({} allocations on disk)", spec_.name, children_.size()));
  // Invariant 4: re-adopt. Exits that happened while the daemon was down are
  // already queued (cq-shim's status file); a child being stopped keeps its
  // kill deadline, a running one its timeout.
  for (auto& [id, c] : children_) {
    if (!c.running)
      continue;
    auto gen = c.gen;
    auto alloc = id;
    if (c.stop_reason != bus::reason::none)
      after(kill_grace_ms, [this, alloc, gen] {
        auto i = children_.find(alloc);
        if (i != children_.end() && i->second.running && i->second.gen == gen)
          finish(alloc, std::nullopt, 9);
      });
    else if (c.order.timeout_ms && *c.order.timeout_ms)
      after(std::max<std::int64_t>(
                0, c.started_ms + static_cast<std::int64_t>(*c.order.timeout_ms) - env_.now_ms()),
            [this, alloc, gen] {
              auto i = children_.find(alloc);
              if (i != children_.end() && i->second.running && i->second.gen == gen)
                terminate(alloc, kill_grace_ms, bus::reason::timeout);
            });
  }
  heartbeat();
  resend();
}

void node_model::crash() {
  if (!up_)
    return;
  env_.trace(fmt::format("node {} crashes", spec_.name));
  up_ = false;
  ++boot_;
}

std::size_t node_model::live() const {
  std::size_t n = 0;
  for (auto& [_, c] : children_)
    n += c.running;
  return n;
}

std::uint64_t node_model::reserved_ram() const {
  std::uint64_t n = 0;
  for (auto& [_, c] : children_)
    if (c.running)
      n += c.order.ram_bytes.value_or(0);
  return n;
}

std::uint64_t node_model::used_ram() const {
  std::uint64_t n = 0;
  for (auto& [_, c] : children_)
    if (c.running)
      n += c.w.rss_bytes;
  return n;
}

std::size_t node_model::used_lanes() const {
  std::size_t n = 0;
  for (auto& [_, c] : children_)
    if (c.running && c.order.lanes)
      n += c.order.lanes->size();
  return n;
}

void node_model::heartbeat() {
  bus::heartbeat_req hb;
  hb.mem_total_bytes = spec_.mem_total_bytes;
  auto used = used_ram();
  hb.mem_available_bytes = spec_.mem_total_bytes > used ? spec_.mem_total_bytes - used : 0;
  hb.cpus = spec_.cpus;
  // Invariant 2: everything held, live or with an unacknowledged exit.
  for (auto& [id, c] : children_)
    hb.allocations.push_back(id);
  if (spec_.gpus) {
    std::vector<bus::lane_info> lanes;
    for (int i = 0; i < spec_.gpus; ++i)
      lanes.push_back({fmt::format("gpu{}", i), i, fmt::format("GPU-{}-{}", spec_.name, i),
                       spec_.vram_bytes, 0, 0});
    hb.lanes = lanes;
  }
  hb.ram_reserve_bytes = spec_.ram_reserve_bytes;
  hb.ram_floor_bytes = 0;
  hb.mem_cap_mode = "cgroup_v2";
  hb.fault = fault_;
  std::vector<bus::alloc_usage> usage;
  for (auto& [id, c] : children_)
    if (c.running)
      usage.push_back({id, c.w.rss_bytes, 0});
  hb.usage = usage;
  hb.daemon = daemon_id_;
  hb.boot_ms = boot_ms_;
  hb.beat = ++beat_;
  env_.send(bus::encode_request(next_rid_++, token_, hb));
  after(heartbeat_ms, [this] { heartbeat(); });
}

void node_model::resend() {
  for (auto& [_, r] : outbox_)
    send_report(r);
  after(resend_ms, [this] { resend(); });
}

void node_model::send_report(const bus::report_req& r) {
  auto stamped = r;
  stamped.boot_ms = boot_ms_;
  stamped.beat = beat_;
  env_.send(bus::encode_request(next_rid_++, token_, stamped));
}

void node_model::queue_report(bus::report_req r) {
  r.seq = next_seq_++;
  r.at_ms = env_.now_ms();
  outbox_[r.seq] = r; // on disk before it is sent (invariant 2)
  if (up_)
    send_report(r);
}

void node_model::answer(std::uint64_t id, bool ok, errc code, std::string msg) {
  env_.send(ok ? bus::encode_reply(id, bus::order_ack{boot_ms_, beat_})
               : bus::encode_error(id, code, msg));
}

void node_model::receive(const std::string& bytes) {
  if (!up_)
    return;
  std::uint64_t id_seen = 0;
  auto f = bus::decode_frame(bytes, id_seen);
  if (!f) {
    env_.trace(fmt::format("node {}: undecodable frame: {}", spec_.name, f.error().message));
    return;
  }
  if (f->is_reply) {
    if (!f->ok) {
      env_.trace(fmt::format("node {}: refused: {}", spec_.name, f->error.message));
      return;
    }
    // A report's acknowledgement names its seq; a heartbeat's has none.
    if (auto ack = bus::decode_body<bus::report_rep>(*f); ack && ack->seq) {
      auto i = outbox_.find(ack->seq);
      if (i == outbox_.end())
        return;
      auto r = std::move(i->second);
      outbox_.erase(i);
      if (r.kind == "exited") {
        children_.erase(r.allocation);
        if (env_.on_exit_acked)
          env_.on_exit_acked(r.allocation);
      }
    }
    return;
  }
  auto order = bus::decode_node_order(*f);
  if (!order) {
    answer(f->id, false, order.error().code, order.error().message);
    return;
  }
  std::visit(
      [&](auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, bus::start_order>)
          on_start(f->id, o);
        else if constexpr (std::is_same_v<T, bus::stop_order>)
          on_stop(f->id, o);
        else if constexpr (std::is_same_v<T, bus::yield_order>)
          on_yield(f->id, o);
        else if constexpr (std::is_same_v<T, bus::clear_fault_order>) {
          if (fault_)
            env_.trace(fmt::format("node {}: fault cleared ({})", spec_.name, o.reason));
          fault_.reset();
          answer(f->id, true);
        } else if constexpr (std::is_same_v<T, bus::read_log_order>) {
          env_.send(bus::encode_reply(f->id, bus::log_chunk{"", 0, true}));
        } else if constexpr (std::is_same_v<T, bus::terminal_order>) {
          answer(f->id, false, errc::unavailable, "the terminal is not open");
        } else if constexpr (std::is_same_v<T, bus::forget_order>) {
          answer(f->id, true); // the model keeps no directories
        } else {
          answer(f->id, false, errc::not_found, "no such hold");
        }
      },
      *order);
}

void node_model::on_start(std::uint64_t id, const bus::start_order& o) {
  // Invariant 1 and 3: a start for an allocation known (or tombstoned, or
  // finished) is acknowledged and changes nothing.
  if (children_.count(o.allocation) || tombstones_.count(o.allocation) ||
      done_.count(o.allocation)) {
    answer(id, true);
    return;
  }
  child c;
  c.order = o;
  c.w = parse_workload(o.argv);
  c.running = false;
  children_[o.allocation] = c; // alloc.json, durable before the acknowledgement
  answer(id, true);
  launch(o.allocation);
}

void node_model::launch(const std::string& alloc) {
  auto& c = children_.at(alloc);
  auto& o = c.order;
  bus::report_req r;
  r.allocation = alloc;
  r.job = o.job;
  r.kind = "exited";
  // Invariant 5: no GPU work while a fault is latched.
  if (fault_ && o.lanes && !o.lanes->empty()) {
    r.exit_code = 125, r.reason = bus::reason::refused, r.detail = "a kernel GPU fault is latched";
    queue_report(r);
    return;
  }
  // Pre-launch RAM admission (daemon.hpp invariant 7).
  auto used = used_ram();
  std::uint64_t avail = spec_.mem_total_bytes > used ? spec_.mem_total_bytes - used : 0;
  auto ram = o.ram_bytes.value_or(0);
  if ((o.ram_start_min_bytes && avail < *o.ram_start_min_bytes) ||
      (o.ram_floor_bytes && *o.ram_floor_bytes &&
       (avail < ram || avail - ram < *o.ram_floor_bytes))) {
    r.exit_code = 125, r.reason = bus::reason::launch_failed,
    r.detail = "MemAvailable below the floor";
    queue_report(r);
    return;
  }
  c.running = true;
  c.started_ms = env_.now_ms();
  c.ends_ms = c.started_ms + c.w.run_ms;
  auto gen = ++c.gen;
  if (env_.on_start)
    env_.on_start(spec_.name, o);
  after(launch_ms, [this, alloc] {
    auto i = children_.find(alloc);
    if (i == children_.end())
      return;
    bus::report_req s;
    s.kind = "started", s.allocation = alloc, s.job = i->second.order.job;
    queue_report(s);
  });
  // The process ends by itself whether or not the daemon is up.
  env_.at(c.ends_ms, [this, alloc, gen] {
    auto i = children_.find(alloc);
    if (i == children_.end() || !i->second.running || i->second.gen != gen)
      return;
    auto& w = i->second.w;
    if (w.crash_signal)
      finish(alloc, std::nullopt, w.crash_signal);
    else
      finish(alloc, w.exit_code, std::nullopt);
  });
  if (o.timeout_ms && *o.timeout_ms)
    after(static_cast<std::int64_t>(*o.timeout_ms), [this, alloc, gen] {
      auto i = children_.find(alloc);
      if (i != children_.end() && i->second.running && i->second.gen == gen)
        terminate(alloc, kill_grace_ms, bus::reason::timeout);
    });
}

void node_model::terminate(const std::string& alloc, std::uint64_t grace_ms, bus::reason reason) {
  auto& c = children_.at(alloc);
  if (!c.running)
    return;
  if (c.stop_reason == bus::reason::none)
    c.stop_reason = reason;
  auto gen = c.gen;
  if (!c.w.ignores_term)
    env_.at(env_.now_ms() + term_exit_ms, [this, alloc, gen] {
      auto i = children_.find(alloc);
      if (i != children_.end() && i->second.running && i->second.gen == gen)
        finish(alloc, std::nullopt, 15);
    });
  after(static_cast<std::int64_t>(grace_ms), [this, alloc, gen] {
    auto i = children_.find(alloc);
    if (i != children_.end() && i->second.running && i->second.gen == gen)
      finish(alloc, std::nullopt, 9);
  });
}

void node_model::finish(const std::string& alloc, std::optional<std::int64_t> rc,
                        std::optional<std::int64_t> sig) {
  auto& c = children_.at(alloc);
  c.running = false;
  if (env_.on_end)
    env_.on_end(spec_.name, alloc, c.order.job);
  bus::report_req r;
  r.kind = "exited", r.allocation = alloc, r.job = c.order.job;
  r.exit_code = rc, r.signal = sig;
  if (c.stop_reason != bus::reason::none)
    r.reason = c.stop_reason;
  else if (rc && *rc == 6 && c.yield_ordered)
    r.reason = bus::reason::checkpointed;
  r.peak_ram_bytes = c.w.rss_bytes;
  r.wall_ms = static_cast<std::uint64_t>(env_.now_ms() - c.started_ms);
  done_.insert(alloc);
  queue_report(r); // queued while the daemon is down too: cq-shim's status file
}

void node_model::on_stop(std::uint64_t id, const bus::stop_order& o) {
  auto i = children_.find(o.allocation);
  if (i == children_.end()) {
    if (!done_.count(o.allocation) && !tombstones_.count(o.allocation)) {
      // Invariant 3: a tombstone, reported as cancelled, never started.
      tombstones_.insert(o.allocation);
      answer(id, true);
      bus::report_req r;
      r.kind = "exited", r.allocation = o.allocation, r.exit_code = 125,
      r.reason = bus::reason::cancelled;
      queue_report(r);
      return;
    }
    answer(id, true);
    return;
  }
  i->second.stop_ordered = true; // control/stop, durable
  answer(id, true);
  terminate(o.allocation, o.grace_ms, bus::reason::cancelled);
}

void node_model::on_yield(std::uint64_t id, const bus::yield_order& o) {
  auto i = children_.find(o.allocation);
  if (i == children_.end() || !i->second.running) {
    answer(id, true);
    return;
  }
  i->second.yield_ordered = true; // control/yield-ordered, durable
  answer(id, true);
  if (i->second.w.checkpoints) {
    auto gen = i->second.gen;
    env_.at(env_.now_ms() + checkpoint_ms, [this, alloc = o.allocation, gen] {
      auto j = children_.find(alloc);
      if (j != children_.end() && j->second.running && j->second.gen == gen)
        finish(alloc, 6, std::nullopt);
    });
  }
}

void node_model::inject_fault(std::int64_t xid) {
  if (fault_)
    return;
  fault_ = bus::fault_info{xid, "0000:01:00.0", fmt::format("NVRM: Xid (PCI:0000:01:00): {}", xid),
                           env_.now_ms()};
  env_.trace(fmt::format("node {}: GPU fault Xid {} latched", spec_.name, xid));
  if (!up_)
    return; // the daemon latches it when it reads the kernel log at boot
  std::vector<std::string> gpu;
  for (auto& [id, c] : children_)
    if (c.running && c.order.lanes && !c.order.lanes->empty())
      gpu.push_back(id);
  for (auto& id : gpu)
    terminate(id, kill_grace_ms, bus::reason::fault);
}

std::shared_ptr<decoded_frame> decode_from_node(const std::string& bytes) {
  std::uint64_t seen = 0;
  auto f = bus::decode_frame(bytes, seen);
  if (!f)
    return nullptr;
  auto d = std::make_shared<decoded_frame>();
  d->frame = std::move(*f);
  if (!d->frame.is_reply)
    if (auto req = bus::decode_coordinator_request(d->frame))
      d->request = std::move(*req);
  return d;
}

} // namespace cq::sim
