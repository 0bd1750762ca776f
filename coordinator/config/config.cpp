#include "config/config.hpp"

#include "cq/units.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <map>

namespace cq::coord {

const std::vector<std::string> notify_kinds{
    "submitted", "placed",    "started",  "yield_requested", "checkpointed",
    "preempted", "requeued",  "lost",     "blocked",         "held",
    "released",  "on_hold",   "off_hold", "succeeded",       "failed",
    "cancelled", "node_down", "fault"};

namespace {

/// The most [retention] history_jobs may say (memory for about a billion
/// jobs is not a bound anyone means).
constexpr std::int64_t history_jobs_max = 1'000'000'000;

/// Reads one [[notify]] table into `r`; the error, or nullopt.
std::optional<std::string> parse_rule(const toml::table& t, const std::string& source,
                                      std::size_t index, notify_rule& r) {
  auto line = t.source().begin.line;
  auto where = [&](const std::string& key) {
    return fmt::format("{}:{}: notify[{}].{}", source, line, index, key);
  };
  auto strings = [&](const std::string& key, const toml::node& n,
                     std::vector<std::string>& out) -> std::optional<std::string> {
    auto* a = n.as_array();
    if (!a)
      return where(key) + " must be a list of strings";
    for (auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v)
        return where(key) + " must be a list of strings";
      out.push_back(*v);
    }
    return std::nullopt;
  };
  for (auto& [k, n] : t) {
    auto key = std::string(k.str());
    std::optional<std::string> e;
    if (key == "name" || key == "webhook" || key == "format") {
      auto v = n.value<std::string>();
      if (!v)
        return where(key) + " must be a string";
      (key == "name" ? r.name : key == "webhook" ? r.webhook : r.format) = *v;
    } else if (key == "per_job") {
      auto v = n.value<bool>();
      if (!v)
        return where(key) + " must be true or false";
      r.per_job = *v;
    } else if (key == "on") {
      e = strings(key, n, r.on);
    } else if (key == "owners") {
      e = strings(key, n, r.owners);
    } else if (key == "names") {
      e = strings(key, n, r.names);
    } else if (key == "priorities") {
      e = strings(key, n, r.priorities);
    } else if (key == "command") {
      e = strings(key, n, r.command);
    } else {
      return fmt::format("{}:{}: unknown key 'notify[{}].{}' (known: name, on, owners, names, "
                         "priorities, per_job, webhook, format, command)",
                         source, n.source().begin.line, index, key);
    }
    if (e)
      return e;
  }
  if (r.name.empty())
    r.name = fmt::format("notify{}", index);
  if (r.name.size() > 64 ||
      r.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
    return where("name") + ": letters, digits, '_', '-' and '.' only, at most 64";
  if (r.on.empty())
    return where("on") + R"( is needed: the event kinds to tell of, e.g. ["succeeded", "failed"])";
  for (auto& k : r.on)
    if (std::find(notify_kinds.begin(), notify_kinds.end(), k) == notify_kinds.end())
      return where("on") +
             fmt::format(": unknown event kind '{}' (known: {})", k, fmt::join(notify_kinds, ", "));
  for (auto& p : r.priorities)
    if (p != "high" && p != "medium" && p != "low")
      return where("priorities") + fmt::format(": '{}' is not high, medium or low", p);
  if (r.command.empty() == r.webhook.empty())
    return where(r.webhook.empty() ? "command" : "webhook") +
           ": give exactly one target, a webhook URL or a command";
  if (!r.webhook.empty() && r.webhook.rfind("http://", 0) != 0 &&
      r.webhook.rfind("https://", 0) != 0)
    return where("webhook") + ": an http:// or https:// URL";
  if (r.format != "json" && r.format != "slack" && r.format != "ntfy")
    return where("format") + fmt::format(": '{}' is not json, slack or ntfy", r.format);
  if (!r.command.empty() && (r.command[0].empty() || r.command[0][0] != '/'))
    return where("command") + ": the program must be an absolute path";
  return std::nullopt;
}

} // namespace

std::optional<std::string> parse_settings(std::string_view text, const std::string& source,
                                          coordinator_settings& into) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return fmt::format("{}:{}: {}", source, e.source().begin.line, e.description());
  }
  using S = coordinator_settings;
  struct field {
    std::int64_t S::*out;
    bool never_ok;
  };
  const std::map<std::string, std::map<std::string, field>> schema{
      {"scheduler",
       {{"lease", {&S::lease_ms, false}}, {"yield_grace", {&S::yield_grace_ms, false}}}},
      {"nodes",
       {{"timeout", {&S::node_timeout_ms, false}}, {"lost_after", {&S::lost_after_ms, true}}}},
      {"notify_blocked_after",
       {{"yield", {&S::blocked_after_yield_ms, false}},
        {"other", {&S::blocked_after_other_ms, false}}}},
      {"retention",
       {{"operations", {&S::operation_window_ms, false}},
        {"history", {&S::history_window_ms, true}}}},
  };
  S out = into; // written back only when the whole file is valid
  out.notify.clear();
  for (auto& [tname, tnode] : doc) {
    if (tname.str() == "notify") {
      auto* rules = tnode.as_array();
      if (!rules)
        return fmt::format("{}:{}: 'notify' is a list of tables: write each rule as [[notify]]",
                           source, tnode.source().begin.line);
      for (auto& rn : *rules) {
        auto* rt = rn.as_table();
        if (!rt)
          return fmt::format("{}:{}: 'notify' is a list of tables: write each rule as [[notify]]",
                             source, rn.source().begin.line);
        notify_rule r;
        if (auto e = parse_rule(*rt, source, out.notify.size(), r))
          return e;
        for (auto& o : out.notify)
          if (o.name == r.name)
            return fmt::format("{}:{}: two notify rules are named '{}'", source,
                               rt->source().begin.line, r.name);
        out.notify.push_back(std::move(r));
      }
      continue;
    }
    if (tname.str() == "http" && tnode.is_table()) {
      for (auto& [kname, knode] : *tnode.as_table()) {
        auto kl = knode.source().begin.line;
        auto v = knode.value<std::string>();
        if (kname.str() == "listen" && v) {
          out.http_listen = *v;
        } else if (kname.str() == "chart_interval" && v) {
          std::string why;
          auto ms = cq::parse_duration_ms(*v, why);
          if (!ms || *ms < 1000 || *ms > 3600 * 1000)
            return fmt::format("{}:{}: 'http.chart_interval': {}", source, kl,
                               ms ? "between 1s and 1h" : why);
          out.chart_interval_ms = static_cast<std::int64_t>(*ms);
        } else if (kname.str() == "listen" || kname.str() == "chart_interval") {
          return fmt::format("{}:{}: 'http.{}' must be a string", source, kl, kname.str());
        } else {
          return fmt::format("{}:{}: unknown key 'http.{}' (known: listen, chart_interval)", source,
                             kl, kname.str());
        }
      }
      continue;
    }
    auto t = schema.find(std::string(tname.str()));
    auto line = tnode.source().begin.line;
    if (t == schema.end() || !tnode.is_table())
      return fmt::format("{}:{}: unknown table '{}' (known: scheduler, nodes, "
                         "notify_blocked_after, retention, http, notify)",
                         source, line, tname.str());
    for (auto& [kname, knode] : *tnode.as_table()) {
      auto key = std::string(tname.str()) + "." + std::string(kname.str());
      auto kl = knode.source().begin.line;
      if (key == "retention.history_jobs") { // a count, not a duration
        auto n = knode.value<std::int64_t>();
        if (knode.value<std::string>() == "never") {
          out.history_jobs = 0;
        } else if (!knode.is_integer() || !n || *n < 1 || *n > history_jobs_max) {
          return fmt::format("{}:{}: '{}' must be a number of jobs from 1 to {} (or \"never\")",
                             source, kl, key, history_jobs_max);
        } else {
          out.history_jobs = static_cast<std::uint64_t>(*n);
        }
        continue;
      }
      auto f = t->second.find(std::string(kname.str()));
      if (f == t->second.end())
        return fmt::format("{}:{}: unknown key '{}'", source, kl, key);
      auto s = knode.value<std::string>();
      if (!s)
        return fmt::format("{}:{}: '{}' must be a duration string such as \"15m\"", source, kl,
                           key);
      if (f->second.never_ok && *s == "never") {
        out.*(f->second.out) = 0;
        continue;
      }
      std::string why;
      auto ms = cq::parse_duration_ms(*s, why);
      if (!ms)
        return fmt::format("{}:{}: '{}': {}{}", source, kl, key, why,
                           f->second.never_ok ? " (or \"never\")" : "");
      if (*ms > 366ull * 24 * 3600 * 1000)
        return fmt::format("{}:{}: '{}': at most a year", source, kl, key);
      out.*(f->second.out) = static_cast<std::int64_t>(*ms);
    }
  }
  into = out;
  return std::nullopt;
}

} // namespace cq::coord
