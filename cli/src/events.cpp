// cq preempt, cq events and cq wait: the commands that ask about, or wait
// on, a job's event stream.
#include "commands.hpp"
#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace cq::cli {

int run_preempt(const std::string& job, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::preempt_rep>(bus::preempt_req{job});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("{} asked to yield", rep->job.id));
  return 0;
}

int run_events(const events_options& o) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  bus::events_req req;
  req.jobs = o.jobs;
  req.since = o.since;
  req.cursor = 0;
  // A follow waits for news on the coordinator (long poll) and survives its
  // restart: it asks again from the last cursor it printed, so nothing is
  // missed and nothing repeats (events are at least once: receivers
  // deduplicate by job and seq).
  std::int64_t unavailable_since = -1;
  constexpr std::int64_t unavailable_grace_ms = 120'000;
  std::map<std::string, std::string> names; // job id -> name, asked once per job
  auto name_of = [&](const std::string& id) -> const std::string& {
    auto it = names.find(id);
    if (it == names.end()) {
      auto shown = s->call<bus::show_rep>(bus::show_req{id});
      it = names.emplace(id, shown && !shown->job.name.empty() ? shown->job.name : "-").first;
    }
    return it->second;
  };
  for (;;) {
    if (o.follow)
      req.wait_ms = 2000; // well inside the client's reply timeout (5 s by default)
    auto rep = s->call<bus::events_rep>(req);
    if (!rep) {
      if (!o.follow || rep.error().code != errc::unavailable)
        return report_error(rep.error(), o.json);
      auto now = sys::mono_ms();
      if (unavailable_since < 0) {
        unavailable_since = now;
        fmt::print(stderr, "cq: {}; retrying\n", rep.error().message);
      }
      if (now - unavailable_since > unavailable_grace_ms)
        return report_error(rep.error(), o.json);
      sys::sleep_ms(500);
      continue;
    }
    unavailable_since = -1;
    std::string out;
    auto now = sys::wall_ms();
    for (auto& e : rep->events) {
      if (o.json) {
        append_json(out, e);
        out += '\n';
      } else
        out += escape_control(fmt::format("{}  {:<8} {:<16} {:>3} {:<13} {}",
                                          clock_time(e.at_ms, now), e.job.substr(0, 8),
                                          name_of(e.job), e.seq, e.kind, e.detail)) +
               "\n";
    }
    write_stdout(out);
    std::fflush(stdout); // a follower's reader (a pipe, a file) sees each event at once
    req.cursor = rep->cursor;
    if (!o.follow && rep->events.size() < bus::events_page)
      return 0;
  }
}

int run_wait(const std::vector<std::string>& jobs, double timeout_s, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  // Once the first answer came, a coordinator that stops answering (a restart)
  // is waited for: until --timeout if given, else for this long.
  constexpr std::int64_t unavailable_grace_ms = 60'000;
  auto start = sys::mono_ms();
  auto deadline = timeout_s >= 0 ? start + static_cast<std::int64_t>(timeout_s * 1000) : -1;
  auto given = expand_arrays(*s, jobs, false); // an array waits for all its tasks
  if (!given)
    return report_error(given.error(), json);
  std::vector<std::string> ids;
  for (const auto& j : *given)
    if (std::find(ids.begin(), ids.end(), j) == ids.end())
      ids.push_back(j);
  std::map<std::string, bus::job_info> last; // latest view of every job, by the id given
  std::map<std::string, std::string> said;   // why each waits, as last told
  std::set<std::string> pending(ids.begin(), ids.end());
  bool answered = false;
  std::int64_t unavailable_since = -1;
  std::uint64_t events_cursor = 0;
  while (!pending.empty()) {
    for (auto it = pending.begin(); it != pending.end();) {
      auto rep = s->call<bus::show_rep>(bus::show_req{*it});
      if (!rep) {
        auto now = sys::mono_ms();
        if (rep.error().code != errc::unavailable || !answered)
          return report_error(rep.error(), json);
        if (unavailable_since < 0)
          unavailable_since = now;
        auto give_up = deadline >= 0 ? deadline : unavailable_since + unavailable_grace_ms;
        if (now >= give_up)
          return report_error(rep.error(), json);
        break;
      }
      answered = true;
      unavailable_since = -1;
      if (!json)
        tell_waiting(*rep, said[*it]);
      last[*it] = rep->job;
      it = bus::is_terminal(rep->job.state) ? pending.erase(it) : std::next(it);
    }
    if (pending.empty())
      break;
    if (deadline >= 0 && sys::mono_ms() >= deadline) {
      std::string which;
      for (const auto& id : ids) {
        if (!pending.count(id))
          continue;
        auto st = last.count(id) ? std::string(to_string(last[id].state)) : std::string("unknown");
        which += fmt::format("{}{} ({})", which.empty() ? "" : ", ", id, st);
      }
      return report_error(
          {errc::unavailable, fmt::format("timed out after {}s waiting for {}", timeout_s, which)},
          json);
    }
    // Wait on the pending jobs' events instead of polling (at most 10 s, so a
    // lost notice or a restarted coordinator costs little).
    auto remaining = deadline >= 0 ? deadline - sys::mono_ms() : 10'000;
    bus::events_req ev;
    ev.jobs.assign(pending.begin(), pending.end());
    ev.cursor = events_cursor;
    ev.wait_ms = static_cast<std::uint64_t>(std::clamp<std::int64_t>(remaining, 1, 2000));
    if (auto er = s->call<bus::events_rep>(ev); er)
      events_cursor = er->cursor;
    else
      sys::sleep_ms(200);
  }
  std::string failed;
  std::size_t n_failed = 0;
  for (const auto& id : ids) {
    const auto& j = last[id];
    if (j.state == bus::job_state::succeeded)
      continue;
    ++n_failed;
    failed += fmt::format("{}{} {}", failed.empty() ? "" : ", ", id, j.state);
    if (auto why = outcome(j.reason, j.exit_code, j.signal); why != "-")
      failed += " (" + why + ")";
  }
  if (json) {
    if (n_failed == 0) {
      bus::ls_rep out;
      for (const auto& id : ids)
        out.jobs.push_back(last[id]);
      fmt::print("{}\n", json_text(out));
    }
  } else {
    std::string out;
    for (const auto& id : ids)
      out += escape_control(fmt::format("{} {}", id, last[id].state)) + "\n";
    write_stdout(out);
  }
  if (n_failed > 0)
    return report_error({errc::invalid_state, fmt::format("{} of {} job(s) did not succeed: {}",
                                                          n_failed, ids.size(), failed)},
                        json);
  return 0;
}

} // namespace cq::cli
