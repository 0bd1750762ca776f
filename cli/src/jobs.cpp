// cq submit, ls, show, logs, cancel, move (cq wait and cq events: events.cpp).

#include "commands.hpp"
#include "cq/bus/format.hpp"
#include "cq/bus/output_pattern.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"
#include "render_detail.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <utility>

namespace cq::cli {

namespace {

/// Prints a protocol struct as JSON on one line of stdout.
template <class T>
void print_json(const T& x) {
  fmt::print("{}\n", json_text(x));
}

/// The CPUs a job reserves without --cpus.
constexpr std::uint64_t default_cpus = 1;

bool is_level(const std::string& v) {
  return v == "high" || v == "medium" || v == "low";
}

/// Parses a whole decimal number in [lo, hi]; sets `why` on failure.
std::optional<std::uint64_t> parse_count(const std::string& text, std::uint64_t lo,
                                         std::uint64_t hi, std::string& why) {
  bool digits = !text.empty() &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    why = text.starts_with('-') && text.size() > 1
              ? fmt::format("'{}' is below {}: give {}..{}", text, lo, lo, hi)
              : fmt::format("'{}' is not a whole number", text);
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

/// Why `argv` looks like a whole shell line given as one argument (the
/// pueue and task-spooler habit: `cq submit -- 'a && b'`), which would fail
/// at launch as a program named so; nullopt if it does not.
std::optional<std::string> shell_line_problem(const std::vector<std::string>& argv) {
  if (argv.size() != 1)
    return std::nullopt;
  const auto& a = argv.front();
  if (a.find_first_of(" \t\n|&;<>()$`*?") == std::string::npos)
    return std::nullopt;
  std::error_code ec;
  if (std::filesystem::exists(a, ec)) // a program whose path has a blank in it
    return std::nullopt;
  return fmt::format("the command is one argument holding a shell line ('{}'); cq runs a "
                     "program with its arguments, not a line: use --shell '{}' to run it "
                     "through sh -c, or split it: cq submit -- PROGRAM ARGS...",
                     escape_control(a.substr(0, 60)), escape_control(a.substr(0, 60)));
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
  // One CPU unless told otherwise, so that a node runs no more CPU-bound jobs
  // than it has CPUs (--cpus 0: a job that needs none, such as a sleep).
  if (auto e = count("--cpus", o.cpus, 0, 1024, spec.cpus))
    return e;
  if (!o.cpus)
    spec.cpus = default_cpus;
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
    return bus::error_info{e->code, e->message + ", or never"};
  if (spec.lost_after_ms && *spec.lost_after_ms != 0 && *spec.lost_after_ms < 1000)
    return bad("--lost-after", "must be at least 1s, or never");
  if (o.no_requeue)
    spec.no_requeue = true;
  if (o.notify)
    spec.notify = true;
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

bus::result<bus::submit_req> submit_request(const submit_options& o) {
  bus::submit_req req;
  auto& spec = req.spec;
  if (o.shell && !o.argv.empty())
    return bus::error_info{errc::invalid_argument,
                           "--shell: give the job's command either as --shell 'LINE' or after "
                           "`--`, not both"};
  if (o.shell && o.shell->empty())
    return bus::error_info{errc::invalid_argument, "--shell: the line is empty"};
  if (o.from)
    return bus::error_info{errc::invalid_argument, "--from: one file of commands, not a job"};
  if (!o.shell && o.argv.empty())
    return bus::error_info{errc::invalid_argument,
                           "submit needs a command: cq submit -- PROGRAM ARGS... (or --shell "
                           "'LINE')"};
  if (auto line = shell_line_problem(o.argv))
    return bus::error_info{errc::invalid_argument, *line};
  spec.argv = o.shell ? std::vector<std::string>{"sh", "-c", *o.shell} : o.argv;
  if (o.array) {
    std::string why;
    auto a = parse_array(*o.array, bus::limits::array_tasks, why);
    if (!a)
      return bus::error_info{errc::invalid_argument, fmt::format("--array: {}", why)};
    req.array_indexes = std::move(a->indexes);
    req.array_limit = a->limit;
  }
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
  if (o.pty) {
    if (o.output)
      return bus::error_info{errc::invalid_argument,
                             "--output: a --pty job's output is its terminal (cq logs keeps it)"};
    // An interactive session is not started again on another node.
    spec.pty = true;
    spec.no_requeue = true;
  }
  if (o.output) {
    // Relative to the job's working directory, as sbatch's is.
    auto path = o.output->starts_with('/') ? *o.output : spec.cwd + "/" + *o.output;
    if (o.output->empty())
      path.clear();
    if (auto why = bus::output_pattern_problem(path); !why.empty())
      return bus::error_info{errc::invalid_argument, fmt::format("--output: {}", why)};
    spec.output = std::move(path);
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
  // A job id of our own makes the submit safe to retry after a lost reply.
  // One given is taken in either case (macOS's uuidgen prints capitals).
  if (o.job_id) {
    auto id = *o.job_id;
    std::transform(id.begin(), id.end(), id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
    bool uuid = id.size() == 36;
    for (std::size_t i = 0; uuid && i < id.size(); ++i)
      uuid = (i == 8 || i == 13 || i == 18 || i == 23) ? id[i] == '-' : hex(id[i]);
    if (!uuid)
      return bus::error_info{errc::invalid_argument,
                             fmt::format("--job-id: '{}' is not a UUID (8-4-4-4-12 hex digits)",
                                         escape_control(o.job_id->substr(0, 64)))};
    req.job_id = std::move(id);
  } else {
    req.job_id = random_uuid();
  }
  if (o.hold_for_node)
    req.hold_for_node = true;
  if (o.hold)
    req.on_hold = true;
  return req;
}

bus::result<bus::submit_rep> send_submit(const bus::submit_req& req, std::optional<session>* keep) {
  std::optional<session> own;
  auto& slot = keep ? *keep : own;
  if (!slot) {
    auto opened = open_session();
    if (!opened)
      return opened.error();
    slot = std::move(*opened);
  }
  auto* s = &*slot;
  auto rep = s->call_retrying<bus::submit_rep>(req);
  if (!rep) {
    auto e = in_flag_words(rep.error());
    // A --job-id whose job has another spec: say what differs.
    if (e.code == errc::job_conflict && req.job_id && !req.array_indexes)
      if (auto shown = s->call<bus::show_rep>(bus::show_req{*req.job_id}))
        e.message += " (" + spec_differences(req.spec, shown->job) + ")";
    return e;
  }
  return rep;
}

namespace {

/// The submit of `o`: its reply, or the error (already formatted for the user).
bus::result<bus::submit_rep> submit_reply(const submit_options& o,
                                          std::optional<session>* keep = nullptr) {
  auto req = submit_request(o);
  if (!req)
    return req.error();
  return send_submit(*req, keep);
}

} // namespace

int run_submit(const submit_options& o) {
  if (o.from)
    return run_submit_from(o);
  return report_submitted(submit_reply(o), o);
}

int report_submitted(const bus::result<bus::submit_rep>& rep, const submit_options& o) {
  if (!rep)
    return report_error(rep.error(), o.json);
  if (o.json) {
    print_json(*rep);
    return 0;
  }
  // An array is named by its own id (cq ls folds its tasks into one row).
  print_line(rep->array_size ? rep->job.array : rep->job.id);
  // A replay of an id whose job already ran (an array's first task says
  // nothing of the others).
  if (!o.quiet && o.job_id && !rep->array_size && bus::is_terminal(rep->job.state))
    fmt::print(stderr,
               "cq: job {} was submitted before with this --job-id and has ended ({}); nothing "
               "new was queued\n",
               rep->job.id, to_string(rep->job.state));
  if (!o.quiet) {
    if (rep->array_size)
      fmt::print(stderr, "cq: array of {} task{}{}; each has CQ_ARRAY_ID and CQ_ARRAY_INDEX\n",
                 *rep->array_size, *rep->array_size == 1 ? "" : "s",
                 rep->job.array_limit ? fmt::format(", at most {} at once", rep->job.array_limit)
                                      : std::string());
    tell_sizing(*rep);
  }
  tell_failed_after(*rep);
  return 0;
}

bus::result<std::string> submit_job(const submit_options& o, std::optional<session>* keep) {
  if (o.from)
    return bus::error_info{errc::invalid_argument,
                           "--from submits many jobs: use cq submit --from FILE"};
  auto rep = submit_reply(o, keep);
  if (!rep)
    return rep.error();
  if (!o.quiet)
    tell_sizing(*rep);
  tell_failed_after(*rep);
  return rep->job.id;
}

int run_logs(const logs_options& given) {
  auto o = given;
  if (o.tail_text) {
    auto n = count_of("--tail", *o.tail_text, "lines");
    if (!n)
      return report_error(n.error(), false);
    o.tail = *n;
  }
  auto s = open_session();
  if (!s)
    return report_error(s.error(), false);
  // An array's name or id names many outputs: say how to name one of them.
  if (auto r = s->call<bus::show_rep>(bus::show_req{o.job});
      !r && r.error().code == errc::not_found)
    if (auto e = one_task_please(*s, o.job, "cq logs reads one task's output"))
      return report_error(*e, false);
  return follow_logs(*s, o, [] { return false; });
}

int follow_logs(session& s, const logs_options& o, const std::function<bool()>& interrupted) {
  bus::logs_req req;
  req.job = o.job;
  req.max_bytes = bus::limits::log_chunk_bytes;
  if (!o.allocation.empty())
    req.allocation = o.allocation;
  std::string current = o.allocation;  // the allocation whose output is being read
  std::string next_allocation;         // the attempt after it, once current is read out
  bool buffering = o.tail.has_value(); // --tail: collect up to the first eof, then trim
  std::string buffered;
  int stalls = 0; // replies that neither advanced nor reached eof
  // A follow survives a coordinator restart the way `cq events -f` does: it
  // asks again from the offset it printed, for up to this long.
  constexpr std::int64_t unavailable_grace_ms = 120'000;
  std::int64_t unavailable_since = -1;
  std::int64_t next_why_ms = 0; // when to ask again why a queued job waits
  std::string said;             // what was said about it last
  // Between reads at the end of the output: a job's next event (its start,
  // its end) ends the pause at once; output is asked for again after 50 ms,
  // then less often while none comes (up to every 200 ms).
  std::uint64_t events_cursor = 0;
  std::int64_t pause_ms = 50;
  for (;;) {
    if (interrupted()) {
      if (buffering)
        write_stdout(buffered);
      std::fflush(stdout);
      return 130;
    }
    auto rep = s.call<bus::logs_rep>(req);
    if (!rep && !next_allocation.empty()) {
      // The old attempt's output cannot be read to its end (its node is
      // down, its directory gone): said, and the new attempt followed.
      std::fflush(stdout);
      fmt::print(stderr, "cq: the rest of allocation {}'s output cannot be read ({})\n",
                 escape_control(current), escape_control(rep.error().message));
      rep = bus::logs_rep{current, {}, req.offset, true, false};
    }
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
      } else if (o.allocation.empty()) {
        // --follow across a requeue: the job has a new attempt. This reply was
        // read at the old allocation's offset, so it is dropped; the old
        // one is read to its end first (the node's line on why it ended
        // comes last, and was lost), then the new one from its start.
        next_allocation = rep->allocation;
        req.allocation = current;
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
    if (rep->eof && !next_allocation.empty()) {
      std::fflush(stdout);
      fmt::print(stderr, "cq: job {} moved to allocation {}\n", escape_control(o.job),
                 escape_control(next_allocation));
      current = std::exchange(next_allocation, std::string());
      req.allocation.reset(); // the latest again
      req.offset = 0;
      continue;
    }
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
    if (!o.follow && rep->allocation.empty() && !rep->terminal) {
      // Nothing printed because it has not started: say so, and why.
      std::fflush(stdout);
      fmt::print(stderr,
                 "cq: job {} has not started yet, so it has no output (cq logs -f waits "
                 "for it)\n",
                 escape_control(o.job));
      if (auto why = s.call<bus::show_rep>(bus::show_req{o.job}))
        tell_waiting(*why, said);
    }
    if (rep->terminal && rep->allocation.empty()) {
      // It ended without ever starting (cancelled, a failed dependency):
      // say so, not an empty success.
      std::fflush(stdout);
      if (o.quiet)
        break; // cq run -q: its one line on the end says it
      if (auto shown = s.call<bus::show_rep>(bus::show_req{o.job}))
        fmt::print(stderr, "cq: job {} {} before it started, so it has no output\n",
                   escape_control(o.job),
                   shown->job.state == bus::job_state::cancelled
                       ? std::string("was cancelled")
                       : fmt::format("ended ({})", render_detail::outcome_words(shown->job)));
      break;
    }
    if (!o.follow || rep->terminal)
      break;
    // Not started yet: say why it waits (every few seconds, once per change).
    if (rep->allocation.empty() && !o.quiet && sys::mono_ms() >= next_why_ms) {
      next_why_ms = sys::mono_ms() + 2000;
      if (auto why = s.call<bus::show_rep>(bus::show_req{o.job}))
        tell_waiting(*why, said);
    }
    std::fflush(stdout);
    pause_ms = advanced ? 50 : std::min<std::int64_t>(2 * pause_ms, 200);
    wait_for_news(s, o.job, events_cursor, pause_ms);
  }
  std::fflush(stdout);
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
                         "cq move needs where to: one of --front, --back, --before JOB, --after "
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
    print_line(rep->job.position ? fmt::format("{} is #{} in {}", rep->job.id, rep->job.position,
                                               rep->job.priority)
                                 : fmt::format("{} is in {}", rep->job.id, rep->job.priority));
  return 0;
}

} // namespace cq::cli
