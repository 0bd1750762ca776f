#include "output.hpp"
#include "render_detail.hpp"
#include "sys.hpp"

#include "commands.hpp"
#include "cq/cli/config.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace cq::cli {

int report_error(const bus::error_info& e, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["error"] = {{"code", std::string(to_string(e.code))}, {"message", e.message}};
    fmt::print("{}\n", dump_json(j));
    std::fflush(stdout);
  } else {
    // One line, and nothing a terminal would obey: the message may come from
    // the network or quote what a user typed.
    fmt::print(stderr, "cq: error: {}: {}\n", to_string(e.code), escape_control(e.message));
  }
  return exit_code(e.code);
}

bus::result<session> open_session() {
  auto cfg = load_config();
  if (!cfg)
    return cfg.error();
  auto token = read_token(cfg->config_dir);
  if (!token)
    return token.error();
  session s;
  s.timeout_ms = cfg->timeout.count();
  std::optional<bus::client_curve> curve;
  if (!cfg->server_key.empty())
    curve = bus::client_curve{cfg->server_key, bus::new_curve_keypair()};
  // This machine's coordinator, through its Unix socket when it serves one
  // (docs/adr/0032, 0047): connected at once, without ZeroMQ. A socket file
  // nothing listens on (left by kill -9) refuses: then the endpoint.
  if (!cfg->local_endpoint.empty()) {
    auto local = std::make_unique<bus::client>(cfg->local_endpoint, *token, cfg->timeout, curve);
    if (local->connected()) {
      s.endpoint = cfg->local_endpoint;
      s.client = std::move(local);
      return s;
    }
  }
  // Nothing listening is known at once on loopback (a refused connect), and
  // a name that does not resolve at once; ZeroMQ alone would retry quietly
  // until the call's timeout.
  auto probe = sys::probe_tcp(cfg->endpoint, 500);
  if (probe.why) {
    auto hint = probe.unresolved ? "the address " + cfg->endpoint_from
                                 : std::string("is it running? cq up starts one on this machine");
    return bus::error_info{errc::unavailable,
                           fmt::format("cannot reach the coordinator at {}: {} ({})", cfg->endpoint,
                                       *probe.why, hint)};
  }
  s.endpoint = cfg->endpoint;
  try {
    s.client = std::make_unique<bus::client>(
        probe.endpoint.empty() ? cfg->endpoint : probe.endpoint, *token, cfg->timeout, curve);
  } catch (const std::exception& e) {
    // ZeroMQ refuses malformed endpoints at connect time.
    return bus::error_info{errc::invalid_argument,
                           fmt::format("bad endpoint '{}': {}", cfg->endpoint, e.what())};
  }
  return s;
}

void text_table::print() const {
  // Cells are escaped before they are measured, so the columns align on what
  // the terminal shows.
  auto escaped = [](const std::vector<std::string>& row) {
    std::vector<std::string> out;
    out.reserve(row.size());
    for (const auto& cell : row)
      out.push_back(escape_control(cell));
    return out;
  };
  std::vector<std::vector<std::string>> lines;
  lines.reserve(rows.size() + 1);
  lines.push_back(escaped(header));
  for (const auto& r : rows)
    lines.push_back(escaped(r));
  std::vector<std::size_t> widths(header.size(), 0);
  for (const auto& row : lines)
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i)
      widths[i] = std::max(widths[i], display_width(row[i]));
  // Too wide for the terminal: the flexible column gives way, down to its
  // header's width (or 8 columns).
  if (auto columns = sys::terminal_width(); columns && flex < widths.size()) {
    std::size_t total = 2 * (widths.size() - 1);
    for (auto w : widths)
      total += w;
    auto least = std::max<std::size_t>(8, display_width(lines.front()[flex]));
    if (total > columns && widths[flex] > least) {
      widths[flex] = std::max(least, widths[flex] - std::min(widths[flex], total - columns));
      for (auto& row : lines)
        if (flex < row.size() && display_width(row[flex]) > widths[flex])
          row[flex] = render_detail::clip(row[flex], widths[flex]);
    }
  }
  std::string out;
  for (const auto& row : lines) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size())
        out.append(widths[i] - display_width(row[i]) + 2, ' ');
    }
    out += '\n';
  }
  write_stdout(out);
}

std::string age_since(std::int64_t at_ms, std::int64_t now_ms) {
  if (at_ms == 0)
    return "-";
  return format_age(now_ms - at_ms);
}

void tell(const std::string& text) {
  fmt::print(stderr, "{}", wrapped_note(text, sys::stderr_terminal_width()));
}

void tell_waiting(const bus::show_rep& rep, std::string& said) {
  if (rep.job.state != bus::job_state::queued || rep.waiting.empty())
    return;
  std::string text;
  for (const auto& line : rep.waiting) {
    if (line.starts_with("fits now"))
      return; // about to start: nothing to explain
    text += (text.empty() ? "" : "; ") + line;
  }
  // The estimate's countdown ("in ~59m58s by estimates") changes at every
  // ask: a line said again only for it would come every few seconds for as
  // long as the job waits. What is compared leaves it out.
  auto gist = waiting_gist(text);
  if (gist == said)
    return;
  said = std::move(gist);
  std::fflush(stdout);
  // "job 3f2a9c1e waits for job ... to succeed", "job 3f2a9c1e waits: needs ...".
  fmt::print(stderr, "cq: job {} {}{}\n", escape_control(rep.job.id.substr(0, 8)),
             text.starts_with("waits ") ? "" : "waits: ", escape_control(text));
}

void write_stdout(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
}

void print_line(std::string_view line) {
  auto out = escape_control(line);
  out += '\n';
  write_stdout(out);
}

void tell_sizing(const bus::submit_rep& rep) {
  if (!rep.sizing)
    return;
  auto& p = *rep.sizing;
  auto cap = format_bytes(rep.job.effective_ram_bytes);
  // A profile's key is the command by default: a script on several lines
  // would fill the terminal, so a long one is cut (cq profile ls has it whole).
  auto key = render_detail::clip(escape_control(p.key), 40);
  if (p.runs == 0)
    tell(fmt::format("cq: RAM cap {} (the default: no run of profile '{}' measured yet); if it "
                     "needs more it is requeued with more; --ram sets a cap of your own",
                     cap, key));
  else
    tell(fmt::format("cq: RAM cap {} from profile '{}' ({} run{}, largest peak {}); if it needs "
                     "more it is requeued with more; --ram sets a cap of your own",
                     cap, key, p.runs, p.runs == 1 ? "" : "s", format_bytes(p.peak_ram_bytes)));
}

void tell_failed_after(const bus::submit_rep& rep) {
  if (!rep.failed_after)
    return;
  // Said even with -q: the job will never run, which a script should hear of.
  auto id = escape_control(*rep.failed_after);
  tell(fmt::format("cq: job {} already ended ({}), so this job will not run: it fails as "
                   "dependency_failed (--after waits for success)",
                   id.substr(0, 8),
                   to_string(rep.failed_after_state.value_or(bus::job_state::failed))));
}

bus::result<std::uint64_t> count_of(std::string_view flag, const std::string& text,
                                    std::string_view what) {
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return bus::error_info{
        errc::invalid_argument,
        fmt::format("{}: '{}' is not a number of {} (0 or more{})", flag,
                    escape_control(text.substr(0, 64)), what,
                    ec == std::errc::result_out_of_range ? ", and not that many" : "")};
  return n;
}

} // namespace cq::cli
