// cq ls, show, cancel (one or many), retry, whoami: the commands that read
// and act on jobs by what a person can name (render.cpp draws the views).

#include "commands.hpp"
#include "cq/bus/array_row.hpp"
#include "cq/bus/format.hpp"
#include "cq/bus/job_filter.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/render.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

namespace cq::cli {

namespace {

template <class T>
void print_json(const T& x) {
  fmt::print("{}\n", json_text(x));
}

render_style terminal_style() {
  return {sys::terminal_width(), sys::colour_wanted()};
}

constexpr std::string_view state_names[] = {"queued",    "starting", "running",  "stopping",
                                            "succeeded", "failed",   "cancelled"};

/// The states --state names (comma-separated; `live` and `done` stand for
/// groups), or an error naming the flag.
bus::result<std::vector<bus::job_state>> parse_states(const std::vector<std::string>& given) {
  std::vector<bus::job_state> out;
  auto add = [&](bus::job_state s) {
    if (std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  };
  for (const auto& arg : given) {
    std::size_t at = 0;
    while (at <= arg.size()) {
      auto comma = arg.find(',', at);
      auto word = arg.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      at = comma == std::string::npos ? arg.size() + 1 : comma + 1;
      if (word == "live") {
        for (int i = 0; i < 4; ++i)
          add(static_cast<bus::job_state>(i));
        continue;
      }
      if (word == "done" || word == "finished") {
        for (int i = 4; i < 7; ++i)
          add(static_cast<bus::job_state>(i));
        continue;
      }
      auto it = std::find(std::begin(state_names), std::end(state_names), word);
      if (it == std::end(state_names))
        return bus::error_info{
            errc::invalid_argument,
            fmt::format("--state: '{}' is not a state; use queued, starting, running, stopping, "
                        "succeeded, failed, cancelled, live or done",
                        escape_control(word.substr(0, 32)))};
      add(static_cast<bus::job_state>(it - std::begin(state_names)));
    }
  }
  return out;
}

/// Asks `req` page after page (with `waits`: why the first queued jobs wait,
/// in wait_words; with `id_prefix`: how much of each id tells it apart from
/// every job's, ls_rep::id_prefix), handing each reply to `take`, which says
/// whether to ask for the next page.
template <class Take>
std::optional<bus::error_info> each_page(session& s, bus::ls_req req, wait_map* waits,
                                         std::size_t* id_prefix, Take take) {
  if (waits)
    req.reasons = bus::ls_reasons_max;
  for (std::size_t page = 0;; ++page) {
    auto rep = s.call<bus::ls_rep>(req);
    if (!rep)
      return rep.error();
    req.reasons.reset();
    if (id_prefix)
      *id_prefix = std::max<std::size_t>(*id_prefix, rep->id_prefix.value_or(0));
    if (waits && rep->reasons)
      for (const auto& r : *rep->reasons)
        (*waits)[r.job] = wait_words(r.waiting);
    auto next = rep->next_cursor;
    if (!take(*rep) || !next || (req.cursor && *next <= *req.cursor) || page > 1'000'000)
      return std::nullopt;
    req.cursor = next;
  }
}

/// Asks the coordinator to apply `f` (its states parsed: `states`) to the
/// listing `req`.
void ask_filtered(bus::ls_req& req, const job_filter& f,
                  const std::vector<bus::job_state>& states) {
  if (!states.empty()) {
    req.states.emplace();
    for (auto st : states)
      req.states->emplace_back(to_string(st));
  }
  req.name_pattern = f.name;
  req.owner = f.owner;
  req.node = f.node;
  if (f.mine)
    req.mine = true;
}

/// One page of cq ls's rows as the coordinator builds them (ls_req::rows),
/// filtered there; every row with `limit` 0. With `waits`, also why the first
/// queued jobs wait; `id_prefix` as each_page's.
struct rows_page {
  /// The rows as each page came (a row is some 600 bytes: moving 100,000 of
  /// them into one vector cost more than drawing them), and each in order.
  std::vector<std::vector<bus::ls_row>> pages;
  std::vector<const bus::ls_row*> rows;
  std::uint64_t total_rows = 0;
};
bus::result<rows_page> fetch_rows(session& s, const ls_options& o, bool all, wait_map* waits,
                                  std::size_t* id_prefix) {
  auto states = parse_states(o.filter.states);
  if (!states)
    return states.error();
  bus::ls_req req{all, {}, {}, {}};
  req.rows = true;
  if (o.expand)
    req.expand = true;
  // A terminal shows a page; a pipe or file gets every row.
  auto limit = o.limit.value_or(sys::stdout_is_terminal() ? ls_default_rows : 0);
  if (limit)
    req.limit = limit;
  ask_filtered(req, o.filter, *states);
  rows_page out;
  auto e = each_page(s, req, waits, id_prefix, [&](bus::ls_rep& rep) {
    out.total_rows = rep.total_rows.value_or(0);
    if (rep.rows) {
      if (out.rows.empty() && limit == 0)
        out.rows.reserve(std::min<std::uint64_t>(out.total_rows, 10'000'000));
      for (const auto& r : out.pages.emplace_back(std::move(*rep.rows)))
        out.rows.push_back(&r);
    }
    return limit == 0; // a limit is one page; without one, every page
  });
  if (e)
    return *e;
  return out;
}

/// The caller's identity name (whoami).
bus::result<std::string> my_name(session& s) {
  auto rep = s.call<bus::whoami_rep>(bus::whoami_req{});
  if (!rep)
    return rep.error();
  return rep->name;
}

/// The test of `f`'s filters, for jobs as the coordinator lists them.
bus::result<std::function<bool(const bus::job_info&)>> filter_of(session& s, const job_filter& f) {
  auto states = parse_states(f.states);
  if (!states)
    return states.error();
  std::optional<std::string> owner = f.owner;
  if (f.mine) {
    auto me = my_name(s);
    if (!me)
      return me.error();
    owner = *me;
  }
  return std::function<bool(const bus::job_info&)>(
      [states = std::move(*states), owner, f](const bus::job_info& j) {
        return bus::passes_filters(j, states, f.name, owner, f.node);
      });
}

/// Every job (`all`: finished ones too) that passes `f`, page by page in
/// submission order: `each` gets each page, its jobs those kept. The
/// coordinator filters them; one older than the plain listing's filters
/// sends every job (they are kept here by the same test), and one older
/// than the filters themselves refuses them as unknown fields (they are
/// then asked for without them). Pages follow by seq, so no job is missed
/// or listed twice while jobs start and end meanwhile.
std::optional<bus::error_info> each_kept_page(session& s, bool all, const job_filter& f,
                                              const std::function<bool(bus::ls_rep&)>& each) {
  auto keep = filter_of(s, f);
  if (!keep)
    return keep.error();
  auto read = [&](const bus::ls_req& req) {
    return each_page(s, req, nullptr, nullptr, [&](bus::ls_rep& rep) {
      std::erase_if(rep.jobs, [&](const bus::job_info& j) { return !(*keep)(j); });
      return each(rep);
    });
  };
  bus::ls_req req{all, {}, {}, {}};
  ask_filtered(req, f, *parse_states(f.states)); // parsed by filter_of: valid
  auto e = read(req);
  if (e && e->code == errc::malformed && e->message.find(": unknown field") != std::string::npos)
    e = read(bus::ls_req{all, {}, {}, {}});
  return e;
}

/// `cq ls --json`: what print_json of an ls_rep with the kept jobs and
/// their total writes, built page by page as the coordinator sends them (a
/// listing never holds every job's record at once, nor a document).
int print_ls_json(session& s, bool all, const job_filter& f, std::uint64_t limit) {
  std::string out = "{\"jobs\":[";
  std::uint64_t total = 0; // every match; `total` in the output
  auto e = each_kept_page(s, all, f, [&](bus::ls_rep& rep) {
    if (total == 0 && rep.total) // about a kilobyte a job: one allocation, no copies
      out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(
                      limit ? std::min(*rep.total, limit) : *rep.total, 1u << 20)) *
                  1024);
    for (const auto& j : rep.jobs) {
      // --limit N: the first N in submission order (the others counted).
      if (limit == 0 || total < limit) {
        if (total)
          out += ',';
        append_json(out, j);
      }
      ++total;
    }
    return true;
  });
  if (e)
    return report_error(*e, true);
  // The fields after "jobs", as print_json writes them (ls_rep's order).
  bus::ls_rep tail;
  tail.total = total;
  auto rest = json_text(tail);
  constexpr std::string_view empty_jobs = "{\"jobs\":[";
  out += std::string_view(rest).substr(empty_jobs.size());
  out += '\n';
  write_stdout(out);
  return 0;
}

bool wants_finished(const job_filter& f) {
  auto states = parse_states(f.states);
  if (!states)
    return false;
  return std::any_of(states->begin(), states->end(), [](auto s) { return bus::is_terminal(s); });
}

/// Where `cq show` says the RAM cap came from.
std::string ram_source(session& s, const bus::show_rep& rep) {
  const auto& j = rep.job;
  if (j.ram_bytes && j.oom_retries && j.effective_ram_bytes != *j.ram_bytes)
    return fmt::format("--ram {}, raised by {} OOM retr{} of --retry-oom",
                       format_bytes(*j.ram_bytes), j.oom_retries, j.oom_retries == 1 ? "y" : "ies");
  if (j.ram_bytes)
    return "--ram";
  std::size_t ooms = 0;
  for (const auto& a : rep.allocations)
    ooms += a.reason == bus::reason::oom ? 1 : 0;
  if (ooms)
    return fmt::format("raised after {} OOM kill{}", ooms, ooms == 1 ? "" : "s");
  if (auto p = s.call<bus::profile_ls_rep>(bus::profile_ls_req{}))
    for (const auto& info : p->profiles)
      if (info.key == j.profile && info.runs > 0 && info.ram_bytes == j.effective_ram_bytes)
        return fmt::format("profile '{}', {} run{} measured", info.key, info.runs,
                           info.runs == 1 ? "" : "s");
  return "the default; cq profile ls shows what runs measured";
}

} // namespace

