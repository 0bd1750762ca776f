// The GPU side's pure parts (gpu.hpp): node.toml's [gpu] table, nvidia-smi's
// CSV answers, lanes, attribution helpers and VRAM caps. No OS contact: the
// probes that run nvidia-smi and read /proc are node/adapters/gpu.cpp.
#include "cq/node/files.hpp"
#include "cq/node/gpu.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <set>

namespace cq::node {

namespace {

constexpr std::uint64_t mib = 1024 * 1024;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto at = s.find(sep);
    out.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos)
      return out;
    s.remove_prefix(at + 1);
  }
}

template <class T>
bool parse_int(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && !s.empty();
}

/// A memory figure in MiB: a number, or "[N/A]"/"[Not Supported]" (0). nullopt = garbage.
std::optional<std::uint64_t> parse_mib(std::string_view s) {
  if (!s.empty() && s.front() == '[')
    return 0;
  std::uint64_t v = 0;
  if (!parse_int(s, v) || v > (UINT64_MAX / mib))
    return std::nullopt;
  return v * mib;
}

template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    fn(trim(text.substr(0, nl)));
    if (nl == std::string_view::npos)
      break;
    text.remove_prefix(nl + 1);
  }
}

/// Where a registered lane's name, index and uuid were given (for duplicate messages).
struct registered_lane {
  bus::lane_info lane;
  std::int64_t line = 0; ///< of its [[gpu.lanes]] header
};

/// An invalid_argument error at `at` of `file` ("file:line: what").
bus::error_info config_error(const std::filesystem::path& file, const toml::source_region& at,
                             std::string_view what) {
  return bus::error_info{errc::invalid_argument,
                         fmt::format("{}:{}: {}", file.string(), at.begin.line, what)};
}

/// Reads the `[[gpu.lanes]]` array `lanes_node` of `file`.
bus::result<std::vector<bus::lane_info>> read_lanes(const toml::node& lanes_node,
                                                    const std::filesystem::path& file) {
  auto bad = [&](const toml::source_region& at, std::string_view what) {
    return config_error(file, at, what);
  };
  constexpr const char* hint = "'gpu.lanes' must be an array of tables ([[gpu.lanes]] with name, "
                               "index, uuid, vram_bytes)";
  const toml::array* arr = lanes_node.as_array();
  if (!arr)
    return bad(lanes_node.source(), hint);
  if (arr->empty())
    return bad(lanes_node.source(),
               "'gpu.lanes' is empty: register at least one lane, or leave it out "
               "to detect lanes with nvidia-smi");
  std::vector<registered_lane> seen;
  for (auto& item : *arr) {
    const toml::table* tbl = item.as_table();
    if (!tbl)
      return bad(item.source(), hint);
    registered_lane r;
    r.line = static_cast<std::int64_t>(item.source().begin.line);
    bool has_name = false, has_vram = false;
    for (auto&& [k, v] : *tbl) {
      auto key = k.str();
      if (key == "name") {
        auto s = v.value<std::string>();
        if (!v.is_string() || !s || !valid_lane_name(*s))
          return bad(v.source(),
                     "'gpu.lanes.name' must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
        for (auto& other : seen)
          if (other.lane.name == *s)
            return bad(v.source(), fmt::format("'gpu.lanes.name' \"{}\" is already the name of the "
                                               "lane registered on line {}",
                                               *s, other.line));
        r.lane.name = *s;
        has_name = true;
      } else if (key == "index") {
        auto i = v.value_exact<std::int64_t>();
        if (!v.is_integer() || !i || *i < 0)
          return bad(v.source(), "'gpu.lanes.index' must be an integer >= 0 (a CUDA device index)");
        for (auto& other : seen)
          if (other.lane.index == *i)
            return bad(v.source(), fmt::format("'gpu.lanes.index' {} is already the index of lane "
                                               "'{}' (line {})",
                                               *i, other.lane.name, other.line));
        r.lane.index = *i;
      } else if (key == "uuid") {
        auto s = v.value<std::string>();
        if (!v.is_string() || !s || s->empty())
          return bad(v.source(), "'gpu.lanes.uuid' must be a non-empty string");
        for (auto& other : seen)
          if (other.lane.uuid == *s)
            return bad(v.source(),
                       fmt::format("'gpu.lanes.uuid' \"{}\" is already the uuid of lane "
                                   "'{}' (line {})",
                                   *s, other.lane.name, other.line));
        r.lane.uuid = *s;
      } else if (key == "vram_bytes") {
        auto i = v.value_exact<std::int64_t>();
        if (!v.is_integer() || !i || *i < 0)
          return bad(v.source(), "'gpu.lanes.vram_bytes' must be an integer >= 0 (the lane's "
                                 "total VRAM in bytes)");
        r.lane.vram_total_bytes = static_cast<std::uint64_t>(*i);
        has_vram = true;
      } else {
        return bad(k.source(), fmt::format("unknown key 'gpu.lanes.{}' (known: name, index, uuid, "
                                           "vram_bytes)",
                                           key));
      }
    }
    if (!has_name)
      return bad(item.source(), "'gpu.lanes.name' is missing in this [[gpu.lanes]] table");
    if (!has_vram)
      return bad(item.source(),
                 fmt::format("'gpu.lanes.vram_bytes' is missing for lane '{}' (its total VRAM in "
                             "bytes)",
                             r.lane.name));
    seen.push_back(std::move(r));
  }
  std::vector<bus::lane_info> lanes;
  for (auto& r : seen)
    lanes.push_back(std::move(r.lane));
  return lanes;
}

} // namespace

