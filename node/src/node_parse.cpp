// The pure parts of the node's host probes (memcap.hpp, meminfo.hpp): the
// names of memory-cap modes, the OOM-kill counter's text, /proc/meminfo's and
// /proc/<pid>/stat's text, and the [capacity] overrides. The reading is in
// node/adapters/.
#include "cq/node/files.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/meminfo.hpp"
#include "cq/node/procscan.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>

namespace cq::node {

namespace {

// Value in bytes of a line "Key:   1234 kB", or nullopt.
std::optional<std::uint64_t> parse_kb(std::string_view rest) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
    rest.remove_prefix(1);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (ec != std::errc{} || p == rest.data())
    return std::nullopt;
  std::string_view unit(p, static_cast<std::size_t>(rest.data() + rest.size() - p));
  while (!unit.empty() && unit.front() == ' ')
    unit.remove_prefix(1);
  if (unit.starts_with("kB")) {
    if (v > UINT64_MAX / 1024)
      return std::nullopt;
    return v * 1024;
  }
  return v;
}

} // namespace

std::string_view to_string(memcap_mode m) {
  switch (m) {
  case memcap_mode::cgroup_v2:
    return "cgroup_v2";
  case memcap_mode::cgroup_v1:
    return "cgroup_v1";
  case memcap_mode::watchdog:
    return "watchdog";
  }
  return "watchdog";
}

std::optional<std::uint64_t> parse_oom_kill(std::string_view text, bool fallback_under_oom) {
  std::optional<std::uint64_t> kills, under;
  while (!text.empty()) {
    auto line = next_line(text);
    auto sp = line.find(' ');
    if (sp == std::string_view::npos)
      continue;
    auto key = line.substr(0, sp);
    auto val = line.substr(sp + 1);
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (ec != std::errc{})
      continue;
    if (key == "oom_kill")
      kills = v;
    else if (key == "under_oom")
      under = v;
  }
  if (kills)
    return kills;
  if (fallback_under_oom)
    return under;
  return std::nullopt;
}

std::optional<mem_info> parse_meminfo(std::string_view text) {
  std::optional<std::uint64_t> total, available;
  while (!text.empty()) {
    auto line = next_line(text);
    if (line.starts_with("MemTotal:"))
      total = parse_kb(line.substr(9));
    else if (line.starts_with("MemAvailable:"))
      available = parse_kb(line.substr(13));
  }
  if (!total || !available)
    return std::nullopt;
  return mem_info{*total, *available};
}

std::optional<mem_info> apply_capacity(std::optional<mem_info> measured,
                                       std::optional<std::uint64_t> total_override,
                                       std::optional<std::uint64_t> available_override) {
  if (total_override && available_override)
    return mem_info{*total_override, *available_override};
  if (!measured)
    return std::nullopt;
  mem_info m = *measured;
  if (total_override) {
    m.total_bytes = *total_override;
    m.available_bytes = std::min(m.available_bytes, m.total_bytes);
  }
  if (available_override)
    m.available_bytes = *available_override;
  return m;
}

std::optional<proc_stat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  auto rest = text.substr(close + 1);
  proc_stat st;
  // Tokens after ')': 0 = state (field 3), so field n is token n - 3.
  for (int i = 0; i <= 21; ++i) {
    auto tok = next_token(rest);
    if (tok.empty())
      return std::nullopt;
    if (i == 2 && !parse_num(tok, st.pgrp))
      return std::nullopt;
    if (i == 21) {
      // rss is signed in the kernel's format; a negative value never happens
      // for a live process, but is read as 0 rather than as garbage.
      std::int64_t rss = 0;
      if (!parse_num(tok, rss))
        return std::nullopt;
      st.rss_pages = rss > 0 ? static_cast<std::uint64_t>(rss) : 0;
    }
  }
  return st;
}

std::string group_name(const memcap_setup& setup, const std::string& allocation) {
  return setup.owner.empty() ? "cq-" + allocation : "cq-" + setup.owner + "-" + allocation;
}

