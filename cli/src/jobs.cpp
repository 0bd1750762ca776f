// cq submit, ls, show, logs, cancel, move (cq wait and cq events: events.cpp).

#include "commands.hpp"
#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/to_json.hpp"
#include "cq/cli/units.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace cq::cli {

namespace {

/// Prints a protocol struct as JSON on one line of stdout.
template <class T>
void print_json(const T& x) {
  fmt::print("{}\n", dump_json(to_json(x)));
}

/// Formats one field of a protocol struct for `cq show`, by type and by the
/// naming convention of protocol.hpp (units last: `_ms` are epoch times when
/// signed and durations when unsigned, `_bytes` are sizes). Zero sizes, epoch
/// times and positions mean "none" and print as "-".
struct field_text {
  std::string_view name;
  std::int64_t now_ms;

  std::string operator()(const std::string& v) const { return v.empty() ? "-" : v; }
  template <class T>
  requires std::is_enum_v<T> std::string operator()(T v) const { return std::string(to_string(v)); }
  std::string operator()(bool v) const { return v ? "yes" : "no"; }
  std::string operator()(const std::vector<std::string>& v) const {
    if (v.empty())
      return "-";
    // Lists of ids (after, lanes) read better comma-separated; argv is a command.
    if (name != "argv") {
      std::string out;
      for (const auto& e : v)
        out += (out.empty() ? "" : ", ") + e;
      return out;
    }
    return shell_join(v);
  }
  template <class T>
  std::string operator()(const std::optional<T>& v) const {
    return v ? (*this)(*v) : std::string("-");
  }
  template <class T>
  requires std::is_integral_v<T> std::string operator()(T v) const {
    if (name.ends_with("_ms")) {
      if constexpr (std::is_signed_v<T>) {
        if (v == 0)
          return "-";
        return fmt::format("{} ago", format_age(now_ms - static_cast<std::int64_t>(v)));
      } else {
        return format_duration_ms(static_cast<std::uint64_t>(v));
      }
    }
    if (name.ends_with("_bytes")) {
      if (v == 0)
        return "-";
      return fmt::format("{} ({} bytes)", format_bytes(static_cast<std::uint64_t>(v)), v);
    }
    if (name == "position" && v == 0)
      return "-";
    return fmt::format("{}", v);
  }
};

/// "-" for position 0 (a job no longer in the queue), else the number.
std::string position_text(std::uint64_t position) {
  return position == 0 ? "-" : std::to_string(position);
}

bool is_level(const std::string& v) {
  return v == "high" || v == "medium" || v == "low";
}

/// Parses a whole decimal number in [lo, hi]; sets `why` on failure.
std::optional<std::uint64_t> parse_count(const std::string& text, std::uint64_t lo,
                                         std::uint64_t hi, std::string& why) {
  bool digits = !text.empty() &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    why = fmt::format("'{}' is not a whole number", text);
    return std::nullopt;
  }
  auto v = text.size() <= 19 ? std::stoull(text) : std::uint64_t{0};
  if (text.size() > 19 || v < lo || v > hi) {
    why = fmt::format("{} is out of range ({}..{})", text, lo, hi);
    return std::nullopt;
  }
  return v;
}

/// Why `name` cannot be a job's display name, or nullopt if it can: names
/// are 1..64 characters of [A-Za-z0-9._-], so that they print as they are
/// in every table and script. The coordinator validates names as well; this
/// check names the flag and costs no round trip.
std::optional<std::string> name_problem(const std::string& name) {
  constexpr std::size_t max_name = 64;
  if (name.empty())
    return std::string("the name is empty");
  if (name.size() > max_name)
    return fmt::format("the name is {} bytes; at most {} are allowed", name.size(), max_name);
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  };
  auto bad = std::find_if_not(name.begin(), name.end(), allowed);
  if (bad != name.end())
    return fmt::format("'{}' has the character '{}' at byte {}; use only A-Z a-z 0-9 . _ -",
                       escape_control(name), escape_control(std::string_view(&*bad, 1)),
                       bad - name.begin());
  return std::nullopt;
}