bool valid_lane_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// ---- configuration ----------------------------------------------------------------

bus::result<gpu_config> parse_gpu_config(std::string_view text,
                                         const std::filesystem::path& node_toml) {
  gpu_config cfg;
  toml::table root;
  try {
    root = toml::parse(text, node_toml.string());
  } catch (const toml::parse_error& e) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}: not valid TOML: {}", node_toml.string(),
                                       e.source().begin.line, e.description())};
  } catch (const std::exception& e) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}: cannot read: {}", node_toml.string(), e.what())};
  }
  const toml::node* node = root.get("gpu");
  if (!node)
    return cfg;
  auto bad = [&](const toml::source_region& at, std::string what) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}: {}", node_toml.string(), at.begin.line, what)};
  };
  const toml::table* tbl = node->as_table();
  if (!tbl)
    return bad(node->source(), "'gpu' must be a table ([gpu])");
  for (auto&& [k, v] : *tbl) {
    if (k.str() == "nvidia_smi") {
      auto s = v.value<std::string>();
      if (!v.is_string() || !s || s->empty())
        return bad(v.source(), "'gpu.nvidia_smi' must be a non-empty string (a path or a name "
                               "in PATH)");
      cfg.nvidia_smi = *s;
    } else if (k.str() == "kernel_log") {
      auto s = v.value<std::string>();
      if (!v.is_string() || !s)
        return bad(v.source(), "'gpu.kernel_log' must be a string (\"\" = not followed)");
      cfg.kernel_log = *s;
    } else if (k.str() == "telemetry") {
      auto b = v.value<bool>();
      if (!v.is_boolean() || !b)
        return bad(v.source(), "'gpu.telemetry' must be true or false");
      cfg.telemetry = *b;
    } else if (k.str() == "lock_paths") {
      const toml::array* arr = v.as_array();
      if (!arr)
        return bad(v.source(), "'gpu.lock_paths' must be an array of absolute paths");
      for (auto& item : *arr) {
        auto s = item.value<std::string>();
        if (!item.is_string() || !s || s->empty() || s->front() != '/')
          return bad(item.source(), "'gpu.lock_paths' must hold absolute paths");
        cfg.lock_paths.push_back(*s);
      }
    } else if (k.str() == "lanes") {
      auto lanes = read_lanes(v, node_toml);
      if (!lanes)
        return lanes.error();
      cfg.lanes = std::move(*lanes);
    } else {
      return bad(k.source(), fmt::format("unknown key 'gpu.{}' (known: nvidia_smi, lock_paths, "
                                         "kernel_log, telemetry, lanes)",
                                         k.str()));
    }
  }
  return cfg;
}

