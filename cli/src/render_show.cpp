// cq show's view (render.hpp): sections with labels and values, then the
// allocations; and the clock times it and cq events print.
#include "cq/bus/output_pattern.hpp"
#include "cq/cli/render.hpp"
#include "render_detail.hpp"

#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"
#include "cq/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

namespace cq::cli {

using namespace render_detail;

std::string clock_time(std::int64_t at_ms, std::int64_t now_ms) {
  if (local_clock(at_ms, "%F") == local_clock(now_ms, "%F"))
    return local_clock(at_ms, "%T");
  return local_clock(at_ms, "%F %R");
}

std::string render_show(const bus::show_rep& rep, std::int64_t now, const render_style& style,
                        const show_context& ctx) {
  const auto& j = rep.job;
  using lines_t = std::vector<std::pair<std::string, std::string>>;
  std::vector<std::pair<std::string, lines_t>> sections;
  sections.reserve(8); // the references below stay valid
  auto& job = sections.emplace_back("Job", lines_t{}).second;
  auto when = [&](std::int64_t at) {
    return fmt::format("{} ({} ago)", clock_time(at, now), format_age(now - at));
  };
  auto dur = [](std::int64_t ms) {
    return format_duration_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, ms)));
  };
  job.emplace_back("id", j.id);
  job.emplace_back("name", j.name.empty() ? "-" : j.name);
  auto state = paint(std::string(to_string(j.state)), state_colour(j.state), style.colour);
  if (bus::is_terminal(j.state) && j.state != job_state::cancelled)
    state += ": " + outcome_words(j);
  else if (j.state == job_state::cancelled && j.reason != bus::reason::cancelled &&
           j.reason != bus::reason::none)
    state += ": " + reason_words(j.reason);
  else if (j.state == job_state::cancelled && !j.cancelled_by.empty())
    state += " by " + escape_control(j.cancelled_by);
  else if (!bus::is_terminal(j.state) && j.state != job_state::queued && !j.node.empty())
    state += " on " + escape_control(j.node);
  else if (j.state == job_state::queued && j.on_hold)
    state += ", on hold (cq release lets it start)";
  job.emplace_back("state", state); // escaped above, around its colour
  job.emplace_back("owner", j.owner);
  job.emplace_back("command", j.argv.empty() ? "-" : shell_join(j.argv));
  job.emplace_back("directory", j.cwd.empty() ? "-" : j.cwd);
  if (j.pty) {
    job.emplace_back("output", fmt::format("a terminal (cq run --pty); its transcript: cq logs {}",
                                           j.id.substr(0, 8)));
  } else if (j.output.empty()) {
    job.emplace_back("output", fmt::format("cq logs {}", j.id.substr(0, 8)));
  } else {
    // The file of the current or last attempt, once a node is known (%n).
    auto index = j.array_index ? std::to_string(*j.array_index) : std::string();
    auto file =
        j.node.empty() ? j.output : bus::expand_output(j.output, {j.id, index, j.name, j.node});
    job.emplace_back("output",
                     fmt::format("{} (and cq logs {})", escape_control(file), j.id.substr(0, 8)));
  }
  if (j.priority != "medium" || ctx.verbose)
    job.emplace_back("priority", j.priority);

  auto& times = sections.emplace_back("Times", lines_t{}).second;
  times.emplace_back("submitted", j.submitted_ms ? when(j.submitted_ms) : "-");
  if (j.started_ms) {
    times.emplace_back("started", fmt::format("{}, after {} in the queue", when(j.started_ms),
                                              dur(j.started_ms - j.submitted_ms)));
    if (j.finished_ms)
      times.emplace_back("finished", when(j.finished_ms));
    times.emplace_back(j.finished_ms ? "ran" : "running for",
                       dur((j.finished_ms ? j.finished_ms : now) - j.started_ms));
  } else if (j.state == job_state::queued) {
    times.emplace_back("waiting for", dur(now - j.submitted_ms));
  } else if (j.finished_ms) {
    times.emplace_back("finished", when(j.finished_ms));
  }
  if (j.timeout_ms) {
    auto t = format_duration_ms(*j.timeout_ms);
    if (j.started_ms && !j.finished_ms)
      t += fmt::format(" (killed at {} if still running)",
                       clock_time(j.started_ms + static_cast<std::int64_t>(*j.timeout_ms), now));
    times.emplace_back("timeout", t);
  }
  if (j.est_ms || ctx.verbose)
    times.emplace_back("estimate",
                       format_duration_ms(j.effective_est_ms) +
                           (j.est_default ? " (the default: no --est, not measured yet)" : ""));

  auto& res = sections.emplace_back("Resources", lines_t{}).second;
  auto ram = format_bytes(j.effective_ram_bytes);
  if (!ctx.ram_source.empty())
    ram += " (" + ctx.ram_source + ")";
  res.emplace_back("RAM cap", ram);
  res.emplace_back("CPUs", j.cpus ? std::to_string(j.cpus) : "none reserved");
  if (j.gpus) {
    auto g = std::to_string(j.gpus);
    if (j.vram_bytes)
      g += fmt::format(", {} VRAM each", format_bytes(*j.vram_bytes));
    if (!j.lanes.empty()) {
      std::string lanes;
      for (const auto& l : j.lanes)
        lanes += (lanes.empty() ? "" : ",") + l;
      g += " (lanes " + lanes + ")";
    }
    res.emplace_back("GPUs", g);
  }
  if (j.ram_floor_bytes)
    res.emplace_back("RAM floor", format_bytes(j.ram_floor_bytes) + " kept free on the node");
  if (j.ram_start_min_bytes)
    res.emplace_back("start minimum",
                     format_bytes(j.ram_start_min_bytes) + " of MemAvailable to start");
  if (j.pinned_node)
    res.emplace_back("node", *j.pinned_node + " only");

  auto& pol = sections.emplace_back("Policy", lines_t{}).second;
  if (!j.after.empty()) {
    std::string deps;
    for (const auto& d : j.after)
      deps += (deps.empty() ? "" : ", ") + d.substr(0, 8);
    pol.emplace_back("after", deps + " (each must succeed)");
  }
  if (j.preempt != "never" || ctx.verbose) {
    pol.emplace_back("preempt", j.preempt);
    auto lease = format_duration_ms(j.lease_ms);
    // A running attempt may be asked to yield only at its lease boundaries.
    if (!rep.allocations.empty() && j.lease_ms && j.preempt != "never") {
      const auto& a = rep.allocations.back();
      if (a.state != bus::alloc_state::finished && a.started_ms) {
        auto ran = now - a.started_ms;
        auto l = static_cast<std::int64_t>(j.lease_ms);
        lease += fmt::format(" (next boundary in {})", dur((ran / l + 1) * l - ran));
      }
    }
    pol.emplace_back("lease", lease);
  }
  // Without --ram an OOM is cq's misjudgement, retried with more whatever
  // --retry-oom says ("1 used of 0" read as a contradiction).
  // The same under -v before any OOM: "0 used of 0" said no retry would
  // come, where cq's submit line said one would.
  if (!j.ram_bytes && (j.oom_retries || ctx.verbose))
    pol.emplace_back("OOM retries",
                     fmt::format("{} (cq raises a cap it chose after an OOM)", j.oom_retries));
  else if (j.retry_oom || j.oom_retries || ctx.verbose)
    pol.emplace_back("OOM retries",
                     fmt::format("{} used of {} (--retry-oom)", j.oom_retries, j.retry_oom));
  if (j.no_requeue || ctx.verbose)
    pol.emplace_back("if its node is lost",
                     j.no_requeue ? "fail (--no-requeue)"
                     : j.lost_after_ms
                         ? fmt::format("requeue after {}", format_duration_ms(j.lost_after_ms))
                         : std::string("wait for the node"));
  if (ctx.verbose)
    pol.emplace_back("profile", j.profile.empty() ? "-" : j.profile);
  if (j.diagnostic)
    pol.emplace_back("diagnostic", "yes (one start on a disabled node)");
  if (j.notify)
    pol.emplace_back("notify", "yes (the coordinator's per-job rules, --notify)");

  if (j.state == job_state::queued) {
    auto& q = sections.emplace_back("Queue", lines_t{}).second;
    q.emplace_back("position", fmt::format("#{} in {}", j.position, j.priority));
    for (std::size_t i = 0; i < rep.waiting.size(); ++i)
      q.emplace_back(i == 0 ? "waiting" : "", rep.waiting[i]);
  }

  std::string out;
  for (const auto& [title, lines] : sections) {
    if (lines.empty())
      continue;
    std::size_t w = 0;
    for (const auto& [k, v] : lines)
      w = std::max(w, k.size());
    out += (out.empty() ? "" : "\n") + title + "\n";
    for (const auto& [k, v] : lines) {
      // Values were escaped where they come from outside; labels are ours.
      auto value = k == "state" ? v : escape_control(v);
      auto indent = 2 + w + 2;
      auto room = style.width > indent + 20 ? style.width - indent : 0;
      auto parts = room && k != "state" ? wrap_words(value, room) : std::vector<std::string>{value};
      for (std::size_t i = 0; i < parts.size(); ++i)
        out += fmt::format("  {:<{}}  {}\n", i == 0 ? k : "", w, parts[i]);
    }
  }

  if (!rep.allocations.empty()) {
    out += "\nAttempts\n";
    table t;
    t.header = {"#", "NODE", "STATE", "OUTCOME", "PEAK RAM", "LANES", "STARTED", "RAN"};
    t.min_width = {1, 4, 5, 7, 8, 5, 7, 3};
    for (const auto& a : rep.allocations) {
      std::string lanes;
      for (const auto& l : a.lanes)
        lanes += (lanes.empty() ? "" : ",") + l;
      std::string outcome = "-";
      if (a.state == bus::alloc_state::finished) {
        bus::job_info as = j;
        as.reason = a.reason;
        as.exit_code = a.exit_code;
        as.signal = a.signal;
        as.state = a.exit_code == 0 && a.reason == bus::reason::none ? job_state::succeeded
                                                                     : job_state::failed;
        outcome = outcome_words(as, false);
      }
      auto ran = a.started_ms ? dur((a.finished_ms ? a.finished_ms : now) - a.started_ms)
                              : std::string("-");
      t.rows.push_back({std::to_string(a.attempt), a.node.empty() ? "-" : a.node,
                        std::string(to_string(a.state)), outcome,
                        a.peak_ram_bytes ? format_bytes(*a.peak_ram_bytes) : "-",
                        lanes.empty() ? "-" : lanes,
                        a.started_ms ? clock_time(a.started_ms, now) : "-", ran});
    }
    auto body = t.render(style);
    // Indented like the sections.
    std::size_t at = 0;
    while (at < body.size()) {
      auto nl = body.find('\n', at);
      out += "  " + body.substr(at, nl - at + 1);
      at = nl + 1;
    }
    if (rep.allocations_omitted && *rep.allocations_omitted)
      out += fmt::format("  ({} earlier attempts not shown)\n", *rep.allocations_omitted);
    const auto& a = rep.allocations.back();
    // The node's own words on how the last attempt ended (why a launch
    // failed, what a hold found): the outcome column has only its kind.
    if (a.state == bus::alloc_state::finished && !a.detail.empty()) {
      // A lost attempt's words are the coordinator's, not the node's.
      auto who = a.reason == bus::reason::lost ? std::string("lost")
                 : a.node.empty()              ? std::string("the node said")
                                               : escape_control(a.node) + " said";
      auto said = fmt::format("{}: {}", who, escape_control(clip(a.detail, 300)));
      auto room = style.width > 22 ? style.width - 2 : 0;
      for (auto& l : room ? wrap_words(said, room) : std::vector<std::string>{said})
        out += "  " + l + "\n";
    }
    if (a.yield_requested_ms)
      out += fmt::format("  yield requested {} ago\n", format_age(now - a.yield_requested_ms));
    if (!a.stop_cause.empty())
      out += fmt::format("  stop requested {} ago: {}\n", format_age(now - a.stop_requested_ms),
                         escape_control(a.stop_cause));
    if (a.state == bus::alloc_state::unknown)
      out += fmt::format("  node {} down for {}: the attempt is unknown{}\n", a.node,
                         format_age(now - a.unknown_since_ms),
                         j.lost_after_ms
                             ? fmt::format(", lost after {}", format_duration_ms(j.lost_after_ms))
                             : std::string(", never lost (--lost-after never)"));
  }
  return out;
}

} // namespace cq::cli