/// Fills the optional fields of `spec` from `o`; returns an invalid_argument
/// error naming the first flag whose value is unusable.
std::optional<bus::error_info> fill_spec_options(const submit_options& o, bus::job_spec& spec) {
  auto bad = [](std::string_view flag, const std::string& why) {
    return bus::error_info{errc::invalid_argument, fmt::format("{}: {}", flag, why)};
  };
  if (o.name) {
    if (auto why = name_problem(*o.name))
      return bad("--name", *why);
    spec.name = *o.name;
  }
  std::string why;
  auto size = [&](std::string_view flag, const std::optional<std::string>& text,
                  std::optional<std::uint64_t>& to) -> std::optional<bus::error_info> {
    if (!text)
      return std::nullopt;
    auto v = parse_size(*text, why);
    if (!v)
      return bad(flag, why);
    to = *v;
    return std::nullopt;
  };
  auto duration = [&](std::string_view flag, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& to) -> std::optional<bus::error_info> {
    if (!text)
      return std::nullopt;
    auto v = parse_duration_ms(*text, why);
    if (!v)
      return bad(flag, why);
    to = *v;
    return std::nullopt;
  };
  auto count = [&](std::string_view flag, const std::optional<std::string>& text, std::uint64_t lo,
                   std::uint64_t hi,
                   std::optional<std::uint64_t>& to) -> std::optional<bus::error_info> {
    if (!text)
      return std::nullopt;
    auto v = parse_count(*text, lo, hi, why);
    if (!v)
      return bad(flag, why);
    to = *v;
    return std::nullopt;
  };
  if (auto e = size("--ram", o.ram, spec.ram_bytes))
    return e;
  // Below 16 MiB even `true` can be killed (the shell and the loader alone).
  if (spec.ram_bytes && *spec.ram_bytes < (16ull << 20))
    return bad("--ram", fmt::format("{} is below the smallest cap, 16M (leave --ram out and cq "
                                    "sizes the job)",
                                    *o.ram));
  if (spec.ram_bytes && *spec.ram_bytes > (1ull << 50))
    return bad("--ram", fmt::format("{} is above the largest cap, 1024T", *o.ram));
  if (o.priority) {
    if (!is_level(*o.priority))
      return bad("--priority", fmt::format("'{}' is not one of high, medium, low", *o.priority));
    spec.priority = *o.priority;
  }
  if (auto e = count("--gpus", o.gpus, 0, 64, spec.gpus))
    return e;
  if (auto e = size("--vram", o.vram, spec.vram_bytes))
    return e;
  if (auto e = count("--cpus", o.cpus, 1, 1024, spec.cpus))
    return e;
  if (auto e = duration("--est", o.est, spec.est_ms))
    return e;
  if (auto e = duration("--timeout", o.timeout, spec.timeout_ms))
    return e;
  if (!o.after.empty()) {
    bus::string_list ids;
    for (const auto& given : o.after) {
      std::string_view rest = given;
      for (;;) {
        auto comma = rest.find(',');
        auto id = rest.substr(0, comma);
        while (!id.empty() && (id.front() == ' ' || id.front() == '\t'))
          id.remove_prefix(1);
        while (!id.empty() && (id.back() == ' ' || id.back() == '\t'))
          id.remove_suffix(1);
        if (id.empty())
          return bad("--after", fmt::format("'{}' has an empty job id", given));
        if (std::find(ids.begin(), ids.end(), id) == ids.end())
          ids.emplace_back(id);
        if (comma == std::string_view::npos)
          break;
        rest.remove_prefix(comma + 1);
      }
    }
    spec.after = std::move(ids);
  }
  if (o.profile) {
    if (o.profile->empty() || o.profile->size() > 200)
      return bad("--profile",
                 fmt::format("the key must be 1..200 characters, not {}", o.profile->size()));
    spec.profile = *o.profile;
  }
  if (auto e = size("--ram-floor", o.ram_floor, spec.ram_floor_bytes))
    return e;
  if (auto e = size("--ram-start-min", o.ram_start_min, spec.ram_start_min_bytes))
    return e;
  if (o.preempt) {
    if (*o.preempt != "never" && *o.preempt != "checkpoint")
      return bad("--preempt", fmt::format("'{}' is not one of never, checkpoint", *o.preempt));
    spec.preempt = *o.preempt;
  }
  if (auto e = duration("--lease", o.lease, spec.lease_ms))
    return e;
  if (spec.lease_ms && *spec.lease_ms < 1000)
    return bad("--lease", "must be at least 1s");
  if (o.lost_after && *o.lost_after == "never")
    spec.lost_after_ms = 0;
  else if (auto e = duration("--lost-after", o.lost_after, spec.lost_after_ms))
    return e;
  if (spec.lost_after_ms && *spec.lost_after_ms != 0 && *spec.lost_after_ms < 1000)
    return bad("--lost-after", "must be at least 1s, or never");
  if (o.no_requeue)
    spec.no_requeue = true;
  if (auto e = count("--retry-oom", o.retry_oom, 0, 10, spec.retry_oom))
    return e;
  return std::nullopt;
}

