#include "policy/placement.hpp"

#include <catch2/catch.hpp>

using namespace cq::policy;

namespace {
constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::int64_t now = 1'000'000;

cluster_view two_nodes() {
  cluster_view c;
  c.nodes.push_back({"a", true, now - 100, 4 * GiB, 0});
  c.nodes.push_back({"b", true, now - 100, 8 * GiB, 0});
  return c;
}
} // namespace

TEST_CASE("jobs go to the first live node with room, in serving order") {
  auto p = place(two_nodes(), {{"j1", 3 * GiB, {}}, {"j2", 3 * GiB, {}}}, now);
  REQUIRE(p.starts.size() == 2);
  CHECK(p.starts[0].node == "a");
  CHECK(p.starts[1].node == "b"); // a has 1 GiB left after j1
}

TEST_CASE("a node with a stale heartbeat or not yet approved gets nothing") {
  auto c = two_nodes();
  c.nodes[0].last_heartbeat_ms = now - 60'000;
  c.nodes[1].approved = false;
  CHECK(place(c, {{"j1", 1, {}}}, now).starts.empty());
}

TEST_CASE("reservations of live allocations count against a node's RAM") {
  auto c = two_nodes();
  c.nodes[0].reserved_bytes = 4 * GiB;
  c.nodes[1].reserved_bytes = 7 * GiB;
  CHECK(place(c, {{"j1", 2 * GiB, {}}}, now).starts.empty());
}

TEST_CASE("a pinned job waiting for a busy node does not block the job behind it") {
  auto c = two_nodes();
  c.nodes[0].reserved_bytes = 4 * GiB;
  auto p = place(c, {{"pinned", 1 * GiB, std::string("a")}, {"free", 1 * GiB, {}}}, now);
  REQUIRE(p.starts.size() == 1);
  CHECK(p.starts[0].job == "free");
  CHECK(p.starts[0].node == "b");
}

TEST_CASE("a job too big for every node is skipped and smaller ones behind it still start") {
  auto p = place(two_nodes(), {{"huge", 64 * GiB, {}}, {"small", GiB, {}}}, now);
  REQUIRE(p.starts.size() == 1);
  CHECK(p.starts[0].job == "small");
}