/// The tasks of the array `ref` names (bus::array_named: its id, a prefix
/// of it or its name), in index order; empty when it names no array. The
/// coordinator finds them (ls_req::array); they are checked here as well.
/// A coordinator from before that field refuses it: then every job is read,
/// as `cq` did then.
bus::result<std::vector<bus::job_info>> array_tasks(session& s, const std::string& ref) {
  std::vector<bus::job_info> jobs;
  auto read = [&](const bus::ls_req& req) {
    jobs.clear();
    return each_page(s, req, nullptr, nullptr, [&](bus::ls_rep& rep) {
      jobs.insert(jobs.end(), std::make_move_iterator(rep.jobs.begin()),
                  std::make_move_iterator(rep.jobs.end()));
      return true;
    });
  };
  bus::ls_req req{true, {}, {}, {}};
  req.array = ref;
  auto e = read(req);
  if (e && e->code == errc::malformed && e->message.starts_with("array: unknown field"))
    e = read(bus::ls_req{true, {}, {}, {}});
  if (e)
    return *e;
  auto array = bus::array_named(ref, [&](auto f) {
    for (const auto& j : jobs)
      f(j);
  });
  if (!array)
    return array.error();
  std::vector<bus::job_info> out;
  if (array->empty())
    return out;
  for (auto& j : jobs)
    if (j.array == *array)
      out.push_back(std::move(j));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.array_index.value_or(0) < b.array_index.value_or(0);
  });
  return out;
}

