// cq-sim's checkers (world.hpp lists them) and the report's samples.
#include "world_impl.hpp"

namespace cq::sim::detail {

void world::on_start(std::size_t i, const bus::start_order& o) {
  auto& n = nodes_[i];
  auto& m = *n.model;
  trace(fmt::format("{} starts {} of job {}", n.name, o.allocation, o.job));
  auto& live = live_by_job_[o.job];
  live.insert(o.allocation);
  if (auto k = index_of_.find(o.job); k != index_of_.end())
    live_cpus_[o.allocation] = jobs_[static_cast<std::size_t>(k->second)].spec.cpus.value_or(0);
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
  if (m.used_lanes() > static_cast<std::size_t>(s.gpus))
    violation(
        "lane_twice",
        fmt::format("{} runs {} lanes' worth of work on {} lanes", n.name, m.used_lanes(), s.gpus),
        {n.name, o.allocation});
  if (!started_.count(o.job)) {
    started_.insert(o.job);
    if (auto k = index_of_.find(o.job); k != index_of_.end()) {
      auto& jp = jobs_[static_cast<std::size_t>(k->second)];
      if (auto a = acked_at_.find(o.job); a != acked_at_.end())
        res_.levels[jp.level].waits_ms.push_back(now() - a->second);
      // Backfill: an earlier job of the same or a higher level still waits.
      for (int e = 0; e < k->second; ++e) {
        auto& id = job_ids_[static_cast<std::size_t>(e)];
        if (!id.empty() && !started_.count(id) &&
            jobs_[static_cast<std::size_t>(e)].level <= jp.level &&
            !is_terminal(plan_->job_states[id])) {
          ++res_.backfilled;
          break;
        }
      }
    }
  }
}

/// Checker job_missing: a restarted coordinator lists every acknowledged job.
void world::check_listing() {
  auto acked = acked_at_.size();
  bus::ls_req r;
  r.all = true;
  r.limit = 1;
  call(r, [this, acked](std::optional<api_reply> rep) {
    if (!rep)
      return; // crashed again meanwhile
    auto* ls = std::get_if<bus::ls_rep>(&rep->body);
    if (!ls)
      return;
    auto total = ls->total.value_or(0);
    if (total < acked)
      violation("job_missing", fmt::format("after a restart the coordinator lists {} jobs; {} "
                                           "were acknowledged",
                                           total, acked));
  });
}

bool world::done() const {
  return liveness_ && pending_submits_ == 0 && plan_->open_jobs == 0;
}

void world::sample() {
  auto t = now();
  if (t - last_sample_ms_ < 1000)
    return;
  auto dt = static_cast<double>(t - last_sample_ms_);
  last_sample_ms_ = t;
  std::uint64_t ram = 0, lanes = 0;
  for (auto& n : nodes_) {
    ram += n.model->reserved_ram();
    lanes += n.model->used_lanes();
  }
  std::uint64_t cpus = 0;
  for (auto& [_, c] : live_cpus_)
    cpus += c;
  auto frac = [](std::uint64_t used, std::uint64_t total) {
    return total ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  };
  ram_area_ += dt * frac(ram, ram_total_);
  gpu_area_ += dt * frac(lanes, lanes_total_);
  cpu_area_ += dt * frac(cpus, cpus_total_);
  bucket_.ram += dt * frac(ram, ram_total_);
  bucket_.cpu += dt * frac(cpus, cpus_total_);
  bucket_.gpu += dt * frac(lanes, lanes_total_);
  if (t - bucket_.t_ms >= 60'000) {
    auto span = static_cast<double>(t - bucket_.t_ms);
    res_.series.push_back(
        {bucket_.t_ms, bucket_.ram / span, bucket_.cpu / span, bucket_.gpu / span});
    bucket_ = {t, 0, 0, 0};
  }
}

} // namespace cq::sim::detail
