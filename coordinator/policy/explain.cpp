// The words for a job that waits: per node, why it does not start there
// (placement.hpp: explain). The same tests as the pass, in words.
#include "cq/units.hpp"
#include "never_fits.hpp"
#include "placement.hpp"
#include "placement_internal.hpp"

#include <fmt/format.h>

namespace cq::policy {

using namespace detail;

namespace {

/// ", in ~1h30m by estimates": when reservation `r` starts, as the
/// estimates of what runs before it say; "" once it is due. A time that
/// waits on a job whose estimate is the default (a command not measured
/// yet, no --est) is a guess, not a countdown: it says so instead.
std::string in_about(const reservation& r, std::int64_t now) {
  auto ms = r.at_ms - now;
  if (ms < 1000)
    return {};
  if (r.guessed)
    return ", once a running job ends (no estimate of it yet)";
  return fmt::format(", in ~{} by estimates", format_duration_ms(static_cast<std::uint64_t>(ms)));
}

} // namespace

std::vector<std::string> explain(const cluster_view& c, const job_view& j,
                                 const std::optional<reservation>& reserved,
                                 const std::optional<job_view>& reserved_job, std::int64_t now) {
  std::vector<std::string> out;
  if (j.group_limit)
    if (auto running = group_counts(c)[j.group]; running >= j.group_limit)
      return {fmt::format("its array runs at most {} task{} at once (--array ...%{}); {} hold "
                          "allocations now",
                          j.group_limit, j.group_limit == 1 ? "" : "s", j.group_limit, running)};
  auto p = prepare(c, now);
  // What the reserved job leaves over on its node at its reserved time.
  std::optional<shadow> res_shadow;
  if (reserved && reserved_job && reserved_job->id != j.id)
    if (auto at = p.find(reserved->node)) {
      std::vector<release> rel;
      for (std::size_t k = 0; k < c.allocations.size(); ++k)
        if (p.alloc_node[k] == at)
          release_of(c, p, k, now, rel.emplace_back());
      res_shadow = earliest_fit(p.nodes[*at], *reserved_job, rel, now);
    }
  bool fits_somewhere = false;
  for (auto& s : p.nodes) {
    auto& n = *s.view;
    if (j.pinned_node && *j.pinned_node != n.name)
      continue;
    std::string why;
    if (!n.approved)
      why = "not approved";
    else if (!maps(n, j))
      why = fmt::format("runs no job of identity {} (it has no run-as mapping for it)", j.owner);
    else if (!n.enabled && n.grant_job.empty())
      why = "disabled";
    else if (!n.enabled && n.grant_job != j.id)
      why = fmt::format("disabled (its diagnostic grant is for job {} only)", n.grant_job);
    else if (n.held)
      why = n.hold.empty() ? std::string("in a hold until a person releases it")
                           : fmt::format("in hold {} until a person checks the machine and "
                                         "releases it (cq release --hold {})",
                                         n.hold, n.hold);
    else if (n.down)
      why = "down (no heartbeat for the node timeout)";
    else if (n.fenced)
      why = fmt::format("stopping {} allocation{} given away while it was unreachable", n.fenced,
                        n.fenced == 1 ? "" : "s");
    else if (n.last_heartbeat_ms == 0)
      why = "no heartbeat yet";
    else if (!fresh(n, c, now))
      why = fmt::format("no heartbeat for {}s", (now - n.last_heartbeat_ms) / 1000);
    else if (j.gpus > 0 && n.gpu_fault)
      why = "GPU fault latched; no GPU jobs until the Owner clears it";
    else if (j.gpus > 0 && n.gpu_probe_busy)
      why = "a GPU lock probe is held by a process outside cq; no GPU jobs";
    else if (auto nv = never_fits(n, j); nv != never::none)
      why = "can never fit here: " + never_words(n, j, nv);
    else if (j.ram_bytes > s.free_ram)
      why = fmt::format("needs {} RAM, {} allocatable after {} reservation{}", gib(j.ram_bytes),
                        gib(s.free_ram), s.reservations, s.reservations == 1 ? "" : "s");
    else if (j.cpus > s.free_cpus)
      why = fmt::format("needs {} CPU{}, {} free", j.cpus, j.cpus == 1 ? "" : "s", s.free_cpus);
    else if (j.gpus > 0) {
      std::size_t usable = 0;
      for (std::size_t l = 0; l < n.lanes.size(); ++l)
        if (!s.lane_busy[l] && lane_fits(n, l, j))
          ++usable;
      if (usable < j.gpus) {
        why = fmt::format("needs {} GPU lane{} with {} VRAM free, {} of {} usable", j.gpus,
                          j.gpus == 1 ? "" : "s", gib(j.vram_bytes), usable, n.lanes.size());
        // A held lane waits for a person: say which hold and how it ends.
        for (auto& l : n.lanes)
          if (l.held && !l.hold.empty())
            why += fmt::format("; {} is in hold {} until a person checks it and releases it "
                               "(cq release --hold {})",
                               l.name, l.hold, l.hold);
      }
    }
    if (why.empty()) {
      auto floor = std::max(s.floor, j.ram_floor_bytes);
      if (!admits(s.available, floor, j)) {
        if (static_cast<__int128>(s.available) - j.ram_bytes < floor)
          why = fmt::format("RAM floor: {} available after reservations, needs {} cap + {} floor",
                            gib_available(s.available), gib(j.ram_bytes), gib(floor));
        else
          why = fmt::format("start minimum: needs {} available, {} after reservations",
                            gib(j.ram_start_min_bytes), gib_available(s.available));
      }
    }
    auto within_extra = [&] {
      if (!res_shadow || !leaves_room(*res_shadow, n, *reserved_job, j))
        return false;
      std::uint64_t lanes = 0;
      for (std::size_t l = 0; l < n.lanes.size(); ++l)
        lanes += (!s.lane_busy[l] && res_shadow->extra_lane[l] && lane_fits(n, l, j)) ? 1 : 0;
      return lanes >= j.gpus;
    };
    if (why.empty() && reserved && reserved->node == n.name && reserved->job != j.id &&
        now + j.est_ms > reserved->at_ms && !within_extra())
      why = fmt::format("would delay job {}, next here{}", reserved->job, in_about(*reserved, now));
    if (!why.empty())
      out.push_back(fmt::format("{}: {}", n.name, why));
    else
      fits_somewhere = true;
  }
  if (fits_somewhere)
    return {};
  if (j.pinned_node && out.empty() && !p.find(*j.pinned_node))
    out.push_back(fmt::format("{}: no node of that name has joined", *j.pinned_node));
  if (c.nodes.empty())
    out.push_back("no nodes have joined");
  if (!out.empty() && reserved && reserved->job == j.id)
    out.insert(out.begin(), fmt::format("next on {}{}", reserved->node, in_about(*reserved, now)));
  return out;
}

} // namespace cq::policy