// ---- parsing ------------------------------------------------------------------------

std::vector<gpu_device> parse_gpu_query(std::string_view text) {
  std::vector<gpu_device> out;
  for_each_line(text, [&](std::string_view line) {
    if (line.empty() || line.find("MIG") != std::string_view::npos)
      return;
    auto f = split(line, ',');
    // index, uuid, name (may itself hold commas), memory.total, memory.used
    if (f.size() < 5)
      return;
    gpu_device d;
    if (!parse_int(f[0], d.index) || d.index < 0 || d.index > 1023)
      return;
    if (f[1].substr(0, 4) != "GPU-")
      return;
    d.uuid = std::string(f[1]);
    std::string name;
    for (std::size_t i = 2; i + 2 < f.size(); ++i)
      name += fmt::format("{}{}", name.empty() ? "" : ", ", f[i]);
    d.name = std::move(name);
    auto total = parse_mib(f[f.size() - 2]);
    auto used = parse_mib(f[f.size() - 1]);
    if (!total || !used)
      return;
    d.total_bytes = *total;
    d.used_bytes = *used;
    for (auto& seen : out)
      if (seen.index == d.index || seen.uuid == d.uuid)
        return;
    out.push_back(std::move(d));
  });
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.index < b.index; });
  return out;
}

std::vector<gpu_app> parse_apps_query(std::string_view text) {
  std::vector<gpu_app> out;
  for_each_line(text, [&](std::string_view line) {
    auto f = split(line, ',');
    if (f.size() != 3)
      return;
    gpu_app a;
    if (!parse_int(f[0], a.pid) || a.pid <= 0 || f[1].empty())
      return;
    a.uuid = std::string(f[1]);
    auto used = parse_mib(f[2]);
    if (!used)
      return;
    a.used_bytes = *used;
    out.push_back(std::move(a));
  });
  return out;
}

std::vector<bus::lane_info> lanes_from_devices(const std::vector<gpu_device>& devices) {
  std::vector<bus::lane_info> lanes;
  for (auto& d : devices) {
    bus::lane_info l;
    l.name = fmt::format("gpu{}", d.index);
    l.index = d.index;
    l.uuid = d.uuid;
    l.vram_total_bytes = d.total_bytes;
    l.vram_used_bytes = d.used_bytes;
    lanes.push_back(std::move(l));
  }
  return lanes;
}

std::optional<proc_facts> parse_stat_ppid_pgrp(std::string_view text) {
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  auto rest = trim(text.substr(close + 1));
  // state ppid pgrp ...
  std::vector<std::string_view> tok;
  while (tok.size() < 3 && !rest.empty()) {
    auto sp = rest.find(' ');
    tok.push_back(rest.substr(0, sp));
    if (sp == std::string_view::npos)
      break;
    rest = trim(rest.substr(sp + 1));
  }
  proc_facts f;
  if (tok.size() < 3 || !parse_int(tok[1], f.ppid) || !parse_int(tok[2], f.pgrp))
    return std::nullopt;
  return f;
}

std::optional<std::string> environ_allocation_id(std::string_view block) {
  constexpr std::string_view key = "CQ_ALLOCATION_ID=";
  while (!block.empty()) {
    auto end = block.find('\0');
    auto entry = block.substr(0, end);
    if (entry.substr(0, key.size()) == key)
      return std::string(entry.substr(key.size()));
    if (end == std::string_view::npos)
      break;
    block.remove_prefix(end + 1);
  }
  return std::nullopt;
}

std::uint64_t vram_use::total() const {
  std::uint64_t t = 0;
  for (auto& [lane, b] : per_lane)
    t += b;
  return t;
}

std::uint64_t vram_use::max_lane() const {
  std::uint64_t m = 0;
  for (auto& [lane, b] : per_lane)
    m = std::max(m, b);
  return m;
}

std::optional<std::pair<std::string, std::uint64_t>> over_vram_cap(const vram_use& use,
                                                                   std::uint64_t cap) {
  for (auto& [lane, b] : use.per_lane)
    if (b > cap)
      return std::pair{lane, b};
  return std::nullopt;
}

} // namespace cq::node
