// Unit tests of the placement policy, one or more per rule of
// coordinator/policy/placement.hpp. Sizes are bytes; times are ms.
#include "policy/placement.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

using namespace cq::policy;

namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::int64_t now = 100'000'000;
constexpr std::int64_t minute = 60'000;
constexpr std::int64_t hour = 60 * minute;

node_view make_node(std::string name, std::uint64_t ram_gib, std::uint64_t cpus = 0, int lanes = 0,
                    std::uint64_t lane_vram_gib = 80) {
  node_view n;
  n.name = std::move(name);
  n.approved = true;
  n.enabled = true;
  n.last_heartbeat_ms = now - 100;
  n.mem_total_bytes = ram_gib * GiB;
  n.mem_available_bytes = ram_gib * GiB;
  n.cpus = cpus;
  for (int i = 0; i < lanes; ++i)
    n.lanes.push_back({"gpu" + std::to_string(i), lane_vram_gib * GiB, 0, false});
  return n;
}

job_view make_job(std::string id, std::uint64_t ram_gib, std::uint64_t gpus = 0,
                  std::uint64_t vram_gib = 0, std::uint64_t cpus = 0, std::int64_t est_ms = hour) {
  job_view j;
  j.id = std::move(id);
  j.ram_bytes = ram_gib * GiB;
  j.gpus = gpus;
  j.vram_bytes = vram_gib * GiB;
  j.cpus = cpus;
  j.est_ms = est_ms;
  return j;
}

allocation_view make_alloc(std::string job, std::string node, std::uint64_t ram_gib,
                           std::int64_t est_end_ms, std::vector<std::string> lanes = {}) {
  allocation_view a;
  a.job = std::move(job);
  a.node = std::move(node);
  a.ram_bytes = ram_gib * GiB;
  a.ram_used_bytes = ram_gib * GiB; // no pending growth unless a test says so
  a.lanes = std::move(lanes);
  a.est_end_ms = est_end_ms;
  return a;
}

job_view with_level(job_view j, level l) {
  j.priority = l;
  return j;
}

job_view pinned(job_view j, std::string node) {
  j.pinned_node = std::move(node);
  return j;
}

const start* find_start(const plan& p, const std::string& job) {
  for (const auto& s : p.starts)
    if (s.job == job)
      return &s;
  return nullptr;
}

bool started(const plan& p, const std::string& job) {
  return find_start(p, job) != nullptr;
}

std::string node_of(const plan& p, const std::string& job) {
  const auto* s = find_start(p, job);
  return s ? s->node : std::string("<not started>");
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Some line names `node` and contains `word` (case-insensitive).
bool explains(const std::vector<std::string>& lines, const std::string& node,
              const std::string& word) {
  for (const auto& l : lines) {
    auto ll = lower(l);
    if (ll.find(lower(node)) != std::string::npos && ll.find(lower(word)) != std::string::npos)
      return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines)
    out += l + "\n";
  return out;
}

cluster_view one_node(node_view n) {
  cluster_view c;
  c.nodes.push_back(std::move(n));
  return c;
}

} // namespace

// ---------------------------------------------------------------- rule 1

TEST_CASE("an earlier job in the queue gets the last free slot before a later one", "[placement]") {
  auto c = one_node(make_node("n", 10));
  auto p = place(c, {make_job("first", 6), make_job("second", 6)}, now);
  CHECK(started(p, "first"));
  CHECK_FALSE(started(p, "second"));
}

TEST_CASE("a high job ahead of a low job in serving order gets the last free slot", "[placement]") {
  auto c = one_node(make_node("n", 10));
  auto p = place(
      c, {with_level(make_job("hi", 6), level::high), with_level(make_job("lo", 6), level::low)},
      now);
  CHECK(started(p, "hi"));
  CHECK_FALSE(started(p, "lo"));
}

TEST_CASE("within one level the pass keeps queue order even when a later job would pack better",
          "[placement]") {
  // "second" alone would fill the node exactly; "first" still goes first.
  auto c = one_node(make_node("n", 10));
  auto p = place(c, {make_job("first", 4), make_job("second", 10), make_job("third", 6)}, now);
  CHECK(started(p, "first"));
  CHECK_FALSE(started(p, "second"));
  CHECK(started(p, "third"));
}

TEST_CASE("a job too big for every node does not stop smaller jobs behind it", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 16));
  c.nodes.push_back(make_node("b", 32));
  auto p = place(c, {make_job("huge", 500), make_job("small", 4), make_job("small2", 4)}, now);
  CHECK_FALSE(started(p, "huge"));
  CHECK(started(p, "small"));
  CHECK(started(p, "small2"));
  CHECK_FALSE(p.reserved.has_value()); // it could never run anywhere
}

TEST_CASE("an empty queue gives an empty plan", "[placement]") {
  auto c = one_node(make_node("n", 10));
  auto p = place(c, std::vector<job_view>{}, now);
  CHECK(p.starts.empty());
  CHECK_FALSE(p.reserved.has_value());
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("every job that fits starts in one pass", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 64));
  c.nodes.push_back(make_node("b", 64));
  std::vector<job_view> q;
  for (int i = 0; i < 8; ++i)
    q.push_back(make_job("j" + std::to_string(i), 16));
  auto p = place(c, q, now);
  CHECK(p.starts.size() == 8);
  std::set<std::string> ids;
  for (const auto& s : p.starts)
    ids.insert(s.job);
  CHECK(ids.size() == 8);
}

// ---------------------------------------------------------------- rule 2

TEST_CASE("a pinned job waiting for a busy node does not block the job behind it", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 16));
  c.nodes.push_back(make_node("b", 16));
  c.allocations.push_back(make_alloc("busy", "a", 14, now + hour));
  auto p = place(c, {pinned(make_job("pin", 8), "a"), make_job("free", 8)}, now);
  CHECK_FALSE(started(p, "pin"));
  CHECK(node_of(p, "free") == "b");
  // Only unpinned jobs get the reservation.
  if (p.reserved)
    CHECK(p.reserved->job != "pin");
}

TEST_CASE("a pinned job starts only on its node even when another node fits better",
          "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("small", 8));
  c.nodes.push_back(make_node("big", 256));
  auto p = place(c, {pinned(make_job("pin", 8), "big")}, now);
  CHECK(node_of(p, "pin") == "big");
}

TEST_CASE("a job pinned to an unknown node never starts", "[placement]") {
  auto c = one_node(make_node("a", 64));
  auto p = place(c, {pinned(make_job("pin", 1), "ghost"), make_job("other", 1)}, now);
  CHECK_FALSE(started(p, "pin"));
  CHECK(started(p, "other"));
}

