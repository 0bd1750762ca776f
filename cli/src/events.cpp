// cq preempt, cq events and cq wait: the commands that ask about, or wait
// on, a job's event stream.
#include "commands.hpp"
#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"
#include "render_detail.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace cq::cli {

namespace {

/// Whether an event of `kind` is a job's end (only those three are, ADR 0075).
bool ends_a_job(const std::string& kind) {
  return kind == "succeeded" || kind == "failed" || kind == "cancelled";
}

} // namespace

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
  // An array's name or id: the events of every one of its tasks.
  std::map<std::string, array_part> parts; // an array's tasks, with whether each ended
  auto given = expand_arrays(*s, o.jobs, false, nullptr, &parts);
  if (!given)
    return report_error(given.error(), o.json);
  if (given->size() > bus::events_max_jobs)
    return report_error({errc::invalid_argument,
                         fmt::format("cq events reads at most {} jobs at once, and these name {} "
                                     "(an array's tasks count one each): name fewer",
                                     bus::events_max_jobs, given->size())},
                        o.json);
  req.jobs = std::move(*given);
  req.since = o.since;
  req.cursor = 0;
  // Following every job: from now on, as `tail -f` starts at the end. The
  // history (it may be long) is read to its end without printing it;
  // `--since 0` prints it first.
  if (o.follow && req.jobs.empty() && !o.since)
    for (;;) {
      auto rep = s->call<bus::events_rep>(req);
      if (!rep)
        return report_error(rep.error(), o.json);
      req.cursor = rep->cursor;
      if (rep->events.size() < bus::events_page)
        break;
    }
  // A follow waits for news on the coordinator (long poll) and survives its
  // restart: it asks again from the last cursor it printed, so nothing is
  // missed and nothing repeats (events are at least once: receivers
  // deduplicate by job and seq).
  std::int64_t unavailable_since = -1;
  constexpr std::int64_t unavailable_grace_ms = 120'000;
  // Following named jobs ends once each live one has said its end (as cq
  // logs -f does); it never ended. One that ended already has its end in
  // the history printed first, or before --since. Each by its whole id; an
  // array's tasks as its listing found them (not one request each).
  std::set<std::string> open;
  std::map<std::string, std::string> names; // job id -> name, asked once per job
  if (o.follow)
    for (const auto& ref : req.jobs) {
      if (auto p = parts.find(ref); p != parts.end()) {
        if (!p->second.ended)
          open.insert(ref);
        continue;
      }
      auto shown = s->call<bus::show_rep>(bus::show_req{ref});
      if (!shown)
        return report_error(shown.error(), o.json);
      if (!bus::is_terminal(shown->job.state))
        open.insert(shown->job.id);
      names.emplace(shown->job.id, shown->job.name.empty() ? "-" : shown->job.name);
    }
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
      if (ends_a_job(e.kind))
        open.erase(e.job);
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
    if ((!o.follow || (!req.jobs.empty() && open.empty())) && rep->events.size() < bus::events_page)
      return 0;
  }
}

void wait_for_news(session& s, const std::string& job, std::uint64_t& cursor, std::int64_t max_ms) {
  auto until = sys::mono_ms() + max_ms;
  bus::events_req ev;
  ev.jobs = {job};
  ev.cursor = cursor;
  ev.wait_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(max_ms, 1));
  auto rep = s.call<bus::events_rep>(ev);
  if (rep)
    cursor = rep->cursor;
  // Nothing new, yet answered early (the coordinator holds at most so many
  // readers) or not at all: the rest of the pause is slept, so a follower
  // never asks back to back.
  if (!rep || rep->events.empty())
    if (auto left = until - sys::mono_ms(); left > 0)
      sys::sleep_ms(left);
}

