// Unit tests of how a placement pass finds nodes and lanes: by name whatever
// order the cluster lists its nodes in, and a GPU job only on nodes with a
// free lane (coordinator/policy/placement.cpp, prepare() and place()).
#include "policy/placement.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace cq::policy;

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::int64_t now = 100'000'000;
constexpr std::int64_t hour = 3'600'000;

node_view node(std::string name, std::uint64_t ram_gib, int lanes = 0) {
  node_view n;
  n.name = std::move(name);
  n.approved = true;
  n.last_heartbeat_ms = now - 100;
  n.mem_total_bytes = n.mem_available_bytes = ram_gib * GiB;
  for (int i = 0; i < lanes; ++i)
    n.lanes.push_back({"gpu" + std::to_string(i), 80 * GiB, 0, false, {}});
  return n;
}

job_view job(std::string id, std::uint64_t ram_gib, std::uint64_t gpus = 0) {
  job_view j;
  j.id = std::move(id);
  j.ram_bytes = ram_gib * GiB;
  j.gpus = gpus;
  j.vram_bytes = gpus ? 10 * GiB : 0;
  j.est_ms = hour;
  return j;
}

allocation_view alloc(std::string job, std::string node, std::uint64_t ram_gib,
                      std::vector<std::string> lanes = {}) {
  allocation_view a;
  a.job = std::move(job);
  a.node = std::move(node);
  a.ram_bytes = a.ram_used_bytes = ram_gib * GiB;
  a.lanes = std::move(lanes);
  a.est_end_ms = now + hour;
  return a;
}

std::string node_of(const plan& p, const std::string& job) {
  for (auto& s : p.starts)
    if (s.job == job)
      return s.node;
  return "<not started>";
}

} // namespace

TEST_CASE("allocations count against their own node when the nodes are not in name order",
          "[placement]") {
  cluster_view c;
  c.nodes = {node("zeta", 16, 2), node("alpha", 16, 2), node("mid", 16, 2)};
  // zeta and alpha are full in RAM; mid has its lanes taken.
  c.allocations = {alloc("z", "zeta", 16), alloc("a", "alpha", 16),
                   alloc("m", "mid", 1, {"gpu0", "gpu1"})};
  auto p = place(c, {job("cpu", 8), job("gpu", 1, 1)}, now);
  CHECK(node_of(p, "cpu") == "mid");
  CHECK(node_of(p, "gpu") == "<not started>");
}

TEST_CASE("a GPU job goes to the one node with a free lane, and lanes planned in the pass count",
          "[placement]") {
  cluster_view c;
  c.nodes = {node("a", 64, 1), node("b", 64, 1), node("c", 64, 1)};
  c.allocations = {alloc("x", "a", 1, {"gpu0"}), alloc("y", "c", 1, {"gpu0"})};
  auto p = place(c, {job("first", 1, 1), job("second", 1, 1), job("cpu", 1)}, now);
  CHECK(node_of(p, "first") == "b");
  CHECK(node_of(p, "second") == "<not started>");
  CHECK(node_of(p, "cpu") != "<not started>");
}

TEST_CASE("an allocation's node position that names another node is not trusted", "[placement]") {
  cluster_view c;
  c.nodes = {node("a", 16), node("b", 16)};
  c.allocations = {alloc("busy", "a", 14)};
  c.allocations[0].node_at = 1; // b's position: stale, or a builder's mistake
  CHECK(node_of(place(c, {job("j", 8)}, now), "j") == "b");
  c.allocations[0].node_at = 7; // out of range
  CHECK(node_of(place(c, {job("j", 8)}, now), "j") == "b");
  c.allocations[0].node_at = 0; // right
  CHECK(node_of(place(c, {job("j", 8)}, now), "j") == "b");
}

TEST_CASE("a pass keeps nothing of the pass before it", "[placement]") {
  // The first pass sees both lanes of a node held; the next, on the same
  // thread (place() reuses its buffers there) with no allocations, sees
  // them free.
  cluster_view c;
  c.nodes = {node("g", 64, 2)};
  c.allocations = {alloc("held", "g", 8, {"gpu0", "gpu1"})};
  CHECK(node_of(place(c, {job("gpu-job", 8, 1)}, now), "gpu-job") == "<not started>");
  c.allocations.clear();
  auto p = place(c, {job("gpu-job", 8, 2)}, now);
  REQUIRE(p.starts.size() == 1);
  CHECK(p.starts[0].node == "g");
  CHECK(p.starts[0].lanes.size() == 2);
}
