#include "cq/node/config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <sstream>
#include <system_error>

namespace cq::node {

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
  return cfg;
}

status save_node_config(const std::filesystem::path& file, const node_config& cfg) {
  toml::table tbl{{"endpoint", cfg.endpoint}, {"name", cfg.name}, {"token", cfg.token}};
  std::ostringstream out;
  out << "# cq-node identity (written by cq-node --join). The token is a secret.\n" << tbl << "\n";
  return write_file_atomic(file, out.str(), 0600);
}

} // namespace cq::node