bus::result<std::vector<std::string>>
expand_arrays(session& s, const std::vector<std::string>& refs, bool live_only,
              std::vector<std::pair<std::string, bus::error_info>>* ended,
              std::map<std::string, array_part>* parts) {
  std::vector<std::string> out;
  for (const auto& ref : refs) {
    // A job's own id goes as it is (the coordinator resolves prefixes and
    // names); only a reference no job answers to may be an array.
    if (auto r = s.call<bus::show_rep>(bus::show_req{ref});
        r || r.error().code != errc::not_found) {
      out.push_back(ref);
      continue;
    }
    auto tasks = array_tasks(s, ref);
    if (!tasks)
      return tasks.error();
    if (tasks->empty()) {
      out.push_back(ref); // the coordinator's not_found says the rest
      continue;
    }
    auto before = out.size();
    for (const auto& t : *tasks)
      if (!live_only || !bus::is_terminal(t.state)) {
        out.push_back(t.id);
        if (parts)
          (*parts)[t.id] = {t.array, tasks->size(), bus::is_terminal(t.state)};
      }
    if (out.size() == before && ended) // as a job that ended is refused
      ended->emplace_back(tasks->front().array,
                          bus::error_info{errc::invalid_state,
                                          fmt::format("array {}: all {} of its tasks have already "
                                                      "ended",
                                                      tasks->front().array, tasks->size())});
  }
  return out;
}