int run_wait(const std::vector<std::string>& jobs, const std::optional<std::string>& timeout,
             bool json) {
  double timeout_s = -1;
  if (timeout && *timeout == "0") {
    timeout_s = 0; // look once
  } else if (timeout) {
    std::string why;
    auto ms = parse_duration_ms(*timeout, why);
    if (!ms)
      return report_error({errc::invalid_argument, fmt::format("--timeout: {}", why)}, json);
    timeout_s = static_cast<double>(*ms) / 1000;
  }
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
  std::map<std::string, std::set<std::string>> as_given; // full id -> the ids given for it
  std::set<std::string> pending(ids.begin(), ids.end());
  // The jobs to ask about again: every one at first, then only those with a
  // new event (a wait on a 1,000-task array asks about each task a few
  // times, not about every task on each event of any of them).
  std::set<std::string> dirty = pending;
  // Jobs with an end event that `show` did not report ended yet (the api
  // learns of an end just after the store commits it): asked about on each
  // round, which then comes sooner.
  std::set<std::string> ending;
  // And one more job a second, in turn: a net for an end that came before
  // this wait's first cursor but after its first look.
  std::size_t turn = 0;
  std::int64_t next_turn_ms = sys::mono_ms() + 1000;
  // Why the first job still waited for is queued, said again when it changes:
  // a wait on an array explains its head, not each of its tasks.
  std::size_t head = 0;
  std::string said;
  bool answered = false;
  std::int64_t unavailable_since = -1;
  // Events from now on: what the first reads below show is already seen.
  std::uint64_t events_cursor = 0;
  constexpr std::size_t named_max = 64;
  constexpr std::int64_t batch_ms = 100;
  std::int64_t read_ms = 0;
  if (auto now = s->call<bus::events_rep>(bus::events_req{{ids.front()}, 0, {}, {}, {}}); now)
    events_cursor = now->cursor;
  while (!pending.empty()) {
    while (head < ids.size() && !pending.count(ids[head]))
      ++head;
    if (head < ids.size())
      dirty.insert(ids[head]);
    dirty.insert(ending.begin(), ending.end());
    if (auto now = sys::mono_ms(); now >= next_turn_ms) {
      next_turn_ms = now + 1000;
      for (std::size_t n = 0; n < ids.size(); ++n, ++turn)
        if (pending.count(ids[turn % ids.size()])) {
          dirty.insert(ids[turn++ % ids.size()]);
          break;
        }
    }
    // The looks of a round go pipelined (a 10,000-task array's first round
    // is one batch of requests, not 10,000 round trips).
    std::erase_if(dirty, [&](const std::string& id) { return !pending.count(id); });
    std::vector<std::string> asking(dirty.begin(), dirty.end());
    std::vector<bus::show_req> looks;
    for (const auto& id : asking)
      looks.push_back(bus::show_req{id});
    auto reps = s->client->call_all<bus::show_rep>(looks);
    bool lost = false;
    for (std::size_t i = 0; i < asking.size(); ++i) {
      const auto& id = asking[i];
      auto& rep = reps[i];
      if (!rep) {
        auto now = sys::mono_ms();
        if (rep.error().code != errc::unavailable || !answered)
          return report_error(rep.error(), json);
        if (unavailable_since < 0)
          unavailable_since = now;
        auto give_up = deadline >= 0 ? deadline : unavailable_since + unavailable_grace_ms;
        if (now >= give_up)
          return report_error(rep.error(), json);
        lost = true;
        continue; // stays to be asked again
      }
      answered = true;
      unavailable_since = -1;
      if (!json && head < ids.size() && id == ids[head])
        tell_waiting(*rep, said);
      as_given[rep->job.id].insert(id);
      last[id] = rep->job;
      if (bus::is_terminal(rep->job.state)) {
        pending.erase(id);
        ending.erase(id);
      }
      dirty.erase(id);
    }
    if (lost)
      sys::sleep_ms(200); // the coordinator restarts: ask about the rest again
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
    // Wait on the pending jobs' events instead of polling (at most 2 s, so a
    // lost notice or a restarted coordinator costs little). Past a few jobs,
    // on every job's events, keeping the pending ones': a read naming a
    // thousand ids costs the coordinator more than the events of others, and
    // such a wait reads at most ten times a second, so a drain's events come
    // in batches rather than a round trip each.
    // The read waits well within the call's timeout, so an idle wait does
    // not look like a lost coordinator.
    auto remaining = deadline >= 0 ? deadline - sys::mono_ms() : 10'000;
    auto most = std::clamp<std::int64_t>(s->timeout_ms / 2, 1, ending.empty() ? 2000 : 50);
    bus::events_req ev;
    if (pending.size() <= named_max)
      for (const auto& id : pending)
        ev.jobs.push_back(last.count(id) ? last[id].id : id);
    else if (auto since = sys::mono_ms() - read_ms; since < batch_ms)
      sys::sleep_ms(batch_ms - since);
    read_ms = sys::mono_ms();
    ev.cursor = events_cursor;
    ev.wait_ms = static_cast<std::uint64_t>(std::clamp<std::int64_t>(remaining, 1, most));
    auto er = s->call<bus::events_rep>(ev);
    if (!er) {
      sys::sleep_ms(200); // the next round's looks say whether it is back
      continue;
    }
    events_cursor = er->cursor;
    // An early answer with nothing in it (the coordinator holds at most so
    // many readers): the rest of the pause is slept, not spun.
    if (er->events.empty())
      if (auto left = read_ms + static_cast<std::int64_t>(*ev.wait_ms) - sys::mono_ms(); left > 0)
        sys::sleep_ms(left);
    // Only an end changes what this wait reports (the head is asked about on
    // each round anyway): a requeued attempt's end is not one.
    for (const auto& e : er->events)
      if (ends_a_job(e.kind))
        if (auto g = as_given.find(e.job); g != as_given.end())
          for (const auto& ref : g->second)
            if (pending.count(ref)) {
              dirty.insert(ref);
              ending.insert(ref);
            }
  }
  std::string failed;
  std::size_t n_failed = 0;
  constexpr std::size_t named_most = 10; // then "and N more"
  for (const auto& id : ids) {
    const auto& j = last[id];
    if (j.state == bus::job_state::succeeded)
      continue;
    if (++n_failed > named_most)
      continue;
    // As given; an array's task (given by its array) by its name.
    auto who = id.size() == 36 && !j.name.empty() ? j.name : id;
    failed += fmt::format("{}{} {}", failed.empty() ? "" : ", ", who, j.state);
    if (auto why = render_detail::outcome_words(j);
        why != "-" && why != std::string(to_string(j.state)))
      failed += " (" + why + ")";
  }
  if (n_failed > named_most)
    failed += fmt::format(" and {} more", n_failed - named_most);
  if (json) {
    // Every job's end, whatever it was; a failure adds the error beside them
    // (one document: a script reads both, and the exit code says which).
    bus::ls_rep out;
    for (const auto& id : ids)
      out.jobs.push_back(last[id]);
    if (n_failed == 0) {
      fmt::print("{}\n", json_text(out));
      return 0;
    }
    auto doc = nlohmann::ordered_json::parse(json_text(out));
    bus::error_info e{errc::invalid_state, fmt::format("{} of {} job(s) did not succeed: {}",
                                                       n_failed, ids.size(), failed)};
    doc["error"] = {{"code", std::string(to_string(e.code))}, {"message", e.message}};
    fmt::print("{}\n", dump_json(doc));
    return exit_code(e.code);
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
