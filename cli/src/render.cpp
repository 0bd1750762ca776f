#include "cq/cli/render.hpp"
#include "cq/bus/array_row.hpp"
#include "cq/bus/output_pattern.hpp"
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
namespace render_detail {

using bus::job_state;

int level_rank(const std::string& p) {
  return p == "high" ? 0 : p == "medium" ? 1 : 2;
}

/// ANSI SGR colour of a state, or "" for none.
std::string_view state_colour(job_state s) {
  switch (s) {
  case job_state::running:
    return "36"; // cyan
  case job_state::starting:
  case job_state::stopping:
    return "34"; // blue
  case job_state::succeeded:
    return "32"; // green
  case job_state::failed:
    return "31"; // red
  case job_state::cancelled:
    return "33"; // yellow
  default:
    return "";
  }
}

std::string paint(std::string text, std::string_view sgr, bool colour) {
  if (!colour || sgr.empty())
    return text;
  std::string out;
  append_painted(out, text, sgr, colour);
  return out;
}

void append_painted(std::string& out, std::string_view text, std::string_view sgr, bool colour) {
  if (!colour || sgr.empty()) {
    out += text;
    return;
  }
  out += "\x1b[";
  out += sgr;
  out += 'm';
  out += text;
  out += "\x1b[0m";
}

/// `s` cut to `width` columns, ending in "…" when cut.
std::string clip(const std::string& s, std::size_t width) {
  if (display_width(s) <= width)
    return s;
  if (width == 0)
    return {};
  std::string out;
  std::size_t cols = 0;
  for (std::size_t i = 0; i < s.size() && cols + 1 < width;) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    out.append(s, i, len);
    i += len;
    ++cols;
  }
  return out + "\u2026";
}

std::string reason_words(bus::reason r) {
  std::string s(to_string(r));
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

/// A finished job's outcome in a few words (`cap`: with the RAM cap of an OOM).
std::string outcome_words(const bus::job_info& j, bool cap) {
  using bus::reason;
  switch (j.reason) {
  case reason::none:
  case reason::exit_code:
    if (j.exit_code)
      return fmt::format("exit {}", *j.exit_code);
    if (j.signal)
      return fmt::format("signal {}", *j.signal);
    return j.state == job_state::succeeded ? "exit 0" : "-";
  case reason::signal:
    return j.signal ? fmt::format("signal {}", *j.signal) : "signal";
  case reason::oom:
    return cap ? fmt::format("oom (cap {})", format_bytes(j.effective_ram_bytes))
               : std::string("oom");
  case reason::timeout:
    return j.timeout_ms ? fmt::format("timeout ({})", format_duration_ms(*j.timeout_ms))
                        : std::string("timeout");
  case reason::cancelled:
    return "cancelled";
  default:
    return reason_words(j.reason);
  }
}

void append_elapsed(std::string& out, const bus::job_info& j, std::int64_t now) {
  // From when to when the ELAPSED column counts (0: not yet, "-").
  std::int64_t from = 0, to = now;
  if (j.state == job_state::queued) {
    from = j.submitted_ms;
  } else if (!bus::is_terminal(j.state)) {
    from = j.started_ms;
  } else if (j.finished_ms) {
    from = j.started_ms;
    to = j.finished_ms;
  }
  if (from == 0) {
    out += '-';
    return;
  }
  append_duration_ms(out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, to - from)));
}

std::string local_clock(std::int64_t ms, const char* format) {
  std::time_t t = ms / 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

} // namespace render_detail

