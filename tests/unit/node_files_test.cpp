// The node's grouped record writes on the real disk (node/adapters/files.hpp:
// write_files_atomic): each file's result is its own, a failed one leaves
// nothing behind, and the others are written whole.
#include "node/adapters/files.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using cq::test::read_text;
using cq::test::temp_dir;

TEST_CASE("a group of records is written whole, each file's result its own, with no temporary "
          "file left") {
  temp_dir t("cq-files");
  fs::create_directories(t.path / "a1");
  fs::create_directories(t.path / "a2");
  REQUIRE(cq::node::write_file_atomic(t.path / "a1" / "exit.json", "old\n"));
  std::vector<cq::node::file_write> group{
      {t.path / "a1" / "exit.json", "{\"a\":1}\n"},
      {t.path / "missing" / "exit.json", "{\"b\":2}\n"},
      {t.path / "a2" / "exit.json", "{\"c\":3}\n", 0600},
      {t.path / "a2" / "other.json", "{}\n"},
  };
  auto written = cq::node::write_files_atomic(group);
  REQUIRE(written.size() == 4);
  CHECK(written[0]);
  REQUIRE_FALSE(written[1]);
  CHECK(written[1].error().message.find("missing") != std::string::npos);
  CHECK(written[2]);
  CHECK(written[3]);
  CHECK(read_text(t.path / "a1" / "exit.json") == "{\"a\":1}\n"); // replaced
  CHECK(read_text(t.path / "a2" / "exit.json") == "{\"c\":3}\n");
  CHECK(read_text(t.path / "a2" / "other.json") == "{}\n");
  CHECK((fs::status(t.path / "a2" / "exit.json").permissions() & fs::perms::group_read) ==
        fs::perms::none);
  CHECK_FALSE(fs::exists(t.path / "missing"));
  for (auto& e : fs::recursive_directory_iterator(t.path))
    CHECK(e.path().extension() != ".tmp");
  CHECK(cq::node::write_files_atomic({}).empty());
}

TEST_CASE("a large group is written in parts, and a file named twice ends with its last content") {
  temp_dir t("cq-files");
  std::vector<cq::node::file_write> group;
  for (int i = 0; i < 150; ++i) {
    auto dir = t.path / ("a" + std::to_string(i % 3));
    fs::create_directories(dir);
    group.push_back({dir / ("f" + std::to_string(i)), std::to_string(i) + "\n"});
  }
  group.push_back({t.path / "a0" / "f0", "again\n"}); // f0 is in the group already
  auto written = cq::node::write_files_atomic(group);
  REQUIRE(written.size() == group.size());
  for (auto& w : written)
    CHECK(w);
  CHECK(read_text(t.path / "a2" / "f149") == "149\n");
  CHECK(read_text(t.path / "a0" / "f0") == "again\n");
  for (auto& e : fs::recursive_directory_iterator(t.path))
    CHECK(e.path().extension() != ".tmp");
}