std::string allocation_of_group(const memcap_setup& setup, const std::string& name) {
  if (setup.owner.empty())
    return {};
  auto prefix = "cq-" + setup.owner + "-";
  if (!name.starts_with(prefix))
    return {};
  auto id = name.substr(prefix.size());
  return is_valid_id(id) ? id : std::string();
}

marker procargs2_environ_has(std::string_view s, std::string_view needle) {
  if (s.size() < sizeof(int))
    return marker::unreadable;
  int argc = 0;
  std::memcpy(&argc, s.data(), sizeof argc);
  s.remove_prefix(sizeof argc);
  auto skip_one = [&s] { // one string and its NUL
    auto end = s.find('\0');
    s.remove_prefix(end == std::string_view::npos ? s.size() : end + 1);
  };
  skip_one(); // the executable's path
  while (!s.empty() && s.front() == '\0')
    s.remove_prefix(1); // its padding
  for (int i = 0; i < argc && !s.empty(); ++i)
    skip_one();
  // A process always has strings after argv (its environment, then the
  // kernel's apple[] strings); none means the kernel withheld them (a
  // restricted process): unreadable, not absent.
  if (s.find_first_not_of('\0') == std::string_view::npos)
    return marker::unreadable;
  return environ_list_has(s, needle) ? marker::present : marker::absent;
}

bool environ_list_has(std::string_view s, std::string_view needle) {
  while (!s.empty()) {
    auto end = s.find('\0');
    auto entry = s.substr(0, end);
    if (entry.empty())
      return false;
    if (entry == needle)
      return true;
    if (end == std::string_view::npos)
      return false;
    s.remove_prefix(end + 1);
  }
  return false;
}

bool parse_stat_line(std::string_view text, proc_entry& out) {
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return false;
  if (!parse_num(text.substr(0, open > 0 ? open - 1 : 0), out.pid))
    return false;
  auto rest = text.substr(close + 1);
  // Token i after ')' is field i + 3.
  for (int i = 0; i <= 21; ++i) {
    auto tok = next_token(rest);
    if (tok.empty())
      return false;
    switch (i) {
    case 0:
      out.state = tok[0];
      break;
    case 1:
      if (!parse_num(tok, out.ppid))
        return false;
      break;
    case 2:
      if (!parse_num(tok, out.pgrp))
        return false;
      break;
    case 19:
      if (!parse_num(tok, out.start_ticks))
        return false;
      break;
    case 21: {
      std::int64_t rss = 0;
      if (!parse_num(tok, rss))
        return false;
      out.rss_pages = rss > 0 ? static_cast<std::uint64_t>(rss) : 0;
      break;
    }
    default:
      break;
    }
  }
  return true;
}

env_area stat_env_area(std::string_view text) {
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return env_area::unknown;
  auto rest = text.substr(close + 1);
  // Token i after ')' is field i + 3: state 3, flags 9, env_start 50, env_end 51.
  constexpr std::uint64_t pf_kthread = 0x00200000;
  char state = '?';
  std::uint64_t flags = 0;
  std::uint64_t env_start = 0;
  for (int i = 0; i <= 48; ++i) {
    auto tok = next_token(rest);
    if (tok.empty())
      return env_area::unknown;
    if (i == 0)
      state = tok[0];
    else if (i == 6 && !parse_num(tok, flags))
      return env_area::unknown;
    else if (i == 47 && !parse_num(tok, env_start))
      return env_area::unknown;
    else if (i == 48) {
      std::uint64_t env_end = 0;
      if (!parse_num(tok, env_end) || (flags & pf_kthread) || state == 'Z' || state == 'X')
        return env_area::unknown;
      if (env_end == 0)
        return env_area::none;
      return env_end > env_start ? env_area::some : env_area::empty;
    }
  }
  return env_area::unknown;
}

} // namespace cq::node