namespace {

/// The lines of cq cancel, hold and release, in the order the jobs were
/// given: a job's own (`ID cancelled`), or one for each array named whole,
/// at its first task's place, with how many of its tasks each outcome took
/// (an array of 10,000 tasks printed 10,000 lines). A task that ended since
/// it was listed had no need of the command: counted, not an error.
class job_lines {
public:
  /// `json`: nothing is printed (--json lists each job), and a task that
  /// ended meanwhile is still left out.
  job_lines(const std::map<std::string, array_part>& parts, bool json)
      : parts_(parts), json_(json) {}

  /// Whether `target`'s refusal `e` is that of an array's task that ended
  /// since it was listed (its line counts it among those that had ended).
  /// A task refused for anything else (cq hold of one that runs) is not.
  bool ended_meanwhile(const std::string& target, const bus::error_info& e) {
    if (e.code != errc::invalid_state || e.message.find("has already ended") == std::string::npos ||
        !parts_.count(target))
      return false;
    if (!json_)
      ++tally_of(target)->ended;
    return true;
  }

  void add(const std::string& target, const std::string& id, const std::string& outcome) {
    if (auto* t = tally_of(target))
      ++t->outcomes[outcome];
    else
      lines_.push_back({false, id + " " + outcome});
  }

  void print() const {
    if (json_)
      return;
    for (const auto& [array, text] : lines_) {
      if (!array) {
        print_line(text);
        continue;
      }
      const auto& t = arrays_.at(text);
      std::string said;
      std::size_t done = 0;
      for (const auto& [outcome, n] : t.outcomes)
        said += fmt::format("{}{} {}", said.empty() ? "" : ", ", n, outcome), done += n;
      // Those not listed as live, and those that ended since; a task
      // refused for another reason was said on its own line.
      auto ended = t.tasks - t.live + t.ended;
      print_line(fmt::format("array {}: {} of {} tasks: {}{}", text, done, t.tasks,
                             said.empty() ? "none left" : said,
                             ended ? fmt::format(" ({} had already ended)", ended) : ""));
    }
  }

private:
  struct tally {
    std::size_t tasks = 0, live = 0, ended = 0; ///< all, listed live, ended since
    std::map<std::string, std::size_t> outcomes;
  };
  tally* tally_of(const std::string& target) {
    auto p = parts_.find(target);
    if (p == parts_.end())
      return nullptr;
    auto [it, fresh] = arrays_.try_emplace(p->second.array);
    if (fresh) {
      it->second.tasks = p->second.tasks;
      for (const auto& [task, part] : parts_)
        it->second.live += part.array == p->second.array ? 1 : 0;
      lines_.push_back({true, p->second.array});
    }
    return &it->second;
  }
  const std::map<std::string, array_part>& parts_;
  bool json_;
  std::vector<std::pair<bool, std::string>> lines_; ///< (an array's, its id) or a job's line
  std::map<std::string, tally> arrays_;
};

/// Prints each of `refused` (a reference and its refusal) as cq cancel and
/// cq hold print a job's, into `out` with `json`; returns the worst exit code.
int print_refused(const std::vector<std::pair<std::string, bus::error_info>>& refused, bool json,
                  nlohmann::ordered_json& out) {
  int worst = 0;
  for (const auto& [ref, e] : refused) {
    if (json)
      out.push_back(
          {{"job", ref},
           {"error", {{"code", std::string(to_string(e.code))}, {"message", e.message}}}});
    else
      fmt::print(stderr, "cq: error: {}: {}\n", to_string(e.code), escape_control(e.message));
    worst = std::max(worst, exit_code(e.code));
  }
  return worst;
}

} // namespace