/// Keeps only the last `n` lines of `buf` (a final line without a newline counts).
void keep_last_lines(std::string& buf, std::uint64_t n) {
  if (n == 0) {
    buf.clear();
    return;
  }
  // The newline that ends the kept part: the (n+1)-th from the end if the
  // buffer ends with one (that one terminates the last line), else the n-th.
  std::uint64_t need = buf.ends_with('\n') ? n + 1 : n;
  std::size_t pos = buf.size();
  while (need > 0) {
    if (pos == 0)
      return; // fewer lines than n: keep everything
    pos = buf.rfind('\n', pos - 1);
    if (pos == std::string::npos)
      return;
    --need;
  }
  buf.erase(0, pos + 1);
}

} // namespace

namespace {

/// The submit of `o`: its reply, or the error (already formatted for the user).
bus::result<bus::submit_rep> submit_reply(const submit_options& o) {
  bus::submit_req req;
  auto& spec = req.spec;
  if (o.argv.empty())
    return bus::error_info{errc::invalid_argument,
                           "submit needs a command: cq submit -- PROGRAM ARGS..."};
  spec.argv = o.argv;
  if (auto e = fill_spec_options(o, spec))
    return *e;
  if (!o.node.empty())
    spec.node = o.node;
  if (o.cwd.empty()) {
    spec.cwd = sys::current_dir();
    if (spec.cwd.empty())
      return bus::error_info{errc::invalid_argument,
                             "cannot read the current directory; pass --cwd DIR"};
  } else {
    std::error_code ec;
    auto abs = std::filesystem::absolute(o.cwd, ec);
    if (ec)
      return bus::error_info{errc::invalid_argument, fmt::format("--cwd: {}", ec.message())};
    spec.cwd = abs.lexically_normal().string();
    if (spec.cwd.size() > 1 && spec.cwd.ends_with('/'))
      spec.cwd.pop_back();
  }
  // SPEC section 3: the caller's environment unless told otherwise.
  if (!o.env_clear)
    spec.env = sys::environment();
  for (const auto& kv : o.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return bus::error_info{errc::invalid_argument,
                             fmt::format("--env: '{}' is not KEY=VALUE", kv.substr(0, 64))};
    spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The coordinator refuses it too; saying so here names what to cut.
  if (auto n = bus::encoded_size(spec); n > bus::limits::spec_bytes) {
    std::size_t env_bytes = 0;
    for (const auto& [k, v] : spec.env)
      env_bytes += k.size() + v.size() + 2;
    return bus::error_info{
        errc::too_large,
        fmt::format("the job's spec is {} bytes, over the limit of {} bytes; its environment is "
                    "{} bytes (--env-clear sends none, --env KEY=VALUE adds one variable)",
                    n, bus::limits::spec_bytes, env_bytes)};
  }
  auto s = open_session();
  if (!s)
    return s.error();
  // A job id of our own makes the submit safe to retry after a lost reply.
  req.job_id = o.job_id ? *o.job_id : random_uuid();
  if (o.hold_for_node)
    req.hold_for_node = true;
  return s->call_retrying<bus::submit_rep>(req);
}

/// How cq sized a job without --ram, on stderr (so that `id=$(cq submit
/// ...)` still gets the id alone).
void tell_sizing(const bus::submit_rep& rep) {
  if (!rep.sizing)
    return;
  auto& p = *rep.sizing;
  auto cap = format_bytes(rep.job.effective_ram_bytes);
  if (p.runs == 0)
    fmt::print(stderr,
               "cq: RAM cap {} (the default: no run of profile '{}' measured yet); if it needs "
               "more it is requeued with more; --ram sets a cap of your own\n",
               cap, escape_control(p.key));
  else
    fmt::print(stderr,
               "cq: RAM cap {} from profile '{}' ({} run{}, largest peak {}); if it needs "
               "more it is requeued with more; --ram sets a cap of your own\n",
               cap, escape_control(p.key), p.runs, p.runs == 1 ? "" : "s",
               format_bytes(p.peak_ram_bytes));
}

} // namespace

int run_submit(const submit_options& o) {
  auto rep = submit_reply(o);
  if (!rep)
    return report_error(rep.error(), o.json);
  if (o.json) {
    print_json(*rep);
    return 0;
  }
  print_line(rep->job.id);
  if (!o.quiet)
    tell_sizing(*rep);
  return 0;
}

bus::result<std::string> submit_job(const submit_options& o) {
  auto rep = submit_reply(o);
  if (!rep)
    return rep.error();
  if (!o.quiet)
    tell_sizing(*rep);
  return rep->job.id;
}

int run_ls(bool all, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  // Pages (SPEC section 10): each reply stays far below the frame limit; the
  // listing is every page, fetched in turn.
  bus::ls_rep all_pages;
  bus::ls_req req{all, {}, {}};
  for (std::size_t page = 0;; ++page) {
    auto rep = s->call<bus::ls_rep>(req);
    if (!rep)
      return report_error(rep.error(), json);
    if (all_pages.jobs.empty())
      all_pages.jobs = std::move(rep->jobs);
    else
      all_pages.jobs.insert(all_pages.jobs.end(), std::make_move_iterator(rep->jobs.begin()),
                            std::make_move_iterator(rep->jobs.end()));
    all_pages.total = rep->total;
    if (!rep->next_cursor || (req.cursor && *rep->next_cursor <= *req.cursor) || page > 1'000'000)
      break;
    req.cursor = rep->next_cursor;
  }
  auto rep = &all_pages;
  if (json) {
    print_json(*rep);
    return 0;
  }
  auto now = sys::wall_ms();
  text_table t;
  t.header = {"ID", "NAME", "STATE", "PRIO", "POS", "NODE", "EXIT/REASON", "AGE"};
  t.rows.reserve(rep->jobs.size());
  for (const auto& j : rep->jobs)
    t.rows.push_back({j.id, j.name.empty() ? "-" : j.name, std::string(to_string(j.state)),
                      j.priority, position_text(j.position), j.node.empty() ? "-" : j.node,
                      outcome(j.reason, j.exit_code, j.signal), age_since(j.submitted_ms, now)});
  t.print();
  if (rep->total && *rep->total > rep->jobs.size())
    fmt::print(stderr, "({} of {} jobs shown; use --json for scripts)\n", rep->jobs.size(),
               *rep->total);
  return 0;
}

int run_show(const std::string& job, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::show_rep>(bus::show_req{job});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    print_json(*rep);
    return 0;
  }
  auto now = sys::wall_ms();
  // One line per field of job_info, named as on the wire, values aligned.
  std::vector<std::pair<std::string, std::string>> lines;
  fields(
      [&](const char* name, const auto& v) {
        lines.emplace_back(name, field_text{name, now}(v));
      },
      rep->job);
  std::size_t width = 0;
  for (const auto& [k, v] : lines)
    width = std::max(width, k.size());
  std::string out;
  for (const auto& [k, v] : lines)
    out += fmt::format("{:<{}}  {}\n", k + ":", width + 1, escape_control(v));
  if (!rep->waiting.empty()) {
    out += "\nwaiting:\n";
    for (const auto& line : rep->waiting)
      out += "  " + escape_control(line) + "\n";
  }
  write_stdout(out);
  if (rep->allocations.empty()) {
    fmt::print("\nno allocations\n");
    return 0;
  }
  fmt::print("\n");
  text_table t;
  t.header = {"ALLOCATION", "ATTEMPT",   "NODE",  "STATE",  "EXIT/REASON",
              "PEAK RAM",   "PEAK VRAM", "LANES", "CREATED"};
  for (const auto& a : rep->allocations) {
    std::string lanes;
    for (const auto& l : a.lanes)
      lanes += (lanes.empty() ? "" : ",") + l;
    t.rows.push_back({a.id, std::to_string(a.attempt), a.node.empty() ? "-" : a.node,
                      std::string(to_string(a.state)), outcome(a.reason, a.exit_code, a.signal),
                      a.peak_ram_bytes ? format_bytes(*a.peak_ram_bytes) : "-",
                      a.peak_vram_bytes ? format_bytes(*a.peak_vram_bytes) : "-",
                      lanes.empty() ? "-" : lanes, age_since(a.created_ms, now)});
  }
  t.print();
  // The latest allocation's lease, yield request, stop and node-loss facts.
  const auto& a = rep->allocations.back();
  const auto& j = rep->job;
  std::string extra;
  if (a.state != bus::alloc_state::finished && a.started_ms && j.lease_ms) {
    auto ran = now - a.started_ms;
    auto lease = static_cast<std::int64_t>(j.lease_ms);
    auto next = (ran / lease + 1) * lease - ran;
    extra += fmt::format(
        "lease: {} (next boundary in {})\n", format_duration_ms(j.lease_ms),
        format_duration_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(next, 0))));
  }
  if (a.yield_requested_ms)
    extra += fmt::format("yield requested: {} ago\n", format_age(now - a.yield_requested_ms));
  if (!a.stop_cause.empty())
    extra += fmt::format("stop requested: {} ({} ago)\n", a.stop_cause,
                         format_age(now - a.stop_requested_ms));
  if (a.state == bus::alloc_state::unknown)
    extra += fmt::format("node {} down since {} ago: the allocation is unknown{}\n", a.node,
                         format_age(now - a.unknown_since_ms),
                         j.lost_after_ms
                             ? fmt::format(", lost after {}", format_duration_ms(j.lost_after_ms))
                             : std::string(", never lost (--lost-after never)"));
  if (!extra.empty())
    write_stdout("\n" + escape_control(extra));
  return 0;
}