using namespace render_detail;

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty())
      out += ' ';
    bool safe = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
    });
    if (safe) {
      out += a;
      continue;
    }
    // A control character (a script's newlines): bash's $'...', which a
    // shell reads back as the same bytes, rather than an escape inside '...'.
    if (std::any_of(a.begin(), a.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      out += "$'";
      for (char c : a) {
        auto u = static_cast<unsigned char>(c);
        if (c == '\n')
          out += "\\n";
        else if (c == '\t')
          out += "\\t";
        else if (c == '\\' || c == '\'')
          out += std::string("\\") + c;
        else if (u < 0x20 || u == 0x7f)
          out += fmt::format("\\x{:02x}", u);
        else
          out += c;
      }
      out += '\'';
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

namespace {

/// True when the first `n` bytes (n <= 8) of every two different ids differ:
/// then no pair needs more than `n`. Each id's prefix is packed into an
/// integer, so the sort compares integers, not strings; ids whose keys tie
/// are compared as strings.
bool prefixes_differ(const std::vector<std::string_view>& ids, std::size_t n) {
  std::vector<std::pair<std::uint64_t, std::string_view>> keys;
  keys.reserve(ids.size());
  for (auto id : ids) {
    std::uint64_t k = 0;
    for (std::size_t i = 0; i < n; ++i)
      k = k << 8 | (i < id.size() ? static_cast<unsigned char>(id[i]) : 0u);
    keys.emplace_back(k, id);
  }
  std::sort(keys.begin(), keys.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < keys.size();) {
    auto j = i + 1;
    while (j < keys.size() && keys[j].first == keys[i].first)
      ++j;
    for (auto a = i; a < j; ++a)
      for (auto b = a + 1; b < j; ++b)
        if (keys[a].second != keys[b].second &&
            keys[a].second.substr(0, n) == keys[b].second.substr(0, n))
          return false;
    i = j;
  }
  return true;
}

/// unique_prefix_length over views (sorted here: the views, not copies of the ids).
std::size_t prefix_length_of(std::vector<std::string_view> sorted, std::size_t min) {
  std::size_t longest = 0;
  for (auto id : sorted)
    longest = std::max(longest, id.size());
  std::size_t need = std::min(min, longest);
  // The common case (random ids, a short minimum) without sorting strings.
  if (need <= 8 && prefixes_differ(sorted, need))
    return need;
  std::sort(sorted.begin(), sorted.end());
  // Neighbours in sorted order share the longest prefixes.
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    const auto& a = sorted[i - 1];
    const auto& b = sorted[i];
    if (a == b)
      continue;
    std::size_t common = 0;
    while (common < a.size() && common < b.size() && a[common] == b[common])
      ++common;
    need = std::max(need, std::min(common + 1, longest));
  }
  return need;
}

} // namespace

std::size_t unique_prefix_length(const std::vector<std::string>& ids, std::size_t min) {
  return prefix_length_of(std::vector<std::string_view>(ids.begin(), ids.end()), min);
}

void sort_serving_order(std::vector<bus::job_info>& jobs) {
  auto group = [](const bus::job_info& j) {
    if (j.state == job_state::queued)
      return 1;
    return bus::is_terminal(j.state) ? 2 : 0;
  };
  std::stable_sort(jobs.begin(), jobs.end(), [&](const auto& a, const auto& b) {
    auto ga = group(a), gb = group(b);
    if (ga != gb)
      return ga < gb;
    if (ga == 0)
      return a.started_ms < b.started_ms;
    if (ga == 1)
      return std::make_pair(level_rank(a.priority), a.position) <
             std::make_pair(level_rank(b.priority), b.position);
    return a.finished_ms > b.finished_ms;
  });
}

std::string waiting_gist(std::string text) {
  constexpr std::string_view eta = ", in ~", eta_end = " by estimates";
  for (auto at = text.find(eta); at != std::string::npos; at = text.find(eta, at + 1))
    if (auto end = text.find(eta_end, at);
        end != std::string::npos && text.find(';', at) > end) // within one line
      text.erase(at + eta.size(), end - at - eta.size());
  return text;
}

std::string wait_words(const std::vector<std::string>& lines) {
  if (lines.empty())
    return {};
  auto why_of = [](const std::string& l) {
    auto colon = l.find(": ");
    return colon == std::string::npos ? l : l.substr(colon + 2);
  };
  // The head of the queue holds the reservation: when, and where, says most.
  if (lines.front().starts_with("next on "))
    return lines.front();
  if (lines.size() == 1)
    return why_of(lines.front());
  auto first = why_of(lines.front());
  if (std::all_of(lines.begin(), lines.end(), [&](auto& l) { return why_of(l) == first; }))
    return first + " (every node)";
  return fmt::format("{} (+{} node{})", lines.front(), lines.size() - 1,
                     lines.size() == 2 ? "" : "s");
}

namespace {

/// A queued job's place in job_reason ("#3 in medium", "#1: why it waits",
/// "#1 high: why it waits"), appended to `out`: one per queued row of a
/// listing, so not formatted. Positions count within a level, so a level
/// other than medium (the default) is named beside its reason too: several
/// levels each have a "#1".
void append_queue_place(std::string& out, const bus::job_info& j, const wait_map& waits) {
  out += '#';
  out += std::to_string(j.position);
  if (auto w = waits.find(j.id); w != waits.end() && !w->second.empty()) {
    if (j.priority != "medium") {
      out += ' ';
      out += j.priority;
    }
    out += ": ";
    out += w->second;
    return;
  }
  out += " in ";
  out += j.priority;
  if (j.pinned_node) {
    out += ", node ";
    out += *j.pinned_node;
  }
}

} // namespace

std::string job_reason(const bus::job_info& j, const std::vector<bus::job_info>& listed,
                       const wait_map& waits) {
  switch (j.state) {
  case job_state::queued: {
    if (j.on_hold)
      return "on hold (cq release)";
    std::vector<std::string> pending;
    for (const auto& d : j.after)
      for (const auto& l : listed)
        if (l.id == d && l.state != job_state::succeeded)
          pending.push_back(l.name.empty() ? d.substr(0, 8) : l.name);
    if (!pending.empty())
      return fmt::format("after {}{}", pending.front(),
                         pending.size() > 1 ? fmt::format(" +{}", pending.size() - 1) : "");
    std::string where;
    append_queue_place(where, j, waits);
    return where;
  }
  case job_state::starting:
    return "starting";
  case job_state::running:
    if (!j.lanes.empty()) {
      std::string lanes;
      for (const auto& l : j.lanes)
        lanes += (lanes.empty() ? "" : ",") + l;
      return lanes;
    }
    return j.attempt > 1 ? fmt::format("attempt {}", j.attempt) : "-";
  case job_state::stopping:
    return "being stopped";
  default:
    // A cancelled job's state says it all, unless something else ended it.
    if (j.state == job_state::cancelled && j.reason == bus::reason::cancelled)
      return "-";
    return outcome_words(j);
  }
}

namespace {

/// The summary of an array's `tasks` (as the coordinator's rows listing
/// sends it).
bus::array_row summarize(const std::vector<const bus::job_info*>& tasks) {
  bus::array_row a;
  bus::task_nodes nodes;
  for (const auto* t : tasks)
    bus::count_task(a, *t, nodes);
  bus::finish_tasks(a, nodes);
  return a;
}

/// One row of `cq ls` for a whole array, its tasks counted by state, added
/// to `grid`.
void add_array_cells(cell_grid& grid, const bus::array_row& a, std::int64_t now, job_state& state) {
  state = a.running            ? job_state::running
          : a.queued || a.held ? job_state::queued
          : a.failed           ? job_state::failed
          : a.cancelled        ? job_state::cancelled
                               : job_state::succeeded;
  std::string counts;
  auto add = [&](std::size_t k, std::string_view what) {
    if (k)
      counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", k, what);
  };
  add(a.running, "running");
  add(a.queued, "queued");
  add(a.held, "on hold");
  add(a.succeeded, "done");
  add(a.failed, "failed");
  add(a.cancelled, "cancelled");
  if (a.limit)
    counts += fmt::format(" (%{})", a.limit);
  std::string ran = "-";
  auto span = [](std::int64_t from, std::int64_t to) {
    return format_duration_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, to - from)));
  };
  if (state == job_state::queued && a.started_ms == 0)
    ran = span(a.submitted_ms, now);
  else if (a.started_ms)
    ran = span(a.started_ms, bus::is_terminal(state) ? a.finished_ms : now);
  grid.add(a.array);
  grid.add(fmt::format("{}[{}]", a.name, a.tasks));
  grid.add(to_string(state));
  grid.add(a.node_count == 0   ? "-"
           : a.node_count == 1 ? a.nodes.front()
                               : fmt::format("{} nodes", a.node_count));
  grid.add(ran);
  grid.add(counts);
}