TEST_CASE("pinned jobs that cannot start leave the reservation to the first unpinned one",
          "[placement]") {
  // Behind a blocked pinned job, a pinned job too big for any node (its
  // node, known or not, is not looked up) neither starts nor reserves.
  cluster_view c;
  c.nodes.push_back(make_node("a", 16));
  c.nodes.push_back(make_node("b", 16));
  c.allocations.push_back(make_alloc("busy-a", "a", 14, now + hour));
  c.allocations.push_back(make_alloc("busy-b", "b", 14, now + 2 * hour));
  auto p = place(c,
                 {pinned(make_job("pin", 8), "a"), pinned(make_job("huge-ghost", 64), "ghost"),
                  pinned(make_job("huge-a", 64), "a"), make_job("next", 8)},
                 now);
  CHECK(p.starts.empty());
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "next");
  CHECK(p.reserved->node == "a");
  CHECK(p.reserved->at_ms == now + hour);
}

TEST_CASE("a node that is not approved, disabled, held, or stale gets nothing", "[placement]") {
  auto n = make_node("n", 64, 8, 2);
  SECTION("not approved") {
    n.approved = false;
  }
  SECTION("disabled") {
    n.enabled = false;
  }
  SECTION("held") {
    n.held = true;
  }
  SECTION("stale heartbeat") {
    n.last_heartbeat_ms = now - 60'000;
  }
  SECTION("never heard from") {
    n.last_heartbeat_ms = 0;
  }
  auto c = one_node(n);
  auto p = place(c, {make_job("cpu", 1), make_job("gpu", 1, 1, 1)}, now);
  CHECK(p.starts.empty());
}

TEST_CASE("a pinned job does not start on its node when that node is not eligible", "[placement]") {
  auto n = make_node("n", 64);
  n.enabled = false;
  cluster_view c;
  c.nodes.push_back(n);
  c.nodes.push_back(make_node("m", 64));
  auto p = place(c, {pinned(make_job("pin", 1), "n"), make_job("free", 1)}, now);
  CHECK_FALSE(started(p, "pin"));
  CHECK(node_of(p, "free") == "m");
}

TEST_CASE("a heartbeat counts as fresh within heartbeat_fresh_ms", "[placement]") {
  auto n = make_node("n", 64);
  auto c = one_node(n);
  c.heartbeat_fresh_ms = 5000;
  c.nodes[0].last_heartbeat_ms = now - 4000;
  CHECK(started(place(c, {make_job("j", 1)}, now), "j"));
  c.nodes[0].last_heartbeat_ms = now - 6000;
  CHECK_FALSE(started(place(c, {make_job("j", 1)}, now), "j"));
  c.heartbeat_fresh_ms = 10'000;
  CHECK(started(place(c, {make_job("j", 1)}, now), "j"));
}

TEST_CASE("a GPU fault latch blocks GPU jobs but not CPU jobs", "[placement]") {
  auto n = make_node("n", 64, 0, 2);
  n.gpu_fault = true;
  auto c = one_node(n);
  auto p = place(c, {make_job("gpu", 4, 1, 8), make_job("cpu", 4)}, now);
  CHECK_FALSE(started(p, "gpu"));
  CHECK(node_of(p, "cpu") == "n");
}

TEST_CASE("a GPU job skips a faulted node and starts on a healthy one", "[placement]") {
  auto bad = make_node("bad", 64, 0, 1);
  bad.gpu_fault = true;
  cluster_view c;
  c.nodes.push_back(bad);
  c.nodes.push_back(make_node("good", 64, 0, 4));
  auto p = place(c, {make_job("gpu", 4, 1, 8)}, now);
  CHECK(node_of(p, "gpu") == "good");
}

// ---------------------------------------------------------------- rule 3

TEST_CASE("the node's RAM reserve reduces allocatable RAM", "[placement]") {
  auto n = make_node("n", 64);
  n.ram_reserve_bytes = 8 * GiB;
  auto c = one_node(n);
  CHECK_FALSE(started(place(c, {make_job("j", 60)}, now), "j"));
  CHECK(started(place(c, {make_job("j", 56)}, now), "j"));
}

TEST_CASE("caps of live allocations count against allocatable RAM, stopping ones included",
          "[placement]") {
  auto c = one_node(make_node("n", 64));
  c.allocations.push_back(make_alloc("live", "n", 30, now + hour));
  auto a = make_alloc("stopping", "n", 10, now + hour);
  a.stopping = true;
  c.allocations.push_back(a);
  CHECK_FALSE(started(place(c, {make_job("j", 25)}, now), "j"));
  CHECK(started(place(c, {make_job("j", 24)}, now), "j"));
}

TEST_CASE("a live allocation's cap counts even when its current use is lower", "[placement]") {
  auto c = one_node(make_node("n", 64));
  auto a = make_alloc("live", "n", 40, now + hour);
  a.ram_used_bytes = 1 * GiB;
  c.allocations.push_back(a);
  CHECK_FALSE(started(place(c, {make_job("j", 30)}, now), "j"));
}

TEST_CASE("starts planned earlier in the pass count against allocatable RAM", "[placement]") {
  auto c = one_node(make_node("n", 64));
  auto p = place(c, {make_job("a", 40), make_job("b", 30), make_job("c", 24)}, now);
  CHECK(started(p, "a"));
  CHECK_FALSE(started(p, "b"));
  CHECK(started(p, "c"));
}

TEST_CASE("CPUs of live allocations and planned starts are accounted", "[placement]") {
  auto c = one_node(make_node("n", 256, 8));
  auto a = make_alloc("live", "n", 1, now + hour);
  a.cpus = 4;
  c.allocations.push_back(a);
  auto p = place(
      c, {make_job("a", 1, 0, 0, 3), make_job("b", 1, 0, 0, 2), make_job("c", 1, 0, 0, 1)}, now);
  CHECK(started(p, "a"));
  CHECK_FALSE(started(p, "b")); // 4 + 3 + 2 > 8
  CHECK(started(p, "c"));       // 4 + 3 + 1 = 8
}

TEST_CASE("a job asking for more CPUs than the node has does not start", "[placement]") {
  auto c = one_node(make_node("n", 256, 8));
  CHECK_FALSE(started(place(c, {make_job("j", 1, 0, 0, 9)}, now), "j"));
  CHECK(started(place(c, {make_job("j", 1, 0, 0, 8)}, now), "j"));
}

TEST_CASE("a node with zero CPUs does not account CPUs", "[placement]") {
  auto c = one_node(make_node("n", 256, 0));
  auto p = place(c, {make_job("a", 1, 0, 0, 100), make_job("b", 1, 0, 0, 100)}, now);
  CHECK(started(p, "a"));
  CHECK(started(p, "b"));
}

