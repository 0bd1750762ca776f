// Node policy (node/policy/): the exit reason and RAM admission.
#include "node/policy/admission.hpp"
#include "node/policy/exit_reason.hpp"

#include <catch2/catch.hpp>

#include "state_names.hpp"

using namespace cq;
using namespace cq::node;

TEST_CASE("a run that ends by itself has no reason, one nobody saw end is lost") {
  CHECK(exit_reason({false, 0, false, false, false, bus::reason::none, false}) ==
        bus::reason::none);
  CHECK(exit_reason({false, 1, false, false, false, bus::reason::none, false}) ==
        bus::reason::none);
  CHECK(exit_reason({false, std::nullopt, false, false, false, bus::reason::none, true}) == "lost");
}

TEST_CASE("exit 6 is a checkpoint only after a yield order") {
  CHECK(exit_reason({false, 6, true, false, false, bus::reason::none, false}) == "checkpointed");
  CHECK(exit_reason({false, 6, false, false, false, bus::reason::none, false}) ==
        bus::reason::none);
}

TEST_CASE("a cap hit is oom whatever else happened") {
  CHECK(exit_reason({true, 6, true, true, true, bus::reason::fault, false}) == "oom");
}

TEST_CASE("the first stop decides, and a GPU supervisor's stop overrides a cancel") {
  CHECK(exit_reason({false, std::nullopt, false, true, false, bus::reason::none, false}) ==
        "timeout");
  CHECK(exit_reason({false, std::nullopt, false, false, true, bus::reason::none, false}) ==
        "cancelled");
  CHECK(exit_reason({false, std::nullopt, false, false, true, bus::reason::fault, false}) ==
        "fault");
  CHECK(exit_reason({false, 0, false, false, false, bus::reason::vram_cap, false}) == "vram_cap");
  CHECK(exit_reason({false, std::nullopt, false, true, false, bus::reason::fault, false}) ==
        "timeout");
}

TEST_CASE("RAM admission names the figure that refuses a launch") {
  constexpr std::uint64_t G = 1ull << 30;
  CHECK_FALSE(ram_admission(10 * G, 4 * G, 2 * G, 8 * G));
  auto low = ram_admission(7 * G, 4 * G, 0, 8 * G);
  REQUIRE(low);
  CHECK(low->find("ram_start_min_bytes") != std::string::npos);
  auto floor = ram_admission(10 * G, 9 * G, 2 * G, 0);
  REQUIRE(floor);
  CHECK(floor->find("ram_floor_bytes") != std::string::npos);
  auto overflow = ram_admission(10 * G, UINT64_MAX, 2, 0);
  REQUIRE(overflow);
  CHECK(overflow->find("overflows") != std::string::npos);
}

TEST_CASE("every kill kind has its line; an exit has none") {
  using cq::bus::reason;
  cq::node::kill_facts f;
  f.ram_cap = 128ull << 20;
  f.peak = 139ull << 20;
  f.reason = reason::oom;
  auto kernel = cq::node::kill_line(f);
  REQUIRE(kernel);
  CHECK(*kernel ==
        "cq-node: killed: out of memory: it reached its RAM cap of 128 MiB (the kernel's memory "
        "cgroup); peak 139 MiB; give it more with --ram\n");
  f.watchdog = true;
  CHECK(cq::node::kill_line(f)->find("its processes used 139 MiB, over its RAM cap of 128 MiB") !=
        std::string::npos);
  f.reason = reason::timeout;
  f.timeout_ms = 2000;
  f.wall_ms = 2150;
  f.term_kill_after_ms = 10000;
  CHECK(*cq::node::kill_line(f) == "cq-node: stopped: its --timeout of 2s ran out after 2.1s "
                                   "(SIGTERM, then SIGKILL 10s later if it was still running)\n");
  f.reason = reason::cancelled;
  CHECK(cq::node::kill_line(f)->find("cancelled (cq cancel)") != std::string::npos);
  f.yield_ordered = true;
  CHECK(cq::node::kill_line(f)->find("preempted") != std::string::npos);
  f.reason = reason::fault;
  f.gpu_detail = "Xid 79 latched a fault on gpu0";
  CHECK(*cq::node::kill_line(f) == "cq-node: stopped: Xid 79 latched a fault on gpu0\n");
  f.gpu_detail.clear();
  f.reason = reason::vram_cap;
  CHECK(cq::node::kill_line(f)->find("--vram") != std::string::npos);
  for (auto r : {reason::none, reason::checkpointed, reason::lost, reason::exit_code})
    CHECK_FALSE(cq::node::kill_line({r}));
}
