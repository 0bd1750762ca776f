// Unit tests of the CLI's pure parts (cq_cli_lib): size parsing, ages, JSON.
#include "cq/cli/to_json.hpp"
#include "cq/cli/units.hpp"

#include <catch2/catch.hpp>

using cq::cli::parse_size;

namespace {
std::optional<std::uint64_t> size(std::string_view s) {
  std::string error;
  return parse_size(s, error);
}
} // namespace

TEST_CASE("sizes use binary units in every spelling") {
  CHECK(size("4096") == 4096u);
  CHECK(size("1K") == 1024u);
  CHECK(size("1kib") == 1024u);
  CHECK(size("512M") == 512ull << 20);
  CHECK(size("1.5G") == 3ull << 29);
  CHECK(size("1.5 GiB") == 3ull << 29);
  CHECK(size(" 2T ") == 2ull << 40);
  CHECK(size("18446744073709551615") == UINT64_MAX);
}

TEST_CASE("a bad size is refused with a reason") {
  for (auto bad : {"", "-1", "nan", "inf", "1e3", "1X", "G", "1.2.3", "18446744073709551616",
                   "16777216T"}) {
    std::string error;
    CHECK_FALSE(parse_size(bad, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("ages are short") {
  CHECK(cq::cli::format_age(59'999) == "59s");
  CHECK(cq::cli::format_age(3'600'000) == "1h");
  CHECK(cq::cli::format_age(49 * 3'600'000LL) == "2d");
  CHECK(cq::cli::format_age(-5) == "0s");
}

TEST_CASE("protocol structs become JSON with the wire's field names") {
  cq::bus::job_info j;
  j.id = "j1";
  j.argv = {"echo", "hi"};
  j.ram_bytes = 1024;
  auto out = cq::cli::to_json(cq::bus::submit_rep{j});
  CHECK(out["job"]["id"] == "j1");
  CHECK(out["job"]["argv"][1] == "hi");
  CHECK(out["job"]["ram_bytes"] == 1024);
  CHECK(out["job"]["pinned_node"].is_null());
  CHECK(cq::cli::dump_json(cq::cli::to_json(cq::bus::node_ls_req{})) == "{}");
  cq::bus::logs_rep bytes;
  bytes.data = "\xff ok";
  CHECK_NOTHROW(cq::cli::dump_json(cq::cli::to_json(bytes)));
}