TEST_CASE("two GPU jobs on a two-lane node get different lanes and a third waits", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 2));
  auto p = place(c, {make_job("a", 1, 1, 8), make_job("b", 1, 1, 8), make_job("c", 1, 1, 8)}, now);
  const auto* a = find_start(p, "a");
  const auto* b = find_start(p, "b");
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->lanes.size() == 1);
  REQUIRE(b->lanes.size() == 1);
  CHECK(a->lanes[0] != b->lanes[0]);
  std::set<std::string> names{"gpu0", "gpu1"};
  CHECK(names.count(a->lanes[0]) == 1);
  CHECK(names.count(b->lanes[0]) == 1);
  CHECK_FALSE(started(p, "c"));
}

TEST_CASE("a job asking for two lanes gets two distinct lanes", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 4));
  auto p = place(c, {make_job("a", 1, 2, 8)}, now);
  const auto* a = find_start(p, "a");
  REQUIRE(a);
  REQUIRE(a->lanes.size() == 2);
  CHECK(a->lanes[0] != a->lanes[1]);
}

TEST_CASE("a CPU job gets no lanes", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 2));
  auto p = place(c, {make_job("a", 1)}, now);
  REQUIRE(started(p, "a"));
  CHECK(find_start(p, "a")->lanes.empty());
}

TEST_CASE("a held lane is never used", "[placement]") {
  auto n = make_node("n", 256, 0, 2);
  n.lanes[0].held = true;
  auto c = one_node(n);
  auto p = place(c, {make_job("a", 1, 1, 8), make_job("b", 1, 1, 8)}, now);
  REQUIRE(started(p, "a"));
  CHECK(find_start(p, "a")->lanes == std::vector<std::string>{"gpu1"});
  CHECK_FALSE(started(p, "b"));
  CHECK_FALSE(started(place(c, {make_job("two", 1, 2, 8)}, now), "two"));
}

TEST_CASE("a lane used by a live allocation is not given again", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 2));
  c.allocations.push_back(make_alloc("live", "n", 1, now + hour, {"gpu0"}));
  auto p = place(c, {make_job("a", 1, 1, 8), make_job("b", 1, 1, 8)}, now);
  REQUIRE(started(p, "a"));
  CHECK(find_start(p, "a")->lanes == std::vector<std::string>{"gpu1"});
  CHECK_FALSE(started(p, "b"));
}

TEST_CASE("VRAM used outside cq makes a lane unusable for a big job but not for a small one",
          "[placement]") {
  auto n = make_node("n", 256, 0, 2, 80);
  n.lanes[0].vram_outside_bytes = 60 * GiB; // 20 GiB left on gpu0
  auto c = one_node(n);
  SECTION("a big job takes the clean lane") {
    auto p = place(c, {make_job("big", 1, 1, 40)}, now);
    REQUIRE(started(p, "big"));
    CHECK(find_start(p, "big")->lanes == std::vector<std::string>{"gpu1"});
  }
  SECTION("a big job needing two lanes does not start") {
    CHECK_FALSE(started(place(c, {make_job("big2", 1, 2, 40)}, now), "big2"));
  }
  SECTION("two big jobs: only one starts") {
    auto p = place(c, {make_job("b1", 1, 1, 40), make_job("b2", 1, 1, 40)}, now);
    CHECK(started(p, "b1"));
    CHECK_FALSE(started(p, "b2"));
  }
  SECTION("a small job fits the busy lane") {
    auto p = place(c, {make_job("small", 1, 2, 16)}, now);
    CHECK(started(p, "small"));
  }
}

TEST_CASE("a job whose VRAM exceeds the node's VRAM cap is refused", "[placement]") {
  auto n = make_node("n", 256, 0, 2, 80);
  n.vram_cap_bytes = 40 * GiB;
  auto c = one_node(n);
  CHECK_FALSE(started(place(c, {make_job("big", 1, 1, 48)}, now), "big"));
  CHECK(started(place(c, {make_job("ok", 1, 1, 32)}, now), "ok"));
}

TEST_CASE("a job asking for more lanes than the node has does not start", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 2));
  CHECK_FALSE(started(place(c, {make_job("three", 1, 3, 8)}, now), "three"));
}

// ---------------------------------------------------------------- rule 4

TEST_CASE("with no floor and no start minimum, MemAvailable is not checked", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 1 * GiB;
  auto c = one_node(n);
  CHECK(started(place(c, {make_job("j", 8)}, now), "j"));
}

TEST_CASE("the node's floor applies to a job that has none", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 20 * GiB;
  n.ram_floor_bytes = 10 * GiB;
  auto c = one_node(n);
  CHECK_FALSE(started(place(c, {make_job("j", 12)}, now), "j")); // 20 - 12 = 8 < 10
  CHECK(started(place(c, {make_job("j", 10)}, now), "j"));       // 20 - 10 = 10 >= 10
}

TEST_CASE("the job's own floor is required after its cap", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 20 * GiB;
  auto c = one_node(n);
  auto j = make_job("j", 12);
  j.ram_floor_bytes = 9 * GiB;
  CHECK_FALSE(started(place(c, {j}, now), "j")); // 8 < 9
  j.ram_floor_bytes = 8 * GiB;
  CHECK(started(place(c, {j}, now), "j"));
}

TEST_CASE("the combined floor includes the floor of a stopping allocation", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 30 * GiB;
  auto c = one_node(n);
  auto a = make_alloc("leaving", "n", 4, now + hour);
  a.stopping = true;
  a.ram_floor_bytes = 12 * GiB;
  c.allocations.push_back(a);
  // The job has no floor and no start minimum, but the stopping allocation's
  // floor makes the combined floor nonzero: 30 - 20 = 10 < 12.
  CHECK_FALSE(started(place(c, {make_job("j", 20)}, now), "j"));
  CHECK(started(place(c, {make_job("j", 18)}, now), "j")); // 30 - 18 = 12
}

TEST_CASE("the combined floor includes the floor of a running allocation", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 30 * GiB;
  auto c = one_node(n);
  auto a = make_alloc("running", "n", 4, now + hour);
  a.ram_floor_bytes = 12 * GiB;
  c.allocations.push_back(a);
  auto j = make_job("j", 20);
  j.ram_floor_bytes = 2 * GiB; // the larger floor wins
  CHECK_FALSE(started(place(c, {j}, now), "j"));
}