/// A grid for cq ls's rows, its header added.
cell_grid ls_grid(std::size_t rows) {
  cell_grid grid(6);
  grid.reserve(rows + 1, 96);
  for (auto h : {"ID", "NAME", "STATE", "NODE", "ELAPSED", "REASON"})
    grid.add(h);
  return grid;
}

/// The table of `cq ls` rows (in `grid` after its header; `states` one per
/// row) with the ids cut to their unique prefix, at least `id_prefix`. When
/// `told_apart`, the ids are jobs' and `id_prefix` already tells each from
/// every other job's (the coordinator's ls_rep::id_prefix): they are not
/// compared again.
std::string ls_table(cell_grid& grid, const std::vector<job_state>& states,
                     const render_style& style, std::size_t id_prefix, bool told_apart) {
  std::size_t cut = 0;
  if (told_apart) {
    std::size_t longest = 0;
    for (std::size_t r = 1; r < grid.rows(); ++r)
      longest = std::max(longest, grid.cell(r, 0).size());
    cut = std::min(std::max<std::size_t>(8, id_prefix), longest);
  } else {
    std::vector<std::string_view> ids;
    ids.reserve(states.size());
    for (std::size_t r = 1; r < grid.rows(); ++r)
      ids.push_back(grid.cell(r, 0));
    cut = prefix_length_of(std::move(ids), std::max<std::size_t>(8, id_prefix));
  }
  grid.cut_column(0, cut, 1);
  std::vector<std::string_view> colours;
  colours.reserve(states.size());
  for (auto s : states)
    colours.push_back(state_colour(s));
  return render_grid(grid, {cut, 8, 9, 6, 7, 10}, colours, 2, style);
}