int run_ls(const ls_options& given) {
  auto o = given;
  if (o.limit_text) {
    auto n = count_of("--limit", *o.limit_text, "rows");
    if (!n)
      return report_error(n.error(), o.json);
    o.limit = *n;
  }
  // A listing may hold thousands of rows: its memory in huge pages (a submit
  // allocates too little to gain from them).
  sys::heap_in_huge_pages();
  if (auto states = parse_states(o.filter.states); !states)
    return report_error(states.error(), o.json);
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  bool all = o.all || wants_finished(o.filter);
  for (std::uint64_t frame = 0;; ++frame) {
    wait_map waits;
    std::size_t id_prefix = 0; // the coordinator's, if it gives one
    if (o.json)                // every job unless --limit (not the terminal's default page)
      return print_ls_json(*s, all, o.filter, o.limit.value_or(0));
    // The coordinator orders, folds, filters and pages the rows (ls_req::rows).
    auto page = fetch_rows(*s, o, all, &waits, &id_prefix);
    if (!page)
      return report_error(page.error(), o.json);
    auto now = sys::wall_ms();
    auto style = terminal_style();
    auto table = render_ls_rows(page->rows, now, style, waits, id_prefix);
    if (page->rows.size() < page->total_rows)
      table += fmt::format("{} of {} rows (cq ls --limit N shows more; --limit 0 all)\n",
                           page->rows.size(), page->total_rows);
    if (!o.watch_ms) {
      write_stdout(table);
      return 0;
    }
    // --watch: redraw in place on a terminal, one frame after another on a pipe.
    std::string frame_text;
    if (sys::stdout_is_terminal())
      frame_text += "\x1b[H\x1b[2J";
    auto ms = *o.watch_ms; // 2s, 1.5s, 5m
    frame_text += fmt::format("cq ls every {}, {} (Ctrl-C stops)\n\n",
                              ms % 1000 && ms > 1000 && ms < 60'000
                                  ? fmt::format("{:g}s", static_cast<double>(ms) / 1000)
                                  : format_duration_ms(ms),
                              clock_time(now, now));
    write_stdout(frame_text + table);
    std::fflush(stdout);
    sys::sleep_ms(static_cast<std::int64_t>(*o.watch_ms));
  }
}

int run_show(const std::string& job, bool json, bool verbose) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::show_rep>(bus::show_req{job});
  if (!rep && rep.error().code == errc::not_found) {
    // An array: its tasks, one row each.
    auto tasks = array_tasks(*s, job);
    if (!tasks)
      return report_error(tasks.error(), json);
    if (!tasks->empty()) {
      if (json) {
        bus::ls_rep out;
        out.total = tasks->size();
        out.jobs = std::move(*tasks);
        print_json(out);
        return 0;
      }
      write_stdout(fmt::format("Array {}: {} tasks\n\n", tasks->front().array, tasks->size()) +
                   render_ls(*tasks, sys::wall_ms(), terminal_style(), true));
      return 0;
    }
  }
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    print_json(*rep);
    return 0;
  }
  show_context ctx{ram_source(*s, *rep), verbose};
  write_stdout(render_show(*rep, sys::wall_ms(), terminal_style(), ctx));
  return 0;
}

