// cq-sim's checkers (world.hpp lists them) and the report's samples.
#include "world_impl.hpp"

namespace cq::sim::detail {

void world::on_start(std::size_t i, const bus::start_order& o) {
  auto& n = nodes_[i];
  auto& m = *n.model;
  trace(fmt::format("{} starts {} of job {}", n.name, o.allocation, o.job));
  auto& live = live_by_job_[o.job];
  live.insert(o.allocation);
  starts_[o.job].emplace_back(i, o.allocation);
  auto cpus_of = [&](const std::string& job) -> std::uint64_t {
    auto j = plan_index(job);
    return j ? jobs_[*j].spec.cpus.value_or(0) : 0;
  };
  if (!n.live.count(o.allocation)) {
    sample(); // the usage so far, before this start changes it
    auto c = cpus_of(o.job);
    live_cpus_[o.allocation] = c;
    ram_now_ += o.ram_bytes.value_or(0);
    lanes_now_ += o.lanes ? o.lanes->size() : 0;
    cpus_now_ += c;
  }
  // Two running copies are allowed only where ADR 0021 allows them: every
  // other one was given away after its node was down for the job's lost-after
  // (and that node, cut off, kept running it until it hears the stop).
  auto given_away = std::count_if(live.begin(), live.end(), [&](const std::string& a) {
    return plan_->lost_while_down.count(a) != 0;
  });
  if (live.size() > 1 && given_away == static_cast<std::ptrdiff_t>(live.size()) - 1)
    ++res_.overlaps_after_loss;
  else if (live.size() > 1)
    violation("job_twice", fmt::format("job {} has {} live allocations", o.job, live.size()), [&] {
      std::vector<std::string> s{o.job};
      s.insert(s.end(), live.begin(), live.end());
      return s;
    }());
  auto& s = m.spec();
  if (m.reserved_ram() > s.mem_total_bytes - s.ram_reserve_bytes)
    violation("ram_over",
              fmt::format("{} holds {} MiB of RAM caps; {} MiB are allocatable", n.name,
                          m.reserved_ram() >> 20, (s.mem_total_bytes - s.ram_reserve_bytes) >> 20),
              {n.name, o.allocation});
  n.live[o.allocation] = o;
  // Lane identity: no lane is named by two running workloads' orders, and
  // the VRAM they reserve on a lane fits the lane.
  for (auto& lane : o.lanes.value_or(bus::string_list{})) {
    std::uint64_t vram = 0;
    for (auto& [a, other] : n.live) {
      auto& ls = other.lanes;
      if (!ls || std::find(ls->begin(), ls->end(), lane) == ls->end())
        continue;
      vram += other.vram_bytes.value_or(0);
      if (a != o.allocation)
        violation("lane_twice",
                  fmt::format("{} runs allocation {} (job {}) on {}, which allocation {} (job "
                              "{}) still runs on",
                              n.name, o.allocation, o.job, lane, a, other.job),
                  {n.name, o.allocation, a});
    }
    auto lane_vram = s.vram_of(std::atoi(lane.c_str() + 3)); // "gpu<index>"
    if (vram > lane_vram)
      violation("vram_over",
                fmt::format("{}: the workloads running on {} reserve {} MiB of VRAM; the lane has "
                            "{} MiB",
                            n.name, lane, vram >> 20, lane_vram >> 20),
                {n.name, o.allocation});
  }
  std::uint64_t cpus = 0;
  for (auto& [a, other] : n.live)
    cpus += cpus_of(other.job);
  if (s.cpus && cpus > s.cpus)
    violation("cpu_over",
              fmt::format("{} runs workloads that hold {} CPUs; it has {}", n.name, cpus, s.cpus),
              {n.name, o.allocation});
  if (!started_.count(o.job)) {
    started_.insert(o.job);
    first_start_.try_emplace(o.job, now(), i);
    if (auto k = index_of_.find(o.job); k != index_of_.end()) {
      auto& jp = jobs_[static_cast<std::size_t>(k->second)];
      waiting_[static_cast<std::size_t>(jp.level)].erase(k->second);
      if (auto a = acked_at_.find(o.job); a != acked_at_.end())
        res_.levels[jp.level].waits_ms.push_back(now() - a->second);
      // Backfill: an earlier job of the same or a higher level still waits.
      for (int l = 0; l <= jp.level; ++l) {
        auto& w = waiting_[static_cast<std::size_t>(l)];
        if (!w.empty() && *w.begin() < k->second) {
          ++res_.backfilled;
          break;
        }
      }
    }
  }
}

// Checker serving_order, on each placement pass, in two halves:
//  - the queue the pass serves is in serving order as the clients made it:
//    levels first (high, medium, low), and within a level a job acknowledged
//    before another was first sent is ahead of it (jobs whose owner sent a
//    move are left out);
//  - the plan serves that order: no job starts on a node while a job ahead of
//    it that needs no more of anything (RAM, floors, CPUs, GPUs, VRAM per
//    lane, estimate) and may run there stays queued. Such a job fit the node
//    at its own turn, when less of the pass was planned, and every backfill
//    rule that let the later job start lets it start too. A GPU job beside a
//    reservation on the node is left out (the reserved lanes are fixed, and
//    the smaller job may prefer one of them).
void world::check_pass(const policy::cluster_view& c, policy::queue_ref queue,
                       const policy::plan& p) {
  auto index = [&](const std::string& id) -> std::optional<std::size_t> {
    auto k = plan_of_.find(id);
    return k == plan_of_.end() ? std::nullopt : std::optional(k->second);
  };
  int deepest = 0; // the lowest level seen so far
  std::string deepest_job;
  struct latest {
    std::int64_t sent = -1;
    std::string job;
  };
  std::map<int, latest> sent_last; // per level: the latest first send ahead
  for (const auto* queued : queue) {
    auto& j = *queued;
    auto k = index(j.id);
    if (!k)
      continue;
    auto level = jobs_[*k].level;
    if (static_cast<int>(j.priority) != level) {
      violation("serving_order",
                fmt::format("job {} is queued at level {}; it was submitted at level {}", j.id,
                            policy::to_string(j.priority),
                            policy::to_string(static_cast<policy::level>(level))),
                {j.id});
      return;
    }
    if (level < deepest) {
      violation("serving_order",
                fmt::format("job {} ({}) is queued behind job {} ({})", j.id,
                            policy::to_string(static_cast<policy::level>(level)), deepest_job,
                            policy::to_string(static_cast<policy::level>(deepest))),
                {j.id, deepest_job});
      return;
    }
    deepest = level, deepest_job = j.id;
    if (moved_.count(*k))
      continue;
    auto& last = sent_last[level];
    if (auto acked = acked_ms_[*k]; acked >= 0 && acked < last.sent) {
      violation("serving_order",
                fmt::format("job {} is queued behind job {}, which was submitted {} ms after "
                            "job {} was acknowledged",
                            j.id, last.job, last.sent - acked, j.id),
                {j.id, last.job});
      return;
    }
    if (first_sent_[*k] > last.sent)
      last = {first_sent_[*k], j.id};
  }
  if (p.starts.empty())
    return;
  std::set<std::string> starting;
  for (auto& s : p.starts)
    starting.insert(s.job);
  for (auto& s : p.starts) {
    // Its place in the queue (a pass starts a few jobs: a scan each costs less
    // than an index of the whole queue, pass after pass).
    auto at = std::find_if(queue.begin(), queue.end(), [&](auto* q) { return q->id == s.job; });
    auto node = std::find_if(c.nodes.begin(), c.nodes.end(),
                             [&](const policy::node_view& n) { return n.name == s.node; });
    if (at == queue.end() || node == c.nodes.end() || !node->grant_job.empty())
      continue;
    auto& j = **at;
    for (std::size_t i = 0; i < static_cast<std::size_t>(at - queue.begin()); ++i) {
      auto& k = *queue[i];
      if (starting.count(k.id) || (k.pinned_node && *k.pinned_node != s.node) ||
          (node->run_as &&
           std::find(node->run_as->begin(), node->run_as->end(), k.owner) == node->run_as->end()) ||
          (k.gpus && p.reserved && p.reserved->node == s.node))
        continue;
      if (k.ram_bytes <= j.ram_bytes && k.ram_floor_bytes <= j.ram_floor_bytes &&
          k.ram_start_min_bytes <= j.ram_start_min_bytes && k.cpus <= j.cpus && k.gpus <= j.gpus &&
          (!k.gpus || k.vram_bytes <= j.vram_bytes) && k.est_ms <= j.est_ms) {
        violation("serving_order",
                  fmt::format("job {} starts on {} while job {}, ahead of it and no larger, "
                              "stays queued",
                              j.id, s.node, k.id),
                  {j.id, k.id, s.node});
        return;
      }
    }
  }
}

void world::on_end(std::size_t i, const std::string& alloc, const std::string& job) {
  live_by_job_[job].erase(alloc);
  auto& live = nodes_[i].live;
  if (auto it = live.find(alloc); it != live.end()) {
    sample(); // the usage so far, before this end changes it
    ram_now_ -= it->second.ram_bytes.value_or(0);
    lanes_now_ -= it->second.lanes ? it->second.lanes->size() : 0;
    cpus_now_ -= live_cpus_[alloc];
    live.erase(it);
  }
  live_cpus_.erase(alloc);
}

std::optional<std::size_t> world::plan_index(const std::string& job) const {
  if (auto k = index_of_.find(job); k != index_of_.end())
    return static_cast<std::size_t>(k->second);
  if (auto k = plan_of_.find(job); k != plan_of_.end())
    return k->second;
  return std::nullopt;
}

std::optional<std::string> world::forbidden_outcome(const bus::job_info& j) const {
  auto k = plan_index(j.id);
  if (!k || !is_terminal(j.state))
    return std::nullopt;
  auto& jp = jobs_[*k];
  auto& w = jp.w;
  auto& s = jp.spec;
  auto opt = [](const std::optional<std::int64_t>& v) {
    return v ? fmt::format("{}", *v) : std::string("none");
  };
  auto script = [&] {
    return w.crash_signal ? fmt::format("its workload dies by signal {}", w.crash_signal)
                          : fmt::format("its workload exits {}", w.exit_code);
  };
  switch (j.state) {
  case job_state::succeeded:
    if (w.exit_code != 0 || w.crash_signal)
      return script();
    if (j.reason != bus::reason::none || j.exit_code.value_or(-1) != 0 || j.signal)
      return fmt::format("recorded with reason {}, exit code {}, signal {}", j.reason,
                         opt(j.exit_code), opt(j.signal));
    return std::nullopt;
  case job_state::cancelled:
    if (j.reason != bus::reason::cancelled)
      return fmt::format("cancelled with reason {}", j.reason);
    if (!cancel_sent_.count(*k))
      return std::string("no client cancelled it");
    return std::nullopt;
  default:
    break;
  }
  // Failed: the reason must be one the workload can produce.
  switch (j.reason) {
  case bus::reason::exit_code:
    if (!w.crash_signal && w.exit_code != 0 && j.exit_code == w.exit_code && !j.signal)
      return std::nullopt;
    return fmt::format("exit code {} recorded; {}", opt(j.exit_code), script());
  case bus::reason::signal: {
    if (w.crash_signal && j.signal == w.crash_signal)
      return std::nullopt;
    // A stop for a reason of the node's own (a timeout, a VRAM cap, the RAM
    // watchdog) keeps that reason across a daemon restart (control/stop-reason):
    // no tolerance here (seed 10184 with 300 jobs found it missing).
    return fmt::format("signal {} recorded; {}", opt(j.signal), script());
  }
  case bus::reason::timeout:
    if (s.timeout_ms)
      return std::nullopt;
    return std::string("it has no timeout");
  case bus::reason::oom:
    if (w.over_cap)
      return std::nullopt;
    return std::string("its workload stays under its RAM cap");
  case bus::reason::vram_cap:
    if (s.vram_bytes && w.vram_bytes > *s.vram_bytes)
      return std::nullopt;
    return std::string("its workload stays under its declared VRAM");
  case bus::reason::lost:
    if (s.no_requeue.value_or(false))
      return std::nullopt;
    return std::string("it was submitted without --no-requeue");
  case bus::reason::dependency_failed: {
    auto& dep = dep_sent_[*k];
    if (dep.empty())
      return std::string("it was submitted without a dependency");
    auto d = plan_->job_states.find(dep);
    if (d == plan_->job_states.end() || !is_terminal(d->second) ||
        d->second == job_state::succeeded)
      return fmt::format("its dependency {} is {}", dep,
                         d == plan_->job_states.end() ? std::string("unknown")
                                                      : std::string(to_string(d->second)));
    return std::nullopt;
  }
  case bus::reason::launch_failed:
    // The node fails a launch whose state it cannot write (a full disk, EIO;
    // tests/integration/test_node_exit_durable.sh): only after such a fault.
    if (disk_failed_allocs_.count(j.allocation))
      return std::nullopt;
    return std::string("no disk fault hit its launch");
  default:
    return fmt::format("reason {} never ends a job of this workload", j.reason);
  }
}

std::vector<std::string> world::subjects_of(const std::string& job) const {
  std::vector<std::string> s{job};
  if (auto a = starts_.find(job); a != starts_.end())
    for (auto& [node, alloc] : a->second)
      s.push_back(alloc);
  return s;
}

void world::observe(const bus::job_info& j, bool committed) {
  // A job seen terminal keeps that state and reason. Commits come in order,
  // and so do listings; a listing shows a job terminal only once that was
  // committed, but it may lag a commit (the api hears of it after the
  // store): a listing is compared with earlier listings, and with the
  // commits of earlier incarnations (a restarted coordinator lists what its
  // recovery read from the store).
  auto compare = [&](const std::map<std::string, terminal_seen>& seen, const char* how) {
    auto t = seen.find(j.id);
    if (t == seen.end() || (t->second.state == j.state && t->second.reason == j.reason))
      return;
    if (!committed && &seen == &committed_end_ && t->second.gen >= gen_)
      return;
    violation("terminal_changed",
              fmt::format("job {} was {} ({}) as {} at {:.3f} s; now it is {} ({}) as {}", j.id,
                          t->second.state, t->second.reason, how,
                          static_cast<double>(t->second.at_ms) / 1000, j.state, j.reason,
                          committed ? "committed" : "listed"),
              subjects_of(j.id));
  };
  compare(listed_end_, "listed");
  compare(committed_end_, "committed");
  if (!is_terminal(j.state))
    return;
  auto& seen = committed ? committed_end_ : listed_end_;
  if (!seen.try_emplace(j.id, terminal_seen{j.state, j.reason, now(), gen_}).second)
    return;
  if (committed)
    if (auto k = index_of_.find(j.id); k != index_of_.end())
      waiting_[static_cast<std::size_t>(jobs_[static_cast<std::size_t>(k->second)].level)].erase(
          k->second);
  if (auto why = forbidden_outcome(j))
    violation("outcome",
              fmt::format("job {} ended {} ({}), which its workload script does not permit: {}",
                          j.id, j.state, j.reason, *why),
              subjects_of(j.id));
  // An acknowledged cancel is carried out: the job ends cancelled unless its
  // end was committed before the acknowledgement.
  if (auto c = cancel_acked_.find(j.id);
      committed && c != cancel_acked_.end() && j.state != job_state::cancelled)
    violation("cancel_lost",
              fmt::format("job {} ended {} ({}) although its cancel was acknowledged at {:.3f} s",
                          j.id, j.state, j.reason, static_cast<double>(c->second) / 1000),
              subjects_of(j.id));
}

void world::poll_jobs(bool again, std::optional<std::uint64_t> cursor) {
  if (stopped_)
    return;
  if (!coord_up_) {
    if (again)
      at(now() + poll_every_ms_, [this] { poll_jobs(true); });
    return;
  }
  bus::ls_req r;
  r.all = true;
  r.cursor = cursor;
  call(r, [this, again](std::optional<api_reply> rep) {
    auto* ls = rep ? std::get_if<bus::ls_rep>(&rep->body) : nullptr;
    if (ls)
      for (auto& j : ls->jobs)
        observe(j, false);
    if (ls && ls->next_cursor)
      poll_jobs(again, ls->next_cursor);
    else if (again)
      at(now() + poll_every_ms_, [this] { poll_jobs(true); });
  });
}

std::string world::busy_node() const {
  for (auto& n : nodes_)
    if (auto why = n.model->busy(drain_from_ms_); !why.empty())
      return n.name + ": " + why;
  return "";
}

/// Checker job_missing: a restarted coordinator (after a crash or a power
/// loss) lists every job acknowledged before it started, by id.
void world::check_listing() {
  auto acked = std::make_shared<std::set<std::string>>();
  for (auto& [id, _] : acked_at_)
    acked->insert(id);
  auto gen = gen_;
  list_page(gen, acked, std::nullopt);
}

void world::list_page(std::uint64_t gen, std::shared_ptr<std::set<std::string>> missing,
                      std::optional<std::uint64_t> cursor) {
  bus::ls_req r;
  r.all = true;
  r.cursor = cursor;
  call(r, [this, gen, missing](std::optional<api_reply> rep) {
    auto* ls = rep ? std::get_if<bus::ls_rep>(&rep->body) : nullptr;
    if (!ls || gen != gen_)
      return; // crashed again meanwhile
    for (auto& j : ls->jobs)
      missing->erase(j.id);
    if (ls->next_cursor) {
      list_page(gen, missing, ls->next_cursor);
      return;
    }
    for (auto& id : plan_->forgotten) // a committed history expiry forgot them
      missing->erase(id);
    if (!missing->empty())
      violation("job_missing",
                fmt::format("after a restart the coordinator does not list {} acknowledged "
                            "job(s), among them {}",
                            missing->size(), *missing->begin()),
                {*missing->begin()});
  });
}

bool world::done() const {
  return liveness_ && pending_submits_ == 0 && plan_->open_jobs == 0;
}

void world::sample() {
  // Exact: called before every change of what live allocations hold, it
  // adds the time since the last change at the usage held meanwhile.
  auto t = now();
  auto frac = [](std::uint64_t used, std::uint64_t total) {
    return total ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  };
  auto ram = frac(ram_now_, ram_total_), gpu = frac(lanes_now_, lanes_total_),
       cpu = frac(cpus_now_, cpus_total_);
  auto dt = static_cast<double>(t - last_sample_ms_);
  ram_area_ += dt * ram;
  gpu_area_ += dt * gpu;
  cpu_area_ += dt * cpu;
  // The rows over time: a minute each, split where a change falls.
  constexpr std::int64_t row_ms = 60'000;
  for (auto from = last_sample_ms_; from < t;) {
    auto to = std::min(t, bucket_.t_ms + row_ms);
    auto d = static_cast<double>(to - from);
    bucket_.ram += d * ram, bucket_.cpu += d * cpu, bucket_.gpu += d * gpu;
    from = to;
    if (to == bucket_.t_ms + row_ms) {
      res_.series.push_back(
          {bucket_.t_ms, bucket_.ram / row_ms, bucket_.cpu / row_ms, bucket_.gpu / row_ms});
      bucket_ = {to, 0, 0, 0};
    }
  }
  last_sample_ms_ = t;
}

} // namespace cq::sim::detail