/// One job's row of `cq ls`, added to `grid`.
void add_job_cells(cell_grid& grid, const bus::job_info& j, std::int64_t now_ms,
                   const std::vector<bus::job_info>& listed, const wait_map& waits) {
  grid.add(j.id);
  grid.add(j.name.empty() ? "-" : j.name);
  grid.add(to_string(j.state));
  grid.add(j.node.empty() ? "-" : j.node);
  append_elapsed(grid.text(), j, now_ms);
  grid.close();
  // A queued job waiting for nothing but its turn: its place, appended in
  // place (most rows of a long listing); job_reason for every other row.
  if (j.state == job_state::queued && !j.on_hold && j.after.empty()) {
    append_queue_place(grid.text(), j, waits);
    grid.close();
  } else {
    grid.add(job_reason(j, listed, waits));
  }
}

} // namespace

std::string render_ls(const std::vector<bus::job_info>& jobs, std::int64_t now_ms,
                      const render_style& style, bool expand, const wait_map& waits,
                      std::size_t id_prefix) {
  if (jobs.empty())
    return "no jobs\n";
  // Arrays fold into one row where their first task (in the order given) is.
  std::map<std::string, std::vector<const bus::job_info*>> arrays;
  if (!expand)
    for (const auto& j : jobs)
      if (!j.array.empty())
        arrays[j.array].push_back(&j);
  auto grid = ls_grid(jobs.size());
  std::vector<job_state> states;
  for (const auto& j : jobs) {
    job_state s = j.state;
    if (auto a = arrays.find(j.array); !j.array.empty() && a != arrays.end()) {
      if (a->second.empty())
        continue; // drawn already
      add_array_cells(grid, summarize(a->second), now_ms, s);
      a->second.clear();
    } else {
      add_job_cells(grid, j, now_ms, jobs, waits);
    }
    states.push_back(s);
  }
  return ls_table(grid, states, style, id_prefix, false);
}

