// node.toml's [retention] table: a duration, "never", or an error naming it.
#include "cq/node/config.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

cq::bus::result<cq::node::node_config> load_with(const std::string& extra) {
  char tmpl[] = "/tmp/cq-node-config-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  auto file = dir / "node.toml";
  std::ofstream(file) << "endpoint = \"tcp://127.0.0.1:7800\"\nname = \"n1\"\ntoken = \"t\"\n"
                      << extra;
  auto cfg = cq::node::load_node_config(file);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return cfg;
}

} // namespace

TEST_CASE("node.toml's [retention] allocations: 30 days by default, a duration, or never") {
  auto plain = load_with("");
  REQUIRE(plain);
  CHECK(plain->retention.allocations_ms == std::int64_t{30} * 24 * 3600 * 1000);
  auto half_day = load_with("[retention]\nallocations = \"12h\"\n");
  REQUIRE(half_day);
  CHECK(half_day->retention.allocations_ms == std::int64_t{12} * 3600 * 1000);
  auto never = load_with("[retention]\nallocations = \"never\"\n");
  REQUIRE(never);
  CHECK_FALSE(never->retention.allocations_ms.has_value());
  for (auto bad : {"\"soon\"", "\"0s\"", "30"}) {
    auto r = load_with(std::string("[retention]\nallocations = ") + bad + "\n");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("retention.allocations") != std::string::npos);
  }
}