int run_logs(const logs_options& o) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), false);
  return follow_logs(*s, o, [] { return false; });
}

int follow_logs(session& s, const logs_options& o, const std::function<bool()>& interrupted) {
  bus::logs_req req;
  req.job = o.job;
  req.max_bytes = bus::limits::log_chunk_bytes;
  if (!o.allocation.empty())
    req.allocation = o.allocation;
  std::string current = o.allocation;  // the allocation whose output is being read
  bool buffering = o.tail.has_value(); // --tail: collect up to the first eof, then trim
  std::string buffered;
  int stalls = 0; // replies that neither advanced nor reached eof
  // A follow survives a coordinator restart the way `cq events -f` does: it
  // asks again from the offset it printed, for up to this long.
  constexpr std::int64_t unavailable_grace_ms = 120'000;
  std::int64_t unavailable_since = -1;
  for (;;) {
    if (interrupted()) {
      if (buffering)
        write_stdout(buffered);
      std::fflush(stdout);
      return 130;
    }
    auto rep = s.call<bus::logs_rep>(req);
    if (!rep && o.follow && rep.error().code == errc::unavailable) {
      auto now = sys::mono_ms();
      if (unavailable_since < 0) {
        unavailable_since = now;
        std::fflush(stdout);
        fmt::print(stderr, "cq: {}; retrying\n", escape_control(rep.error().message));
      }
      if (now - unavailable_since <= unavailable_grace_ms) {
        sys::sleep_ms(500);
        continue;
      }
    }
    if (rep)
      unavailable_since = -1;
    if (!rep) {
      if (buffering)
        write_stdout(buffered);
      std::fflush(stdout);
      return report_error(rep.error(), false);
    }
    if (rep->allocation != current) {
      if (current.empty()) {
        current = rep->allocation;
        // Without --follow the read stays on this allocation even if the job
        // is requeued meanwhile, so the output is one consistent file.
        if (!o.follow && !current.empty())
          req.allocation = current;
      } else {
        // --follow across a requeue: the job has a new attempt. This reply was
        // read at the old allocation's offset, so drop it and start over.
        std::fflush(stdout);
        fmt::print(stderr, "cq: job {} moved to allocation {}\n", escape_control(o.job),
                   escape_control(rep->allocation));
        current = rep->allocation;
        req.offset = 0;
        continue;
      }
    }
    if (buffering) {
      buffered += rep->data;
      keep_last_lines(buffered, *o.tail);
    } else if (!rep->data.empty()) {
      write_stdout(rep->data);
    }
    bool advanced = rep->next_offset != req.offset || !rep->data.empty();
    req.offset = rep->next_offset;
    if (!rep->eof) {
      // Bounded: a coordinator that keeps answering "more to come" without
      // moving forward must not spin this loop forever.
      stalls = advanced ? 0 : stalls + 1;
      if (stalls > 100) {
        if (buffering)
          write_stdout(buffered);
        std::fflush(stdout);
        return report_error({errc::internal, "the log read makes no progress"}, false);
      }
      continue;
    }
    if (buffering) {
      write_stdout(buffered);
      buffered.clear();
      buffering = false;
    }
    if (!o.follow || rep->terminal)
      break;
    std::fflush(stdout);
    sys::sleep_ms(200);
  }
  std::fflush(stdout);
  return 0;
}

