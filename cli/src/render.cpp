#include "cq/cli/render.hpp"
#include "cq/bus/array_row.hpp"
#include "cq/bus/output_pattern.hpp"

#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

namespace cq::cli {
namespace {

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
  return fmt::format("\x1b[{}m{}\x1b[0m", sgr, text);
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

/// A table whose columns shrink, flexible ones first, to fit a width.
struct table {
  std::vector<std::string> header;
  std::vector<std::size_t> min_width; ///< per column: never cut below
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_colour; ///< per row: SGR of the colour column
  std::size_t colour_column = SIZE_MAX;

  std::string render(const render_style& style) const {
    auto n = header.size();
    std::vector<std::vector<std::string>> cells;
    cells.push_back(header);
    for (const auto& r : rows) {
      std::vector<std::string> e;
      for (const auto& c : r)
        e.push_back(escape_control(c));
      cells.push_back(std::move(e));
    }
    std::vector<std::size_t> w(n, 0);
    for (const auto& r : cells)
      for (std::size_t i = 0; i < n && i < r.size(); ++i)
        w[i] = std::max(w[i], display_width(r[i]));
    auto total = [&] {
      std::size_t t = 2 * (n - 1);
      for (auto x : w)
        t += x;
      return t;
    };
    // Over the width: take from the widest column that can still give.
    while (style.width && total() > style.width) {
      std::size_t best = n;
      for (std::size_t i = 0; i < n; ++i)
        if (w[i] > min_width[i] && (best == n || w[i] > w[best]))
          best = i;
      if (best == n)
        break;
      --w[best];
    }
    std::string out;
    for (std::size_t r = 0; r < cells.size(); ++r) {
      std::string line;
      for (std::size_t i = 0; i < n; ++i) {
        auto cell = clip(i < cells[r].size() ? cells[r][i] : "", w[i]);
        auto pad = i + 1 < n ? w[i] - display_width(cell) + 2 : 0;
        if (r > 0 && i == colour_column)
          cell = paint(cell, row_colour[r - 1], style.colour);
        line += cell;
        line.append(pad, ' ');
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line + '\n';
    }
    return out;
  }
};

std::string reason_words(bus::reason r) {
  std::string s(to_string(r));
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

/// A finished job's outcome in a few words (`cap`: with the RAM cap of an OOM).
std::string outcome_words(const bus::job_info& j, bool cap = true) {
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

/// `text` broken at blanks into lines of at most `width` columns (a word
/// longer than that gets a line of its own).
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t at = 0;
  while (at < text.size()) {
    auto blank = text.find(' ', at);
    auto word = text.substr(at, blank == std::string::npos ? std::string::npos : blank - at);
    at = blank == std::string::npos ? text.size() : blank + 1;
    if (!line.empty() && display_width(line) + 1 + display_width(word) > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty() || lines.empty())
    lines.push_back(line);
  return lines;
}

std::string elapsed(const bus::job_info& j, std::int64_t now) {
  auto span = [](std::int64_t from, std::int64_t to) {
    return format_duration_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(0, to - from)));
  };
  if (j.state == job_state::queued)
    return j.submitted_ms ? span(j.submitted_ms, now) : "-";
  if (bus::is_terminal(j.state))
    return j.started_ms && j.finished_ms ? span(j.started_ms, j.finished_ms) : "-";
  return j.started_ms ? span(j.started_ms, now) : "-";
}

std::string local_clock(std::int64_t ms, const char* format) {
  std::time_t t = ms / 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

} // namespace

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

std::size_t unique_prefix_length(const std::vector<std::string>& ids, std::size_t min) {
  std::size_t longest = 0;
  for (const auto& id : ids)
    longest = std::max(longest, id.size());
  auto sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  std::size_t need = std::min(min, longest);
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

std::string wait_words(const std::vector<std::string>& lines) {
  if (lines.empty())
    return {};
  auto why_of = [](const std::string& l) {
    auto colon = l.find(": ");
    return colon == std::string::npos ? l : l.substr(colon + 2);
  };
  // The head of the queue holds the reservation: when, and where, says most.
  if (lines.front().starts_with("holds the reservation"))
    return lines.front();
  if (lines.size() == 1)
    return why_of(lines.front());
  auto first = why_of(lines.front());
  if (std::all_of(lines.begin(), lines.end(), [&](auto& l) { return why_of(l) == first; }))
    return first + " (every node)";
  return fmt::format("{} (+{} node{})", lines.front(), lines.size() - 1,
                     lines.size() == 2 ? "" : "s");
}

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
    auto where = fmt::format("#{} in {}", j.position, j.priority);
    if (j.pinned_node)
      where += ", node " + *j.pinned_node;
    if (auto w = waits.find(j.id); w != waits.end() && !w->second.empty())
      return fmt::format("#{}: {}", j.position, w->second);
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
  std::set<std::string> nodes;
  for (const auto* t : tasks)
    bus::count_task(a, *t, nodes);
  bus::finish_tasks(a, nodes);
  return a;
}

/// One row of `cq ls` for a whole array: its tasks counted by state.
std::vector<std::string> array_cells(const bus::array_row& a, std::int64_t now, job_state& state) {
  state = a.running     ? job_state::running
          : a.queued    ? job_state::queued
          : a.failed    ? job_state::failed
          : a.cancelled ? job_state::cancelled
                        : job_state::succeeded;
  std::string counts;
  auto add = [&](std::size_t k, std::string_view what) {
    if (k)
      counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", k, what);
  };
  add(a.running, "running");
  add(a.queued, "queued");
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
  return {a.array,
          fmt::format("{}[{}]", a.name, a.tasks),
          std::string(to_string(state)),
          a.node_count == 0   ? "-"
          : a.node_count == 1 ? a.nodes.front()
                              : fmt::format("{} nodes", a.node_count),
          ran,
          counts};
}

/// The table of `cq ls` rows (ids, cells, states) drawn with `id_prefix`.
std::string ls_table(std::vector<std::vector<std::string>> rows,
                     const std::vector<job_state>& states, const render_style& style,
                     std::size_t id_prefix) {
  std::vector<std::string> ids;
  for (const auto& r : rows)
    ids.push_back(r[0]);
  auto cut = unique_prefix_length(ids, std::max<std::size_t>(8, id_prefix));
  table t;
  t.header = {"ID", "NAME", "STATE", "NODE", "ELAPSED", "REASON"};
  t.min_width = {cut, 8, 9, 6, 7, 10};
  t.colour_column = 2;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i][0] = rows[i][0].substr(0, cut);
    t.rows.push_back(std::move(rows[i]));
    t.row_colour.emplace_back(state_colour(states[i]));
  }
  return t.render(style);
}

std::vector<std::string> job_cells(const bus::job_info& j, std::int64_t now_ms,
                                   const std::vector<bus::job_info>& listed,
                                   const wait_map& waits) {
  return {j.id,
          j.name.empty() ? "-" : j.name,
          std::string(to_string(j.state)),
          j.node.empty() ? "-" : j.node,
          elapsed(j, now_ms),
          escape_control(job_reason(j, listed, waits))};
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
  std::vector<std::vector<std::string>> rows;
  std::vector<job_state> states;
  for (const auto& j : jobs) {
    job_state s = j.state;
    if (auto a = arrays.find(j.array); !j.array.empty() && a != arrays.end()) {
      if (a->second.empty())
        continue; // drawn already
      rows.push_back(array_cells(summarize(a->second), now_ms, s));
      a->second.clear();
    } else {
      rows.push_back(job_cells(j, now_ms, jobs, waits));
    }
    states.push_back(s);
  }
  return ls_table(std::move(rows), states, style, id_prefix);
}

namespace {

/// The job_info fields a row of a rows listing has (the rest default).
bus::job_info info_of(const bus::job_brief& b) {
  bus::job_info j;
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
  return j;
}

} // namespace

std::string render_ls_rows(const std::vector<bus::ls_row>& page, std::int64_t now_ms,
                           const render_style& style, const wait_map& waits,
                           std::size_t id_prefix) {
  if (page.empty())
    return "no jobs\n";
  // The jobs on this page, and the dependencies they still wait for that it
  // does not show (a rows listing keeps only those in `after`).
  std::vector<bus::job_info> listed;
  listed.reserve(page.size());
  for (const auto& r : page)
    if (r.job)
      listed.push_back(info_of(*r.job));
  auto shown = listed.size();
  for (std::size_t i = 0; i < shown; ++i)
    for (const auto& d : listed[i].after)
      if (std::none_of(listed.begin(), listed.end(), [&](auto& l) { return l.id == d; })) {
        bus::job_info stub;
        stub.id = d;
        listed.push_back(std::move(stub));
      }
  std::vector<std::vector<std::string>> rows;
  std::vector<job_state> states;
  std::size_t next = 0; // the page's jobs are listed[0..shown) in order
  for (const auto& r : page) {
    job_state s = r.job ? r.job->state : job_state::queued;
    rows.push_back(r.job ? job_cells(listed[next++], now_ms, listed, waits)
                         : array_cells(*r.array, now_ms, s));
    states.push_back(s);
  }
  return ls_table(std::move(rows), states, style, id_prefix);
}

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
    times.emplace_back("estimate", format_duration_ms(j.effective_est_ms));

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
  if (j.retry_oom || j.oom_retries || ctx.verbose)
    pol.emplace_back("OOM retries", fmt::format("{} used of {}", j.oom_retries, j.retry_oom));
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
      auto parts = room && k != "state" ? wrap(value, room) : std::vector<std::string>{value};
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
    if (a.yield_requested_ms)
      out += fmt::format("  yield requested {} ago\n", format_age(now - a.yield_requested_ms));
    if (!a.stop_cause.empty())
      out += escape_control(fmt::format("  stop requested {} ago: {}\n",
                                        format_age(now - a.stop_requested_ms), a.stop_cause));
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