TEST_CASE("a start carries the combined floor", "[placement]") {
  auto n = make_node("n", 64);
  n.mem_available_bytes = 60 * GiB;
  n.ram_floor_bytes = 2 * GiB;
  auto c = one_node(n);
  auto a = make_alloc("leaving", "n", 4, now + hour);
  a.stopping = true;
  a.ram_floor_bytes = 6 * GiB;
  c.allocations.push_back(a);
  auto j = make_job("j", 8);
  j.ram_floor_bytes = 3 * GiB;
  auto p = place(c, {j}, now);
  REQUIRE(started(p, "j"));
  CHECK(find_start(p, "j")->ram_floor_bytes == 6 * GiB);

  SECTION("the job's floor when it is the largest") {
    j.ram_floor_bytes = 9 * GiB;
    auto p2 = place(c, {j}, now);
    REQUIRE(started(p2, "j"));
    CHECK(find_start(p2, "j")->ram_floor_bytes == 9 * GiB);
  }
}

TEST_CASE("a start without any floor carries a zero floor", "[placement]") {
  auto c = one_node(make_node("n", 64));
  auto p = place(c, {make_job("j", 8)}, now);
  REQUIRE(started(p, "j"));
  CHECK(find_start(p, "j")->ram_floor_bytes == 0);
}

TEST_CASE("jobs planned earlier in the pass reserve their cap against MemAvailable",
          "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 30 * GiB;
  auto c = one_node(n);
  auto second = make_job("second", 8);
  second.ram_floor_bytes = 4 * GiB;
  // Alone: 30 - 8 = 22 >= 4.
  CHECK(started(place(c, {second}, now), "second"));
  // After "first" (no floor, cap 20) is planned on the node: 30 - 20 - 8 = 2 < 4.
  auto p = place(c, {make_job("first", 20), second}, now);
  CHECK(started(p, "first"));
  CHECK_FALSE(started(p, "second"));
}

TEST_CASE("pending growth of live allocations is taken from MemAvailable", "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 30 * GiB;
  auto c = one_node(n);
  auto a = make_alloc("growing", "n", 20, now + hour);
  a.ram_used_bytes = 5 * GiB; // may still grow by 15
  c.allocations.push_back(a);
  auto j = make_job("j", 8);
  j.ram_floor_bytes = 4 * GiB;
  CHECK(started(place(c, {j}, now), "j")); // 30 - 15 - 8 = 7 >= 4
  j.ram_bytes = 12 * GiB;
  CHECK_FALSE(started(place(c, {j}, now), "j")); // 30 - 15 - 12 = 3 < 4
  c.allocations[0].ram_used_bytes = 20 * GiB;    // no growth left
  CHECK(started(place(c, {j}, now), "j"));       // 30 - 12 = 18 >= 4
}

TEST_CASE("the start minimum is tested against available RAM without subtracting the floor again",
          "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 20 * GiB;
  auto c = one_node(n);
  auto j = make_job("j", 8);
  j.ram_floor_bytes = 4 * GiB;
  j.ram_start_min_bytes = 19 * GiB;
  // 20 - 8 = 12 >= 4 and 20 >= 19: starts (a wrong 20 - 4 >= 19 would refuse).
  CHECK(started(place(c, {j}, now), "j"));
  j.ram_start_min_bytes = 21 * GiB;
  CHECK_FALSE(started(place(c, {j}, now), "j"));
}

TEST_CASE("the start minimum alone turns on the MemAvailable check", "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 20 * GiB;
  auto c = one_node(n);
  auto j = make_job("j", 8);
  j.ram_start_min_bytes = 19 * GiB;
  CHECK(started(place(c, {j}, now), "j")); // not 20 - 8 >= 19
  j.ram_bytes = 24 * GiB;                  // floor 0: available - cap = -4 < 0
  CHECK_FALSE(started(place(c, {j}, now), "j"));
}

TEST_CASE("the start minimum counts pending growth and earlier planned caps", "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 20 * GiB;
  auto c = one_node(n);
  auto j = make_job("j", 1);
  j.ram_start_min_bytes = 19 * GiB;
  SECTION("pending growth") {
    auto a = make_alloc("growing", "n", 4, now + hour);
    a.ram_used_bytes = 2 * GiB; // 20 - 2 = 18 < 19
    c.allocations.push_back(a);
    CHECK_FALSE(started(place(c, {j}, now), "j"));
  }
  SECTION("a cap planned earlier") {
    auto p = place(c, {make_job("first", 2), j}, now); // 20 - 2 = 18 < 19
    CHECK(started(p, "first"));
    CHECK_FALSE(started(p, "j"));
  }
}

TEST_CASE("a job refused by one node's floor starts on another node", "[placement]") {
  auto tight = make_node("tight", 64);
  tight.mem_available_bytes = 10 * GiB;
  tight.ram_floor_bytes = 8 * GiB;
  cluster_view c;
  c.nodes.push_back(tight);
  c.nodes.push_back(make_node("roomy", 128));
  auto p = place(c, {make_job("j", 8)}, now);
  CHECK(node_of(p, "j") == "roomy");
}

// ---------------------------------------------------------------- rule 5

namespace {
/// One 64 GiB node, 48 GiB held until now + 1 h: 16 GiB free now.
cluster_view backfill_cluster() {
  auto c = one_node(make_node("n", 64));
  c.allocations.push_back(make_alloc("running", "n", 48, now + hour));
  return c;
}
} // namespace

TEST_CASE("the first job that cannot start gets a reservation at the earliest time it fits",
          "[placement]") {
  auto p = place(backfill_cluster(), {make_job("big", 60)}, now);
  CHECK_FALSE(started(p, "big"));
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big");
  CHECK(p.reserved->node == "n");
  CHECK(p.reserved->at_ms == now + hour);
}

