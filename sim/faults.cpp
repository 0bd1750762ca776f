// cq-sim's faults: fault mixes, deliberate defects, their schedule, and the
// healing that starts the liveness phase.
#include "world_impl.hpp"

#include <utility>

namespace cq::sim {

using namespace cq::actors;
using detail::chance;
using detail::uniform;

fault_mix fault_mix::none() {
  return {};
}

fault_mix fault_mix::all() {
  fault_mix f;
  f.drop = 0.01, f.dup = 0.01, f.reorder = true, f.partitions = true, f.reconnects = true;
  f.node_crashes = true, f.coordinator_crashes = true, f.commit_fail = 0.002;
  f.child_crashes = true, f.gpu_faults = true, f.ignore_term = true, f.escapees = true;
  f.ooms = true, f.machine_crashes = true;
  f.anywhere = true, f.power_loss = true, f.commit_crashes = true, f.clock_skew = true;
  f.disk_faults = true;
  return f;
}

fault_mix fault_mix::random(std::mt19937_64& g) {
  fault_mix f;
  // Swarm testing: each kind is on or off on its own, so that some seeds see
  // one fault class alone and others see many together.
  if (chance(g, 0.5))
    f.drop = static_cast<double>(uniform(g, 1, 50)) / 1000;
  if (chance(g, 0.5))
    f.dup = static_cast<double>(uniform(g, 1, 50)) / 1000;
  f.reorder = chance(g, 0.3);
  f.partitions = chance(g, 0.5);
  f.reconnects = chance(g, 0.5);
  f.node_crashes = chance(g, 0.5);
  f.coordinator_crashes = chance(g, 0.5);
  if (chance(g, 0.4))
    f.commit_fail = static_cast<double>(uniform(g, 1, 20)) / 1000;
  f.child_crashes = chance(g, 0.5);
  f.gpu_faults = chance(g, 0.5);
  f.ignore_term = chance(g, 0.5);
  f.escapees = chance(g, 0.5);
  f.ooms = chance(g, 0.5);
  f.machine_crashes = chance(g, 0.3);
  // Drawn last, so that the kinds above stay what they were for each seed.
  f.anywhere = chance(g, 0.5);
  f.power_loss = f.coordinator_crashes && chance(g, 0.5);
  f.commit_crashes = chance(g, 0.4);
  f.clock_skew = chance(g, 0.5);
  f.disk_faults = chance(g, 0.4);
  return f;
}

void fault_mix::remove(const fault_mix& m) {
  if (m.drop > 0)
    drop = 0;
  if (m.dup > 0)
    dup = 0;
  if (m.commit_fail > 0)
    commit_fail = 0;
  bool fault_mix::*flags[] = {
      &fault_mix::reorder,      &fault_mix::partitions,          &fault_mix::reconnects,
      &fault_mix::node_crashes, &fault_mix::coordinator_crashes, &fault_mix::child_crashes,
      &fault_mix::gpu_faults,   &fault_mix::ignore_term,         &fault_mix::escapees,
      &fault_mix::ooms,         &fault_mix::machine_crashes,     &fault_mix::anywhere,
      &fault_mix::power_loss,   &fault_mix::commit_crashes,      &fault_mix::clock_skew,
      &fault_mix::disk_faults};
  for (auto f : flags)
    if (m.*f)
      this->*f = false;
}

std::string fault_mix::describe() const {
  std::string s = fmt::format("drop={} dup={}", drop, dup);
  auto flag = [&](bool on, const char* name) {
    if (on)
      s += fmt::format(" {}", name);
  };
  flag(reorder, "reorder");
  flag(partitions, "partitions");
  flag(reconnects, "reconnects");
  flag(node_crashes, "node_crashes");
  flag(coordinator_crashes, "coordinator_crashes");
  if (commit_fail > 0)
    s += fmt::format(" commit_fail={}", commit_fail);
  flag(child_crashes, "child_crashes");
  flag(gpu_faults, "gpu_faults");
  flag(ignore_term, "ignore_term");
  flag(escapees, "escapees");
  flag(ooms, "ooms");
  flag(machine_crashes, "machine_crashes");
  flag(anywhere, "anywhere");
  flag(power_loss, "power_loss");
  flag(commit_crashes, "commit_crashes");
  flag(clock_skew, "clock_skew");
  flag(disk_faults, "disk_faults");
  return s;
}

namespace {

/// Every deliberate defect by name: one table for the names and the flags.
constexpr std::pair<const char*, bool config::defect_flags::*> defect_table[] = {
    {"ignore_fault_latch", &config::defect_flags::ignore_fault_latch},
    {"ack_submit_before_commit", &config::defect_flags::ack_submit_before_commit},
    {"forget_lanes", &config::defect_flags::forget_lanes},
    {"forget_ram", &config::defect_flags::forget_ram},
    {"requeue_live_on_recovery", &config::defect_flags::requeue_live_on_recovery},
    {"forget_queued_on_recovery", &config::defect_flags::forget_queued_on_recovery},
    {"drop_exit_reports", &config::defect_flags::drop_exit_reports},
    {"starve_low", &config::defect_flags::starve_low},
    {"reconcile_by_arrival", &config::defect_flags::reconcile_by_arrival},
    {"ignore_client_job_ids", &config::defect_flags::ignore_client_job_ids},
    {"forget_replays", &config::defect_flags::forget_replays},
    {"store_sync_normal", &config::defect_flags::store_sync_normal},
    {"ignore_ownership", &config::defect_flags::ignore_ownership},
    {"serve_newest_first", &config::defect_flags::serve_newest_first},
    {"ignore_levels", &config::defect_flags::ignore_levels},
    {"report_success_always", &config::defect_flags::report_success_always},
    {"rerun_failed_on_recovery", &config::defect_flags::rerun_failed_on_recovery},
    {"lanes_from_zero", &config::defect_flags::lanes_from_zero},
    {"forget_cpus", &config::defect_flags::forget_cpus},
    {"forget_vram", &config::defect_flags::forget_vram},
    {"ignore_cancel", &config::defect_flags::ignore_cancel},
    {"refuse_late_exit_reports", &config::defect_flags::refuse_late_exit_reports},
};

} // namespace

std::vector<std::string> defect_names() {
  std::vector<std::string> out;
  for (auto& [name, _] : defect_table)
    out.emplace_back(name);
  return out;
}

namespace detail {

bool set_defect(config::defect_flags& d, const std::string& name) {
  for (auto& [n, flag] : defect_table)
    if (name == n) {
      d.*flag = true;
      return true;
    }
  return false;
}

void world::schedule_faults() {
  auto& f = opt_.faults;
  auto every = [&](bool on, std::int64_t lo, std::int64_t hi, std::function<void()> act) {
    if (!on)
      return;
    for (auto t = uniform(rng_, lo, hi); t < fault_end_ms_; t += uniform(rng_, lo, hi))
      at(t, act);
  };
  auto pick = [this] {
    return static_cast<std::size_t>(uniform(rng_, 0, static_cast<std::int64_t>(nodes_.size()) - 1));
  };
  every(f.partitions, 20'000, 120'000, [this, pick] {
    auto i = pick();
    auto d = uniform(rng_, 1000, 25'000);
    auto& n = nodes_[i];
    if (n.partitioned)
      return;
    n.partitioned = true;
    // Half of them keep the connection: frames wait in the sockets, and each
    // side reads its backlog at once when the partition ends.
    n.keeps_connection = chance(rng_, 0.5);
    n.backlog_in.clear();
    n.backlog_out.clear();
    ++res_.faults[n.keeps_connection ? "partition" : "partition_breaking_connection"];
    trace(fmt::format("{} partitioned for {} ms ({})", n.name, d,
                      n.keeps_connection ? "the connection holds" : "the connection breaks"));
    at(now() + d, [this, i] { end_partition(i); });
  });
  every(f.reconnects, 20'000, 100'000, [this, pick] {
    auto i = pick();
    nodes_[i].reconnect();
    ++res_.faults["reconnect"];
    trace(fmt::format("{} reconnects as {}", nodes_[i].name, nodes_[i].peer()));
  });
  every(f.node_crashes, 30'000, 200'000, [this, pick] {
    auto i = pick();
    if (!nodes_[i].model->up())
      return;
    ++res_.faults["node_crash"];
    nodes_[i].model->crash();
    at(now() + uniform(rng_, 1000, 30'000), [this, i] {
      if (!nodes_[i].model->up())
        boot_node(i);
    });
  });
  every(f.machine_crashes, 60'000, 400'000, [this, pick] {
    auto i = pick();
    if (!nodes_[i].model->up())
      return;
    // Every other one after the kernel wrote everything back, with the
    // next boot's processes in the old leaders' pids and start times (no
    // draw: the other faults' draws stay as they were).
    if (res_.faults["machine_crash"]++ % 2 == 1) {
      ++res_.faults["machine_crash_pids_reused"];
      nodes_[i].model->power_loss_pids_reused();
    } else {
      nodes_[i].model->power_loss();
    }
    at(now() + uniform(rng_, 5000, 60'000), [this, i] {
      if (!nodes_[i].model->up())
        boot_node(i);
    });
  });
  every(f.coordinator_crashes, 60'000, 400'000, [this, power = f.power_loss] {
    crash_coordinator("injected", power && chance(rng_, 0.5));
    at(now() + uniform(rng_, 500, 10'000), [this] {
      if (!coord_up_)
        start_coordinator();
    });
  });
  // Outside cq: a process takes VRAM on a lane for a while, or holds the GPU
  // lock probe (GPU starts are refused meanwhile).
  auto gpu_node = [this]() -> std::optional<std::size_t> {
    std::vector<std::size_t> gpu;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].model->spec().gpus)
        gpu.push_back(i);
    if (gpu.empty())
      return std::nullopt;
    return gpu[static_cast<std::size_t>(
        uniform(rng_, 0, static_cast<std::int64_t>(gpu.size()) - 1))];
  };
  every(f.gpu_faults, 40'000, 200'000, [this, gpu_node] {
    auto i = gpu_node();
    if (!i)
      return;
    auto lane = static_cast<int>(uniform(rng_, 0, nodes_[*i].model->spec().gpus - 1));
    auto bytes = static_cast<std::uint64_t>(uniform(rng_, 1, 20)) << 30;
    ++res_.faults["outside_gpu_process"];
    trace(fmt::format("{}: an outside process takes {} GiB on gpu{}", nodes_[*i].name, bytes >> 30,
                      lane));
    nodes_[*i].model->outside_gpu_process(lane, bytes);
    at(now() + uniform(rng_, 5000, 120'000),
       [this, i, lane] { nodes_[*i].model->outside_gpu_process(lane, 0); });
  });
  every(f.gpu_faults, 60'000, 300'000, [this, gpu_node] {
    auto i = gpu_node();
    if (!i)
      return;
    ++res_.faults["lock_probe_held"];
    trace(fmt::format("{}: an outside process holds the GPU lock probe", nodes_[*i].name));
    nodes_[*i].model->hold_lock_probe(true);
    at(now() + uniform(rng_, 2000, 60'000),
       [this, i] { nodes_[*i].model->hold_lock_probe(false); });
  });
  // An operator checks held machines now and then and releases their holds.
  every(f.escapees, 30'000, 120'000, [this] { release_holds(); });
  every(f.gpu_faults, 60'000, 300'000, [this] {
    std::vector<std::size_t> gpu;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].model->spec().gpus)
        gpu.push_back(i);
    if (gpu.empty())
      return;
    auto i =
        gpu[static_cast<std::size_t>(uniform(rng_, 0, static_cast<std::int64_t>(gpu.size()) - 1))];
    ++res_.faults["gpu_fault"];
    nodes_[i].model->inject_fault(uniform(rng_, 0, 1) ? 79 : 48);
    // An operator clears it after a while.
    auto name = nodes_[i].name;
    at(now() + uniform(rng_, 10'000, 120'000), [this, name] {
      call(bus::node_clear_fault_req{name, "checked by the operator"}, [](auto) {});
    });
  });
}

void world::release_holds() {
  for (auto& n : nodes_)
    for (auto& h : n.model->holds()) {
      trace(fmt::format("operator releases hold {} on {}", h.id, n.name));
      call(bus::release_req{h.id}, [](auto) {});
    }
}

void world::operator_rounds() {
  release_holds();
  at(now() + 30'000, [this] { operator_rounds(); });
}

void world::heal() {
  trace("faults end; liveness phase");
  liveness_ = true;
  opt_.faults.drop = opt_.faults.dup = 0;
  opt_.faults.reorder = false;
  plan_->fail = nullptr;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    end_partition(i);
    if (!nodes_[i].model->up())
      boot_node(i);
  }
  if (!coord_up_)
    start_coordinator();
  // Latched faults are cleared by the operator, again until none is left.
  for (int s = 0; s <= 10; ++s)
    at(now() + s * 5000, [this] {
      for (auto& n : nodes_)
        if (n.model->faulted())
          call(bus::node_clear_fault_req{n.name, "liveness phase"}, [](auto) {});
    });
  // Holds keep coming while jobs that leave processes behind still run: the
  // operator looks every 30 s until the run ends.
  operator_rounds();
}

} // namespace detail
} // namespace cq::sim