int run_cancel(const std::string& job, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call_retrying<bus::cancel_rep>(bus::cancel_req{job, operation_id()});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    print_json(*rep);
  else
    print_line(fmt::format("{} {}", rep->job.id, rep->job.state));
  return 0;
}

int run_move(const move_options& o) {
  bus::move_req req;
  req.job = o.job;
  std::vector<std::string> given;
  if (o.front)
    given.emplace_back("--front"), req.placement = "front";
  if (o.back)
    given.emplace_back("--back"), req.placement = "back";
  if (o.before)
    given.emplace_back("--before"), req.placement = "before", req.target = *o.before;
  if (o.after)
    given.emplace_back("--after"), req.placement = "after", req.target = *o.after;
  if (given.size() > 1) {
    std::string which;
    for (const auto& g : given)
      which += (which.empty() ? "" : ", ") + g;
    return report_error(
        {errc::invalid_argument,
         fmt::format("conflicting_flags: give at most one of --front, --back, --before, "
                     "--after (got {})",
                     which)},
        o.json);
  }
  if (given.empty() && !o.priority)
    return report_error({errc::invalid_argument,
                         "conflicting_flags: give one of --front, --back, --before JOB, --after "
                         "JOB, or --priority LEVEL"},
                        o.json);
  if (req.target && req.target->empty())
    return report_error({errc::invalid_argument, given.front() + ": the job id is empty"}, o.json);
  if (o.priority) {
    if (!is_level(*o.priority))
      return report_error(
          {errc::invalid_argument,
           fmt::format("--priority: '{}' is not one of high, medium, low", *o.priority)},
          o.json);
    req.priority = *o.priority;
  }
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  req.operation_id = operation_id();
  auto rep = s->call_retrying<bus::move_rep>(req);
  if (!rep)
    return report_error(rep.error(), o.json);
  if (o.json)
    print_json(*rep);
  else
    print_line(
        fmt::format("{} {} {}", rep->job.id, rep->job.priority, position_text(rep->job.position)));
  return 0;
}

} // namespace cq::cli