TEST_CASE("backfill starts a short job that ends before the reservation", "[placement]") {
  auto p = place(backfill_cluster(),
                 {make_job("big", 60), make_job("short", 8, 0, 0, 0, 30 * minute)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big");
  CHECK(node_of(p, "short") == "n");
}

TEST_CASE("backfill refuses a long job that would delay the reservation", "[placement]") {
  // At now + 1 h the node has 64 GiB free; with the long job still running
  // only 56, less than the 60 the reserved job needs.
  auto p =
      place(backfill_cluster(), {make_job("big", 60), make_job("long", 8, 0, 0, 0, 2 * hour)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big");
  CHECK(p.reserved->at_ms == now + hour);
  CHECK_FALSE(started(p, "long"));
}

TEST_CASE("backfill allows a long job that uses only resources the reserved job will not need",
          "[placement]") {
  // The reserved job needs 40 GiB; at now + 1 h there are 64 - 8 = 56 free.
  auto p =
      place(backfill_cluster(), {make_job("big", 40), make_job("long", 8, 0, 0, 0, 2 * hour)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big");
  CHECK(node_of(p, "long") == "n");
}

TEST_CASE("backfill on the reserved node counts every earlier backfilled job", "[placement]") {
  // 16 GiB free now. The reserved job needs 50 at now + 1 h: with l1 and l2
  // still running 64 - 12 = 52 are free; l3 would leave 48 (it fits now).
  auto p = place(backfill_cluster(),
                 {make_job("big", 50), make_job("l1", 8, 0, 0, 0, 2 * hour),
                  make_job("l2", 4, 0, 0, 0, 3 * hour), make_job("l3", 4, 0, 0, 0, 3 * hour)},
                 now);
  REQUIRE(p.reserved.has_value());
  CHECK(started(p, "l1"));
  CHECK(started(p, "l2"));
  CHECK_FALSE(started(p, "l3"));
}

TEST_CASE("backfill does not restrict jobs on other nodes", "[placement]") {
  auto c = backfill_cluster();
  c.nodes.push_back(make_node("m", 32));
  auto p = place(c, {make_job("big", 60), make_job("long", 8, 0, 0, 0, 2 * hour)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->node == "n");
  CHECK(node_of(p, "long") == "m");
}

TEST_CASE("a pinned job behind the reservation respects it too", "[placement]") {
  auto p = place(backfill_cluster(),
                 {make_job("big", 60), pinned(make_job("long", 8, 0, 0, 0, 2 * hour), "n")}, now);
  REQUIRE(p.reserved.has_value());
  CHECK_FALSE(started(p, "long"));
}

TEST_CASE("jobs ahead of the reserved job are not restricted by it", "[placement]") {
  auto p =
      place(backfill_cluster(), {make_job("long", 8, 0, 0, 0, 2 * hour), make_job("big", 60)}, now);
  CHECK(started(p, "long"));
  if (p.reserved) {
    CHECK(p.reserved->job == "big");
    CHECK(p.reserved->at_ms >= now + 2 * hour); // it must wait for "long" too
  }
}

TEST_CASE("the reservation goes to the node that frees up first", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("late", 64));
  c.nodes.push_back(make_node("early", 64));
  c.allocations.push_back(make_alloc("a", "late", 48, now + 2 * hour));
  c.allocations.push_back(make_alloc("b", "early", 48, now + hour));
  auto p = place(c, {make_job("big", 60)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->node == "early");
  CHECK(p.reserved->at_ms == now + hour);
}

TEST_CASE("the reservation waits only for the allocations that must end", "[placement]") {
  auto c = one_node(make_node("n", 64));
  c.allocations.push_back(make_alloc("a", "n", 20, now + hour));
  c.allocations.push_back(make_alloc("b", "n", 20, now + 3 * hour));
  auto p = place(c, {make_job("big", 40)}, now); // 24 free now, 44 after a ends
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->at_ms == now + hour);
}

TEST_CASE("a reservation is a guess only when an allocation it waits for has no estimate",
          "[placement]") {
  auto c = one_node(make_node("n", 64));
  c.allocations.push_back(make_alloc("a", "n", 20, now + hour));
  c.allocations.push_back(make_alloc("b", "n", 20, now + 3 * hour));
  c.allocations[1].est_default = true; // b ends by the default hour: a guess
  auto p = place(c, {make_job("big", 40)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->at_ms == now + hour);
  CHECK_FALSE(p.reserved->guessed); // it waits for a only
  auto line = explain(c, make_job("big", 40), p.reserved, make_job("big", 40), now);
  REQUIRE_FALSE(line.empty());
  CHECK(line[0] == "next on n, in ~1h by estimates");
  c.allocations[0].est_default = true; // now the one it waits for is the guess
  p = place(c, {make_job("big", 40)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->guessed);
  line = explain(c, make_job("big", 40), p.reserved, make_job("big", 40), now);
  REQUIRE_FALSE(line.empty());
  CHECK(line[0] == "next on n, once a running job ends (no estimate of it yet)");
  // The same for a job started in the same pass as the reservation.
  auto first = make_job("first", 40);
  first.est_default = true;
  p = place(one_node(make_node("n", 64)), {first, make_job("big", 40)}, now);
  REQUIRE(started(p, "first"));
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->guessed);
  first.est_default = false;
  p = place(one_node(make_node("n", 64)), {first, make_job("big", 40)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK_FALSE(p.reserved->guessed);
}

TEST_CASE("a job that could never fit gets no reservation and the next one does", "[placement]") {
  auto p = place(backfill_cluster(), {make_job("huge", 500), make_job("big", 60)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big");
}

TEST_CASE("there is one reservation, for the first job that cannot start", "[placement]") {
  auto p = place(backfill_cluster(), {make_job("big1", 60), make_job("big2", 60)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "big1");
}

TEST_CASE("a pinned job that cannot start gets no reservation", "[placement]") {
  auto p = place(backfill_cluster(), {pinned(make_job("pin", 60), "n")}, now);
  CHECK_FALSE(p.reserved.has_value());
}

TEST_CASE("a GPU job waits for lanes and backfill keeps them", "[placement]") {
  auto c = one_node(make_node("n", 256, 0, 2));
  c.allocations.push_back(make_alloc("a", "n", 8, now + hour, {"gpu0"}));
  // "two" needs both lanes at now + 1 h; "one" for 2 h would hold gpu1.
  auto p =
      place(c,
            {make_job("two", 8, 2, 8), make_job("one", 8, 1, 8, 0, 2 * hour),
             make_job("quick", 8, 1, 8, 0, 10 * minute), make_job("cpu", 8, 0, 0, 0, 5 * hour)},
            now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "two");
  CHECK(p.reserved->at_ms == now + hour);
  CHECK_FALSE(started(p, "one"));
  CHECK(started(p, "quick"));
  CHECK(started(p, "cpu")); // needs no lane, RAM is plentiful
}

// Rule 5 with rule 4: the reservation accounts for floors and start minimums.

TEST_CASE("a job whose RAM floor can never be met holds no reservation and an idle node runs a "
          "small job",
          "[placement]") {
  // 1 GiB cap + 30 GiB floor can never be available on a 4 GiB node.
  auto c = one_node(make_node("box", 4));
  auto a = make_job("a", 1);
  a.ram_floor_bytes = 30 * GiB;
  auto p = place(c, {a, make_job("b", 1, 0, 0, 0, 10 * minute)}, now);
  CHECK_FALSE(started(p, "a"));
  CHECK(started(p, "b"));
  CHECK_FALSE(p.reserved.has_value());
  // Nothing is held back for it: a job wanting the whole node starts too.
  CHECK(started(place(c, {a, make_job("whole", 4)}, now), "whole"));
}

TEST_CASE("a job whose start minimum exceeds the node's memory holds no reservation and an idle "
          "node runs a small job",
          "[placement]") {
  auto c = one_node(make_node("box", 4));
  auto a = make_job("a", 1);
  a.ram_start_min_bytes = 8 * GiB;
  auto p = place(c, {a, make_job("b", 1, 0, 0, 0, 10 * minute)}, now);
  CHECK_FALSE(started(p, "a"));
  CHECK(started(p, "b"));
  CHECK_FALSE(p.reserved.has_value());
  CHECK(started(place(c, {a, make_job("whole", 4)}, now), "whole"));
}

TEST_CASE("a node floor that leaves no room for a job's cap gives it no reservation there",
          "[placement]") {
  // 32 GiB node with a 30 GiB floor: a 4 GiB job never fits there (34 > 32),
  // so it waits for the busy node instead of holding the idle one.
  auto tight = make_node("tight", 32);
  tight.ram_floor_bytes = 30 * GiB;
  cluster_view c;
  c.nodes.push_back(tight);
  c.nodes.push_back(make_node("busy", 64));
  c.allocations.push_back(make_alloc("x", "busy", 63, now + hour));
  auto p = place(c, {make_job("j", 4), make_job("other", 2, 0, 0, 0, 2 * hour)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "j");
  CHECK(p.reserved->node == "busy");
  CHECK(p.reserved->at_ms == now + hour);
  CHECK(node_of(p, "other") == "tight"); // 32 - 2 >= 30
}

TEST_CASE("a job that fits by caps but fails admission now does not block a later job with a "
          "reservation at now",
          "[placement]") {
  SECTION("nothing will end: no reservation at all") {
    // Outside use leaves 10 GiB available; 8 GiB cap + 4 GiB floor needs 12.
    auto n = make_node("n", 64);
    n.mem_available_bytes = 10 * GiB;
    auto c = one_node(n);
    auto a = make_job("a", 8);
    a.ram_floor_bytes = 4 * GiB;
    auto p = place(c, {a, make_job("b", 60, 0, 0, 0, 2 * hour)}, now);
    CHECK_FALSE(started(p, "a"));
    CHECK(started(p, "b")); // a reservation at now would have kept 8 GiB for "a"
    CHECK_FALSE(p.reserved.has_value());
  }
  SECTION("an allocation ends: the reservation is then, not now") {
    // 20 GiB available now; when x (16 GiB) ends, 36 are predicted: 36 - 8 >= 16.
    auto n = make_node("n", 64);
    n.mem_available_bytes = 20 * GiB;
    auto c = one_node(n);
    c.allocations.push_back(make_alloc("x", "n", 16, now + hour));
    auto a = make_job("a", 8);
    a.ram_floor_bytes = 16 * GiB;
    auto p = place(c, {a, make_job("b", 44, 0, 0, 0, 30 * minute)}, now);
    CHECK_FALSE(started(p, "a"));
    REQUIRE(p.reserved.has_value());
    CHECK(p.reserved->job == "a");
    CHECK(p.reserved->at_ms == now + hour);
    CHECK(started(p, "b")); // it ends before the reservation
  }
}

TEST_CASE("a reservation waits until the floor of a running allocation no longer refuses the job",
          "[placement]") {
  // Now: 40 - 16 = 24 < 30 (x's floor). When y ends, 42 - 16 = 26 < 30 still;
  // when x ends its floor goes with it.
  auto n = make_node("n", 64);
  n.mem_available_bytes = 40 * GiB;
  auto c = one_node(n);
  auto x = make_alloc("x", "n", 8, now + hour);
  x.ram_floor_bytes = 30 * GiB;
  c.allocations.push_back(x);
  c.allocations.push_back(make_alloc("y", "n", 2, now + 30 * minute));
  auto p = place(c, {make_job("j", 16)}, now);
  CHECK_FALSE(started(p, "j"));
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->at_ms == now + hour);
}

TEST_CASE("a backfilled job that outlives the reservation leaves the reserved job's predicted "
          "admission intact",
          "[placement]") {
  // 20 GiB available now, x (16 GiB) ends in 1 h: 36 predicted then.
  auto n = make_node("n", 64);
  n.mem_available_bytes = 20 * GiB;
  auto c = one_node(n);
  c.allocations.push_back(make_alloc("x", "n", 16, now + hour));
  SECTION("its cap counts against what is predicted available then") {
    auto a = make_job("a", 8);
    a.ram_floor_bytes = 16 * GiB; // needs 24 then
    // 36 - 13 - 8 = 15 < 16: refused although 13 GiB of caps are spare then.
    auto p = place(c, {a, make_job("long", 13, 0, 0, 0, 2 * hour)}, now);
    REQUIRE(p.reserved.has_value());
    CHECK(p.reserved->at_ms == now + hour);
    CHECK_FALSE(started(p, "long"));
    // 36 - 12 - 8 = 16: starts.
    CHECK(started(place(c, {a, make_job("long", 12, 0, 0, 0, 2 * hour)}, now), "long"));
  }
  SECTION("its floor joins the reserved job's combined floor then") {
    auto a = make_job("a", 30);
    a.ram_floor_bytes = 1 * GiB; // now 20 - 30 < 1; then 36 - 30 = 6 >= 1
    auto b = make_job("b", 1, 0, 0, 0, 2 * hour);
    b.ram_floor_bytes = 8 * GiB; // fits now (20 - 1 >= 8); then 36 - 1 - 30 = 5 < 8
    auto p = place(c, {a, b}, now);
    REQUIRE(p.reserved.has_value());
    CHECK(p.reserved->job == "a");
    CHECK_FALSE(started(p, "b"));
    b.ram_floor_bytes = 5 * GiB; // 5 >= 5
    CHECK(started(place(c, {a, b}, now), "b"));
  }
}

TEST_CASE("a job with an impossible floor does not shadow a later job of the same caps",
          "[placement]") {
  // The hopeless-shape shortcut must not skip "b" because "a" (same cap, a
  // floor that can never be met) found no reservation.
  auto c = backfill_cluster();
  auto a = make_job("a", 60);
  a.ram_floor_bytes = 10 * GiB; // 60 + 10 > 64
  auto p = place(c, {a, make_job("b", 60)}, now);
  REQUIRE(p.reserved.has_value());
  CHECK(p.reserved->job == "b");
}

// ---------------------------------------------------------------- rule 6

TEST_CASE("a GPU job packs onto the node with fewer free lanes", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("wide", 64, 0, 4));
  c.nodes.push_back(make_node("narrow", 256, 0, 2));
  auto p = place(c, {make_job("g", 8, 1, 8)}, now);
  CHECK(node_of(p, "g") == "narrow");
}

TEST_CASE("a GPU job counts lanes used by allocations when packing", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 64, 0, 4));
  c.nodes.push_back(make_node("b", 64, 0, 4));
  c.allocations.push_back(make_alloc("x", "b", 8, now + hour, {"gpu0", "gpu1", "gpu2"}));
  auto p = place(c, {make_job("g", 8, 1, 8)}, now);
  CHECK(node_of(p, "g") == "b");
}

TEST_CASE("between nodes with equal free lanes a GPU job takes the one with less RAM left",
          "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("big", 256, 0, 2));
  c.nodes.push_back(make_node("small", 64, 0, 2));
  auto p = place(c, {make_job("g", 8, 1, 8)}, now);
  CHECK(node_of(p, "g") == "small");
}

TEST_CASE("a CPU job avoids GPU nodes when a CPU-only node fits", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("gpu", 32, 0, 2));
  c.nodes.push_back(make_node("cpu", 256, 0, 0));
  auto p = place(c, {make_job("j", 8)}, now);
  CHECK(node_of(p, "j") == "cpu");
}

TEST_CASE("a CPU job goes to a GPU node when no CPU-only node fits", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("cpu", 16, 0, 0));
  c.nodes.push_back(make_node("gpu", 256, 0, 2));
  auto p = place(c, {make_job("j", 32)}, now);
  CHECK(node_of(p, "j") == "gpu");
}

TEST_CASE("a CPU job takes the CPU-only node with the least RAM left", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("roomy", 256));
  c.nodes.push_back(make_node("snug", 64));
  c.nodes.push_back(make_node("tiny", 8));
  auto p = place(c, {make_job("j", 16)}, now);
  CHECK(node_of(p, "j") == "snug");
}

TEST_CASE("RAM left for node choice counts live allocations and the reserve", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 64));
  c.nodes.push_back(make_node("b", 128));
  c.nodes[1].ram_reserve_bytes = 40 * GiB;                       // 88 allocatable
  c.allocations.push_back(make_alloc("x", "b", 40, now + hour)); // 48 left on b
  auto p = place(c, {make_job("j", 16)}, now);
  CHECK(node_of(p, "j") == "b");
}

TEST_CASE("ties in node choice go to the node listed first", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("first", 64, 0, 2));
  c.nodes.push_back(make_node("second", 64, 0, 2));
  CHECK(node_of(place(c, {make_job("g", 8, 1, 8)}, now), "g") == "first");
  CHECK(node_of(place(c, {make_job("j", 8)}, now), "j") == "first");
}

TEST_CASE("best fit spreads a run of jobs by what is left after each start", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 32));
  c.nodes.push_back(make_node("b", 40));
  // j1 -> a (16 left vs 24), j2 (20) -> b (a has only 16), j3 (12) -> a (4 left vs 8 on b)
  auto p = place(c, {make_job("j1", 16), make_job("j2", 20), make_job("j3", 12)}, now);
  CHECK(node_of(p, "j1") == "a");
  CHECK(node_of(p, "j2") == "b");
  CHECK(node_of(p, "j3") == "a");
}

// ---------------------------------------------------------------- rule 7

namespace {
cluster_view preempt_cluster(level victim_level, bool checkpoint) {
  auto c = one_node(make_node("n", 64));
  auto a = make_alloc("victim", "n", 48, now + 5 * hour);
  a.priority = victim_level;
  a.checkpoint = checkpoint;
  a.at_lease_boundary = true;
  c.allocations.push_back(a);
  return c;
}
} // namespace

TEST_CASE("an allocation is never preempted between lease boundaries", "[placement]") {
  auto c = preempt_cluster(level::low, true);
  c.allocations[0].at_lease_boundary = false;
  auto p = place(c, {with_level(make_job("urgent", 40), level::high)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("a high job asks a low checkpoint allocation to yield", "[placement]") {
  auto p = place(preempt_cluster(level::low, true),
                 {with_level(make_job("urgent", 40), level::high)}, now);
  CHECK_FALSE(started(p, "urgent"));
  REQUIRE(p.preempt.has_value());
  CHECK(p.preempt->victim_job == "victim");
  CHECK(p.preempt->node == "n");
  CHECK(p.preempt->for_job == "urgent");
}

TEST_CASE("a medium job may preempt a low one", "[placement]") {
  auto p =
      place(preempt_cluster(level::low, true), {with_level(make_job("m", 40), level::medium)}, now);
  REQUIRE(p.preempt.has_value());
  CHECK(p.preempt->victim_job == "victim");
}

TEST_CASE("a job never preempts an allocation of its own level", "[placement]") {
  auto p = place(preempt_cluster(level::medium, true),
                 {with_level(make_job("m", 40), level::medium)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("a job never preempts an allocation of a higher level", "[placement]") {
  auto p =
      place(preempt_cluster(level::high, true), {with_level(make_job("l", 40), level::low)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("an allocation without checkpoint mode is never preempted", "[placement]") {
  auto p = place(preempt_cluster(level::low, false),
                 {with_level(make_job("urgent", 40), level::high)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("no preemption on a node with a stop already in flight", "[placement]") {
  auto c = preempt_cluster(level::low, true);
  auto s = make_alloc("stopping", "n", 4, now + hour);
  s.priority = level::low;
  s.checkpoint = true;
  s.stopping = true;
  c.allocations.push_back(s);
  // Ending the victim would free 48 of 64 (12 free now + 48 >= 40), but a stop is in flight.
  auto p = place(c, {with_level(make_job("urgent", 40), level::high)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("no preemption when ending the victim would not let the job fit", "[placement]") {
  auto p = place(preempt_cluster(level::low, true),
                 {with_level(make_job("urgent", 500), level::high)}, now);
  CHECK_FALSE(p.preempt.has_value());
}

TEST_CASE("at most one victim per pass, for the first job that cannot start", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("a", 64));
  c.nodes.push_back(make_node("b", 64));
  for (const char* n : {"a", "b"}) {
    auto v = make_alloc(std::string("v_") + n, n, 48, now + 5 * hour);
    v.priority = level::low;
    v.checkpoint = true;
    v.at_lease_boundary = true;
    c.allocations.push_back(v);
  }
  auto p = place(
      c, {with_level(make_job("u1", 40), level::high), with_level(make_job("u2", 40), level::high)},
      now);
  REQUIRE(p.preempt.has_value());
  CHECK(p.preempt->for_job == "u1");
  CHECK((p.preempt->victim_job == "v_a" || p.preempt->victim_job == "v_b"));
  CHECK(p.starts.empty());
}

TEST_CASE("preemption releases nothing in the same pass", "[placement]") {
  auto p = place(preempt_cluster(level::low, true),
                 {with_level(make_job("urgent", 40), level::high), make_job("after", 40)}, now);
  REQUIRE(p.preempt.has_value());
  CHECK_FALSE(started(p, "urgent"));
  CHECK_FALSE(started(p, "after"));
}

TEST_CASE("a job that starts needs no preemption", "[placement]") {
  auto p = place(preempt_cluster(level::low, true),
                 {with_level(make_job("urgent", 8), level::high)}, now);
  CHECK(started(p, "urgent"));
  CHECK_FALSE(p.preempt.has_value());
}

// ---------------------------------------------------------------- explain

TEST_CASE("explain is empty when the job fits now", "[placement]") {
  auto c = one_node(make_node("alpha", 64));
  CHECK(explain(c, make_job("j", 8), std::nullopt, std::nullopt, now).empty());
}

TEST_CASE("explain names the node short of RAM", "[placement]") {
  auto c = one_node(make_node("alpha", 64));
  c.allocations.push_back(make_alloc("x", "alpha", 40, now + hour));
  auto lines = explain(c, make_job("j", 40), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "alpha", "RAM"));
}

TEST_CASE("explain names the node short of lanes", "[placement]") {
  auto c = one_node(make_node("beta", 256, 0, 1));
  c.allocations.push_back(make_alloc("x", "beta", 1, now + hour, {"gpu0"}));
  auto lines = explain(c, make_job("g", 8, 1, 8), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "beta", "lane"));
}

TEST_CASE("explain names the floor that refuses a job", "[placement]") {
  auto n = make_node("gamma", 64);
  n.mem_available_bytes = 20 * GiB;
  n.ram_floor_bytes = 10 * GiB;
  auto lines = explain(one_node(n), make_job("j", 12), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "gamma", "floor"));
}

TEST_CASE("explain names a node with a stale heartbeat", "[placement]") {
  auto n = make_node("delta", 64);
  n.last_heartbeat_ms = now - 60'000;
  auto lines = explain(one_node(n), make_job("j", 1), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "delta", "heartbeat"));
}

TEST_CASE("explain names a node that is not approved", "[placement]") {
  auto n = make_node("epsilon", 64);
  n.approved = false;
  auto lines = explain(one_node(n), make_job("j", 1), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "epsilon", "not approved"));
}

TEST_CASE("explain names a GPU fault latch for a GPU job", "[placement]") {
  auto n = make_node("zeta", 64, 0, 2);
  n.gpu_fault = true;
  auto lines = explain(one_node(n), make_job("g", 1, 1, 1), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "zeta", "fault"));
  CHECK(explain(one_node(n), make_job("cpu", 1), std::nullopt, std::nullopt, now).empty());
}

TEST_CASE("explain gives a line for each node", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("alpha", 16));
  c.nodes.push_back(make_node("beta", 16, 0, 0));
  c.nodes[1].approved = false;
  c.nodes.push_back(make_node("gamma", 16));
  c.nodes[2].last_heartbeat_ms = now - 60'000;
  auto lines = explain(c, make_job("j", 32), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "alpha", "RAM"));
  CHECK(explains(lines, "beta", "approved"));
  CHECK(explains(lines, "gamma", "heartbeat"));
}

TEST_CASE("explain of a pinned job speaks of its node", "[placement]") {
  cluster_view c;
  c.nodes.push_back(make_node("alpha", 64));
  c.nodes.push_back(make_node("beta", 8));
  auto lines = explain(c, pinned(make_job("j", 16), "beta"), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK_FALSE(lines.empty());
  CHECK(explains(lines, "beta", "RAM"));
  CHECK(explain(c, pinned(make_job("j", 16), "alpha"), std::nullopt, std::nullopt, now).empty());
}

TEST_CASE("explain names the reservation a backfill candidate would delay", "[placement]") {
  auto c = backfill_cluster();
  reservation r{"big", "n", now + hour};
  auto big = make_job("big", 60);
  auto lines = explain(c, make_job("long", 8, 0, 0, 0, 2 * hour), r, big, now);
  INFO(joined(lines));
  CHECK(explains(lines, "n", "big"));
  // A short job ends before the reservation: nothing to explain.
  CHECK(explain(c, make_job("short", 8, 0, 0, 0, 30 * minute), r, big, now).empty());
  // A long job within what the reservation leaves over (64 - 60 GiB) delays nothing.
  CHECK(explain(c, make_job("small-long", 2, 0, 0, 0, 2 * hour), r, big, now).empty());
}

TEST_CASE("explain says a job can never fit on a node, with the figures", "[placement]") {
  auto box = make_node("box", 4, 8, 2, 24);
  auto c = one_node(box);
  auto has = [](const std::vector<std::string>& lines, const std::string& line) {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  };
  auto floor = make_job("a", 1);
  floor.ram_floor_bytes = 30 * GiB;
  auto lines = explain(c, floor, std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 1.0 GiB cap + 30.0 GiB RAM floor, the node has "
                   "4.0 GiB"));
  auto start_min = make_job("a", 1);
  start_min.ram_start_min_bytes = 8 * GiB;
  lines = explain(c, start_min, std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 8.0 GiB available to start (its start minimum), "
                   "the node has 4.0 GiB"));
  lines = explain(c, make_job("a", 1, 3, 8), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 3 GPUs, the node has 2"));
  lines = explain(c, make_job("a", 1, 1, 40), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 40.0 GiB VRAM per GPU, the node's largest lane "
                   "has 24.0 GiB"));
  lines = explain(c, make_job("a", 1, 0, 0, 9), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 9 CPUs, the node has 8"));
  lines = explain(c, make_job("a", 6), std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(has(lines, "box: can never fit here: needs 6.0 GiB RAM, the node has 4.0 GiB allocatable"));
  // A floor that fails only because of what runs now is not "never".
  auto n = make_node("n", 64);
  n.mem_available_bytes = 20 * GiB;
  auto j = make_job("j", 8);
  j.ram_floor_bytes = 16 * GiB;
  lines = explain(one_node(n), j, std::nullopt, std::nullopt, now);
  INFO(joined(lines));
  CHECK(explains(lines, "n", "RAM floor"));
  CHECK_FALSE(explains(lines, "n", "never"));
}

// The header lists the floors of live allocations; a start planned earlier in
// the same pass is an active allocation by the time the next one launches
// (the seed: "the floors of all active allocations"), so its floor counts.
TEST_CASE("a start planned earlier in the pass adds its floor to the combined floor",
          "[placement]") {
  auto n = make_node("n", 256);
  n.mem_available_bytes = 40 * GiB;
  auto c = one_node(n);
  auto first = make_job("first", 4);
  first.ram_floor_bytes = 20 * GiB; // 40 - 4 = 36 >= 20
  auto second = make_job("second", 10);
  // 40 - 4 - 10 = 26 >= 20: starts, and carries the first one's floor.
  auto p = place(c, {first, second}, now);
  REQUIRE(started(p, "second"));
  CHECK(find_start(p, "second")->ram_floor_bytes == 20 * GiB);
  // 40 - 4 - 20 = 16 < 20: refused although "second" has no floor of its own.
  second.ram_bytes = 20 * GiB;
  CHECK_FALSE(started(place(c, {first, second}, now), "second"));
}
