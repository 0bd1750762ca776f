// The coordinator's CURVE keypair file (bus/curve.hpp).
#include "cq/bus/curve.hpp"

#include <catch2/catch.hpp>

#include "scratch_dir.hpp"

#include <sys/stat.h>

#include <thread>
#include <vector>

using namespace cq;

// Found by the test command: `cq-coordinator --show-key` read the key file
// that a starting coordinator had created but not yet written ("empty").
TEST_CASE("processes that open a keypair at once never see a half-written file, and agree") {
  test::temp_dir dir("cq-curve");
  for (int round = 0; round < 200; ++round) {
    auto path = (dir.path / ("curve" + std::to_string(round) + ".key")).string();
    std::vector<bus::result<bus::curve_keypair>> got(4, bus::error_info{errc::internal, ""});
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < got.size(); ++i)
      threads.emplace_back([&, i] { got[i] = bus::load_or_create_keypair(path); });
    for (auto& t : threads)
      t.join();
    for (auto& k : got) {
      INFO("round " << round << ": " << (k ? std::string() : k.error().message));
      REQUIRE(k);
      CHECK(k->public_key == got[0]->public_key);
      CHECK(k->secret_key == got[0]->secret_key);
    }
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  // Only the key files: no temporary file is left behind.
  std::size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path))
    files += e.path().extension() == ".key" ? 1 : 100;
  CHECK(files == 200);
}
