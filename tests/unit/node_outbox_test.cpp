// The node's outbox on the real disk: a report's seq is never reused across
// restarts (invariant 1), and the seq counter is written once per block of
// reports instead of once per report (two fsyncs each, on every job's start
// and exit).
#include "cq/node/outbox.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;
using cq::node::outbox;
using cq::test::read_text;
using cq::test::temp_dir;

namespace {

cq::bus::report_req report(const std::string& allocation) {
  cq::bus::report_req r;
  r.kind = "started";
  r.allocation = allocation;
  r.job = "job-" + allocation;
  return r;
}

} // namespace

TEST_CASE("the outbox writes its seq counter once per block and never reuses a seq") {
  temp_dir dir("cq-outbox-test");
  auto box_dir = dir.path / "outbox";
  std::uint64_t last = 0;
  std::string reserved;
  {
    auto box = outbox::open(box_dir);
    REQUIRE(box);
    for (int i = 0; i < 20; ++i) {
      auto r = report("a" + std::to_string(i));
      REQUIRE(box->add(r, 0));
      CHECK(r.seq > last);
      last = r.seq;
      if (i == 0)
        reserved = read_text(box_dir / "next_seq");
      // The counter on disk stays where the first report put it.
      CHECK(read_text(box_dir / "next_seq") == reserved);
    }
    CHECK(std::stoull(reserved) > last);
    // Acknowledged reports leave; their seqs must still not come back.
    for (std::uint64_t s = 1; s <= last; ++s)
      box->remove(s);
  }
  // A restart (or a crash anywhere in the block) starts past the block.
  auto box = outbox::open(box_dir);
  REQUIRE(box);
  auto r = report("after-restart");
  REQUIRE(box->add(r, 0));
  CHECK(r.seq > last);
  CHECK(r.seq >= std::stoull(reserved));
  CHECK(std::stoull(read_text(box_dir / "next_seq")) > r.seq);
}

TEST_CASE("a report added without persisting has no file, keeps its seq, and leaves on its "
          "acknowledgement") {
  temp_dir dir("cq-outbox-test");
  auto box_dir = dir.path / "outbox";
  std::uint64_t kept_seq = 0;
  {
    auto box = outbox::open(box_dir);
    REQUIRE(box);
    auto kept = report("kept");
    REQUIRE(box->add(kept, 0));
    kept_seq = kept.seq;
    auto exit = report("exited-here");
    exit.kind = "exited";
    REQUIRE(box->add(exit, 0, false)); // exit.json is its durable record
    CHECK(exit.seq > kept.seq);
    CHECK(fs::exists(box_dir / (std::to_string(kept.seq) + ".json")));
    CHECK_FALSE(fs::exists(box_dir / (std::to_string(exit.seq) + ".json")));
    CHECK(box->find("exited-here", "exited") != nullptr); // still sent until acknowledged
    CHECK(box->size() == 2);
    CHECK(box->remove(exit.seq));
    CHECK(box->size() == 1);
    CHECK(std::stoull(read_text(box_dir / "next_seq")) > exit.seq); // its seq stays reserved
  }
  // After a restart only the persisted report is pending.
  auto box = outbox::open(box_dir);
  REQUIRE(box);
  CHECK(box->size() == 1);
  CHECK(box->get(kept_seq) != nullptr);
  CHECK(box->find("exited-here", "exited") == nullptr);
}
