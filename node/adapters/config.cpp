#include "cq/node/config.hpp"
#include "cq/bus/curve.hpp"
#include "cq/units.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <initializer_list>
#include <sstream>
#include <system_error>

namespace cq::node {

namespace {

/// One optional integer key of a table: where it goes and its smallest valid value.
struct u64_key {
  const char* name;
  std::optional<std::uint64_t>* dest;
  std::uint64_t min;
  const char* unit; ///< for the message: " (bytes)" or ""
};

bus::error_info invalid(const std::filesystem::path& file, const toml::source_region& at,
                        std::string what) {
  if (at.begin.line > 0)
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}: {}", file.string(), at.begin.line, what)};
  return bus::error_info{errc::invalid_argument, fmt::format("{}: {}", file.string(), what)};
}

/// Reads table `name` of `root` (absent = nothing to do) into `keys`.
std::optional<bus::error_info> read_table(const std::filesystem::path& file,
                                          const toml::table& root, std::string_view name,
                                          std::initializer_list<u64_key> keys) {
  const toml::node* node = root.get(name);
  if (!node)
    return std::nullopt;
  const toml::table* tbl = node->as_table();
  if (!tbl)
    return invalid(file, node->source(), fmt::format("'{}' must be a table ([{}])", name, name));
  for (auto&& [k, v] : *tbl) {
    const u64_key* key = nullptr;
    for (auto& candidate : keys)
      if (k.str() == candidate.name)
        key = &candidate;
    if (!key) {
      std::string known;
      for (auto& candidate : keys)
        known += fmt::format("{}{}", known.empty() ? "" : ", ", candidate.name);
      return invalid(file, k.source(),
                     fmt::format("unknown key '{}.{}' (known: {})", name, k.str(), known));
    }
    auto i = v.value_exact<std::int64_t>();
    if (!v.is_integer() || !i || *i < 0 || static_cast<std::uint64_t>(*i) < key->min)
      return invalid(
          file, v.source(),
          fmt::format("'{}.{}' must be an integer >= {}{}", name, key->name, key->min, key->unit));
    *key->dest = static_cast<std::uint64_t>(*i);
  }
  return std::nullopt;
}

/// Reads [memory]: string keys and one integer.
std::optional<bus::error_info> read_memory(const std::filesystem::path& file,
                                           const toml::table& root, memory_config& mem) {
  const toml::node* node = root.get("memory");
  if (!node)
    return std::nullopt;
  const toml::table* tbl = node->as_table();
  if (!tbl)
    return invalid(file, node->source(), "'memory' must be a table ([memory])");
  for (auto&& [k, v] : *tbl) {
    auto key = k.str();
    if (key == "sample_ms") {
      auto i = v.value_exact<std::int64_t>();
      if (!v.is_integer() || !i || *i < 10 || *i > 10'000)
        return invalid(file, v.source(), "'memory.sample_ms' must be an integer from 10 to 10000");
      mem.sample_ms = static_cast<std::uint64_t>(*i);
      continue;
    }
    auto str = v.value<std::string>();
    if (key != "mode" && key != "cgroup_parent" && key != "cgroup_root")
      return invalid(file, k.source(),
                     fmt::format("unknown key 'memory.{}' (known: mode, cgroup_parent, "
                                 "cgroup_root, sample_ms)",
                                 key));
    if (!v.is_string() || !str || str->empty())
      return invalid(file, v.source(), fmt::format("'memory.{}' must be a non-empty string", key));
    if (key == "mode") {
      if (*str != "auto" && *str != "cgroup_v2" && *str != "cgroup_v1" && *str != "watchdog")
        return invalid(file, v.source(),
                       "'memory.mode' must be one of auto, cgroup_v2, cgroup_v1, watchdog");
      mem.mode = *str;
    } else {
      if (str->front() != '/')
        return invalid(file, v.source(), fmt::format("'memory.{}' must be an absolute path", key));
      if (key == "cgroup_parent")
        mem.cgroup_parent = *str;
      else
        mem.cgroup_root = *str;
    }
  }
  return std::nullopt;
}

} // namespace

bus::result<node_config> load_node_config(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    return bus::error_info{errc::not_found, fmt::format("{}: no such file (join the coordinator "
                                                        "first: cq-node --join ENDPOINT CODE NAME)",
                                                        file.string())};
  toml::table tbl;
  try {
    tbl = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}:{}:{}: not valid TOML: {}", file.string(), where.line,
                                       where.column, e.description())};
  } catch (const std::exception& e) {
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}: cannot read: {}", file.string(), e.what())};
  }
  node_config cfg;
  for (auto [key, dest] : {std::pair{"endpoint", &cfg.endpoint}, std::pair{"name", &cfg.name},
                           std::pair{"token", &cfg.token}}) {
    auto v = tbl[key].value<std::string>();
    if (!v || v->empty())
      return bus::error_info{
          errc::invalid_argument,
          fmt::format("{}: key '{}' is missing, empty or not a string", file.string(), key)};
    *dest = std::move(*v);
  }
  if (auto k = tbl["server_key"]; k) {
    auto v = k.value<std::string>();
    if (!v || !bus::is_z85_key(*v))
      return bus::error_info{errc::invalid_argument,
                             fmt::format("{}: key 'server_key' is not a CURVE public key (40 Z85 "
                                         "characters)",
                                         file.string())};
    cfg.server_key = *v;
  }
  auto& cap = cfg.capacity;
  if (auto e = read_table(file, tbl, "capacity",
                          {{"mem_total_bytes", &cap.mem_total_bytes, 1, " (bytes)"},
                           {"mem_available_bytes", &cap.mem_available_bytes, 0, " (bytes)"},
                           {"cpus", &cap.cpus, 1, ""}}))
    return *e;
  auto& pol = cfg.policy;
  if (auto e = read_table(file, tbl, "policy",
                          {{"ram_reserve_bytes", &pol.ram_reserve_bytes, 0, " (bytes)"},
                           {"ram_floor_bytes", &pol.ram_floor_bytes, 0, " (bytes)"},
                           {"vram_cap_bytes", &pol.vram_cap_bytes, 0, " (bytes)"}}))
    return *e;
  if (auto e = read_memory(file, tbl, cfg.memory))
    return *e;
  if (auto node = tbl["run_as"]; node) {
    auto* t = node.as_table();
    if (!t)
      return bus::error_info{
          errc::invalid_argument,
          fmt::format("{}: 'run_as' must be a table of identity = \"user\"", file.string())};
    for (auto& [k, v] : *t) {
      auto user = v.value<std::string>();
      auto id = std::string(k.str());
      bool ok_name = !id.empty() && id.size() <= 64 &&
                     id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789._-") == std::string::npos;
      if (!ok_name || !user || user->empty() || user->size() > 64)
        return bus::error_info{
            errc::invalid_argument,
            fmt::format("{}:{}: run_as.{}: give an identity name and a UNIX user name",
                        file.string(), v.source().begin.line, id)};
      cfg.run_as[id] = *user;
    }
  }
  std::optional<std::uint64_t> max_wait, poll;
  if (auto e = read_table(file, tbl, "cleanup",
                          {{"max_wait_ms", &max_wait, 1, " (milliseconds)"},
                           {"poll_ms", &poll, 10, " (milliseconds)"}}))
    return *e;
  if (max_wait)
    cfg.cleanup.max_wait_ms = *max_wait;
  if (poll)
    cfg.cleanup.poll_ms = *poll;
  if (auto node = tbl["retention"]["allocations"]; node) {
    auto text = node.value<std::string>();
    std::string why;
    std::optional<std::uint64_t> ms;
    if (text && *text != "never")
      ms = cq::parse_duration_ms(*text, why);
    if (!text || (*text != "never" && (!ms || *ms == 0)))
      return bus::error_info{
          errc::invalid_argument,
          fmt::format("{}:{}: retention.allocations: give a duration such as \"30d\", or "
                      "\"never\"",
                      file.string(), node.node()->source().begin.line)};
    cfg.retention.allocations_ms.reset(); // "never"
    if (ms)
      cfg.retention.allocations_ms = static_cast<std::int64_t>(*ms);
  }
  if (auto st = validate_capacity(cap); !st)
    return bus::error_info{errc::invalid_argument,
                           fmt::format("{}: {}", file.string(), st.error().message)};
  return cfg;
}

status validate_capacity(const capacity_config& cap) {
  if (cap.mem_total_bytes && cap.mem_available_bytes &&
      *cap.mem_available_bytes > *cap.mem_total_bytes)
    return bus::error_info{errc::invalid_argument,
                           fmt::format("capacity.mem_available_bytes ({}) exceeds "
                                       "capacity.mem_total_bytes ({})",
                                       *cap.mem_available_bytes, *cap.mem_total_bytes)};
  return done{};
}

status save_node_config(const std::filesystem::path& file, const node_config& cfg) {
  toml::table tbl{{"endpoint", cfg.endpoint}, {"name", cfg.name}, {"token", cfg.token}};
  if (!cfg.server_key.empty())
    tbl.insert("server_key", cfg.server_key);
  std::ostringstream out;
  out << "# cq-node identity (written by cq-node --join). The token is a secret.\n" << tbl << "\n";
  return write_file_atomic(file, out.str(), 0600);
}

} // namespace cq::node
