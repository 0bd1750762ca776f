#include "config/config.hpp"

#include "cq/units.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <map>

namespace cq::coord {

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
  for (auto& [tname, tnode] : doc) {
    auto t = schema.find(std::string(tname.str()));
    auto line = tnode.source().begin.line;
    if (t == schema.end() || !tnode.is_table())
      return fmt::format("{}:{}: unknown table '{}' (known: scheduler, nodes, "
                         "notify_blocked_after, retention)",
                         source, line, tname.str());
    for (auto& [kname, knode] : *tnode.as_table()) {
      auto key = std::string(tname.str()) + "." + std::string(kname.str());
      auto kl = knode.source().begin.line;
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