namespace {

/// The job_info fields a row of a rows listing has (the rest default).
/// Fills `j` from a rows listing's brief: built in place, a row costs no
/// move of the large job_info.
void fill_info(bus::job_info& j, const bus::job_brief& b) {
  j.id = b.id;
  j.name = b.name;
  j.owner = b.owner;
  j.state = b.state;
  j.reason = b.reason.value_or(bus::reason::none);
  j.node = b.node.value_or("");
  j.priority = b.priority.value_or("medium");
  j.position = b.position.value_or(0);
  j.on_hold = b.on_hold.value_or(false);
  j.after = b.after.value_or(bus::string_list{});
  j.pinned_node = b.pinned_node;
  j.lanes = b.lanes.value_or(bus::string_list{});
  j.attempt = b.attempt.value_or(0);
  j.exit_code = b.exit_code;
  j.signal = b.signal;
  j.submitted_ms = b.submitted_ms;
  j.started_ms = b.started_ms.value_or(0);
  j.finished_ms = b.finished_ms.value_or(0);
  j.timeout_ms = b.timeout_ms;
  j.effective_ram_bytes = b.effective_ram_bytes.value_or(0);
}

} // namespace

std::string render_ls_rows(const std::vector<bus::ls_row>& rows, std::int64_t now_ms,
                           const render_style& style, const wait_map& waits,
                           std::size_t id_prefix) {
  std::vector<const bus::ls_row*> page;
  page.reserve(rows.size());
  for (const auto& r : rows)
    page.push_back(&r);
  return render_ls_rows(page, now_ms, style, waits, id_prefix);
}

std::string render_ls_rows(const std::vector<const bus::ls_row*>& page, std::int64_t now_ms,
                           const render_style& style, const wait_map& waits,
                           std::size_t id_prefix) {
  if (page.empty())
    return "no jobs\n";
  // The jobs this page's queued rows wait for (job_reason names them): those
  // on the page, and stubs for the rest (a rows listing keeps only the
  // dependencies not yet succeeded in `after`).
  std::set<std::string_view> named;
  for (const auto* r : page)
    if (r->job && r->job->after)
      named.insert(r->job->after->begin(), r->job->after->end());
  std::vector<bus::job_info> deps;
  for (const auto* r : page)
    if (r->job && named.erase(r->job->id))
      fill_info(deps.emplace_back(), *r->job);
  for (auto id : named)
    deps.emplace_back().id = id;
  // One job_info at a time for the rows' cells: a page of 1,000 rows then
  // touches one record, not 1,000 of them. fill_info assigns the same
  // fields for every row, so a row keeps nothing of the one before.
  auto grid = ls_grid(page.size());
  std::vector<job_state> states;
  states.reserve(page.size());
  bus::job_info j;
  bool arrays = false; // an array's id is not covered by the coordinator's prefix
  for (const auto* row : page) {
    const auto& r = *row;
    job_state s = r.job ? r.job->state : job_state::queued;
    if (r.job) {
      fill_info(j, *r.job);
      add_job_cells(grid, j, now_ms, deps, waits);
    } else {
      arrays = true;
      add_array_cells(grid, *r.array, now_ms, s);
    }
    states.push_back(s);
  }
  return ls_table(grid, states, style, id_prefix, id_prefix > 0 && !arrays);
}

std::string wrapped_note(const std::string& text, std::size_t width) {
  auto lines = width == 0 ? std::vector<std::string>{} : wrap_words(text, width);
  if (lines.size() <= 1)
    return text + "\n";
  // The first line as wrapped; the rest again, two columns narrower for the
  // indent that shows they continue it.
  std::string rest;
  for (std::size_t k = 1; k < lines.size(); ++k)
    rest += (k == 1 ? "" : " ") + lines[k];
  std::string out = lines[0] + "\n";
  for (auto& l : wrap_words(rest, width > 22 ? width - 2 : 20))
    out += "  " + l + "\n";
  return out;
}

} // namespace cq::cli