int run_cancel(const cancel_options& o) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  std::vector<std::pair<std::string, bus::error_info>> ended; // arrays with no task left
  std::map<std::string, array_part> parts;                    // task -> its array
  auto expanded = expand_arrays(*s, o.jobs, true, &ended, &parts);
  if (!expanded)
    return report_error(expanded.error(), o.json);
  std::vector<std::string> targets = *expanded;
  bool by_filter =
      o.filter.mine || o.filter.name || o.filter.owner || o.filter.node || !o.filter.states.empty();
  if (by_filter) {
    // The live jobs that pass the filters, filtered by the coordinator and
    // paged by seq (each_kept_page): not every live job's record.
    std::size_t kept = 0;
    auto e = each_kept_page(*s, false, o.filter, [&](bus::ls_rep& rep) {
      for (const auto& j : rep.jobs)
        targets.push_back(j.id), ++kept;
      return true;
    });
    if (e)
      return report_error(*e, o.json);
    if (kept == 0 && o.jobs.empty()) {
      if (o.json)
        fmt::print("{{\"jobs\":[]}}\n");
      else
        fmt::print(stderr, "cq: no live job matches; nothing cancelled\n");
      return 0;
    }
  }
  if (targets.empty() && ended.empty())
    return report_error({errc::invalid_argument,
                         "name the jobs to cancel: cq cancel JOB... (an id, a prefix or a name), "
                         "or --name PATTERN, --mine, --owner NAME"},
                        o.json);
  // Each cancel of many carries its own operation id (a lost reply is retried
  // with it); one job alone takes this run's, which --operation-id may set.
  // Pipelined: an array's thousand cancels commit together. A job named
  // twice (JOB --mine, say) is asked once.
  std::set<std::string> asked;
  std::erase_if(targets, [&](const std::string& t) { return !asked.insert(t).second; });
  std::vector<bus::cancel_req> reqs;
  for (const auto& t : targets)
    reqs.push_back({t, targets.size() == 1 ? operation_id() : random_uuid()});
  auto reps = s->call_all_retrying<bus::cancel_rep>(reqs);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  int worst = print_refused(ended, o.json, out);
  job_lines lines(parts, o.json);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto& rep = reps[i];
    if (!rep) {
      if (lines.ended_meanwhile(targets[i], rep.error()))
        continue;
      worst = std::max(worst, print_refused({{targets[i], rep.error()}}, o.json, out));
      continue;
    }
    if (o.json)
      out.push_back(to_json(rep->job));
    else
      lines.add(targets[i], rep->job.id, std::string(to_string(rep->job.state)));
  }
  lines.print();
  if (o.json)
    fmt::print("{}\n", dump_json(nlohmann::ordered_json{{"jobs", out}}));
  return worst;
}

int run_hold(const std::vector<std::string>& jobs, bool release, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  std::vector<std::pair<std::string, bus::error_info>> ended; // arrays with no task left
  std::map<std::string, array_part> parts;                    // task -> its array
  auto targets = expand_arrays(*s, jobs, true, &ended, &parts);
  if (!targets)
    return report_error(targets.error(), json);
  std::set<std::string> asked;
  std::erase_if(*targets, [&](const std::string& t) { return !asked.insert(t).second; });
  std::vector<bus::job_hold_req> reqs;
  for (const auto& t : *targets)
    reqs.push_back({t, release, targets->size() == 1 ? operation_id() : random_uuid()});
  auto reps = s->call_all_retrying<bus::job_hold_rep>(reqs);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  int worst = print_refused(ended, json, out);
  job_lines lines(parts, json);
  for (std::size_t i = 0; i < reps.size(); ++i) {
    auto& rep = reps[i];
    if (!rep) {
      if (lines.ended_meanwhile((*targets)[i], rep.error()))
        continue;
      worst = std::max(worst, print_refused({{(*targets)[i], rep.error()}}, json, out));
      continue;
    }
    if (json)
      out.push_back(to_json(rep->job));
    else
      lines.add((*targets)[i], rep->job.id, rep->job.on_hold ? "on hold" : "released");
  }
  lines.print();
  if (json)
    fmt::print("{}\n", dump_json(nlohmann::ordered_json{{"jobs", out}}));
  return worst;
}

int run_whoami(bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::whoami_rep>(bus::whoami_req{});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    print_json(*rep);
  else
    print_line(fmt::format("{} ({}) at {}", rep->name, rep->role, s->endpoint));
  return 0;
}

} // namespace cq::cli
