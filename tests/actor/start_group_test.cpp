// Start orders that reach a node together are one group (ADR 0068): their
// records and directories are synced once each, shared directories once for
// the group, and no workload of the group launches before every record of
// it is durable. The node's real actors over cq-sim's host and disk.
#include "node_world.hpp"

#include <set>

using namespace cq;
using cq::testing::node_world;

namespace {

std::vector<bus::node_order> starts(const std::vector<std::string>& ids) {
  sim::workload job;
  job.run_ms = 60'000;
  std::vector<bus::node_order> out;
  for (auto& id : ids)
    out.push_back(node_world::start(id, job));
  return out;
}

} // namespace

TEST_CASE("start orders that reach a node together are synced as one group: a record and two "
          "directories a start, allocations/ and jobs/ once, and no launch before every record "
          "of the group is durable") {
  node_world w;
  auto& disk = w.host->disk();
  auto node = w.dir / "node";
  // A first start: the node's status file and the outbox's block of report
  // seqs are written once, not per start.
  w.order(node_world::start("g0", sim::workload{}));
  w.run_for(2000);
  const std::vector<std::string> ids = {"g1", "g2", "g3", "g4", "g5", "g6"};
  auto before = disk.fsyncs;
  std::size_t at_first_launch = 0;
  std::vector<std::string> not_durable;
  w.on_launch = [&](const bus::start_order& o) {
    if (at_first_launch == 0)
      at_first_launch = disk.fsyncs;
    // Every record of the group, not only this one's.
    for (auto& id : ids)
      if (!disk.survives(node / "allocations" / id / "alloc.json") ||
          !disk.survives(node / "allocations" / id / "control") ||
          !disk.survives(node / "jobs" / ("j-" + id) / "state"))
        not_durable.push_back(o.allocation + " saw " + id);
  };
  auto batch = starts(ids);
  batch.push_back(batch.front()); // a repeat in the same group: acknowledged, not run twice
  auto replies = w.replies.size();
  w.orders(batch);
  w.run_for(2000);
  CHECK(not_durable.empty());
  // One by one they cost five each (the next test's figure): 30.
  CHECK(at_first_launch - before == 3 * ids.size() + 2);
  REQUIRE(w.replies.size() == replies + batch.size());
  for (auto i = replies; i < w.replies.size(); ++i)
    CHECK(w.replies[i].ok);
  for (auto& id : ids) {
    INFO(id);
    CHECK(w.running.count(id));
    CHECK(w.of(id, "started").size() == 1);
  }
}

TEST_CASE("a start refused within a group (its order expired) leaves the others to launch, each "
          "record durable at the launch although the refusal synced their directories first") {
  node_world w;
  auto& disk = w.host->disk();
  auto node = w.dir / "node";
  auto batch = starts({"r1", "r2", "r3"});
  std::get<bus::start_order>(batch[1]).expires_ms = 1; // long past
  std::vector<std::string> not_durable;
  w.on_launch = [&](const bus::start_order& o) {
    for (auto* id : {"r1", "r3"})
      if (!disk.survives(node / "allocations" / id / "alloc.json"))
        not_durable.push_back(o.allocation + " saw " + id);
  };
  w.orders(batch);
  w.run_for(2000);
  CHECK(not_durable.empty());
  CHECK(w.running == std::set<std::string>{"r1", "r3"});
  auto refused = w.of("r2", "exited");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].reason == bus::reason::refused);
}

TEST_CASE("a start order alone still pays its five syncs, the same as before groups") {
  node_world w;
  auto& disk = w.host->disk();
  w.order(node_world::start("s0", sim::workload{}));
  w.run_for(2000);
  auto before = disk.fsyncs;
  std::size_t at_launch = 0;
  w.on_launch = [&](const bus::start_order&) { at_launch = disk.fsyncs; };
  w.order(starts({"s1"}).front());
  w.run_for(2000);
  CHECK(at_launch - before == 5);
}

TEST_CASE("a group whose sync fails launches none of its starts: each ends launch_failed, its "
          "report persisted in the outbox as well") {
  node_world w;
  auto& disk = w.host->disk();
  // The sync of allocations/ fails at the third start's entry: the entries
  // of all six were in it, so none of their records is known durable.
  auto plan = node_world::failing_sync_of("f3");
  std::set<std::string> lost;
  plan.lost = [&](const std::filesystem::path& p) { lost.insert(p.filename().string()); };
  disk.set_faults(plan);
  auto outbox = w.dir / "node" / "outbox";
  std::set<std::string> persisted;
  w.on_report = [&](const bus::report_req& r) {
    if (r.kind != "exited")
      return;
    for (auto& name : disk.list(outbox))
      if (name.find(".json") != std::string::npos)
        persisted.insert(r.allocation);
  };
  const std::vector<std::string> ids = {"f1", "f2", "f3", "f4", "f5", "f6"};
  w.orders(starts(ids));
  w.run_for(3000);
  CHECK(lost == std::set<std::string>{"f1", "f2", "f4", "f5", "f6"});
  CHECK(w.running.empty());
  for (auto& id : ids) {
    INFO(id);
    auto exits = w.of(id, "exited");
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].reason == bus::reason::launch_failed);
    CHECK(exits[0].exit_code == 125);
    CHECK(w.of(id, "started").empty());
    CHECK(persisted.count(id));
  }
}

TEST_CASE("cq-sim's disk: a file written for a later sync is lost at a power loss until its "
          "content and its directory are synced, and empty with only the directory synced") {
  sim::sim_disk disk;
  REQUIRE(disk.make_dirs("/s/a"));
  REQUIRE(disk.make_dirs("/s/b"));
  node::node_disk::pending_syncs files, dirs;
  REQUIRE(disk.write_once_later("/s/a/r", "one", files, dirs));
  REQUIRE(disk.write_once_later("/s/b/r", "two", files, dirs));
  CHECK_FALSE(disk.write_once_later("/s/a/r", "again", files, dirs)); // it exists
  CHECK(files.size() == 2);
  CHECK(dirs.size() == 2);
  CHECK(disk.read("/s/a/r", 1 << 20) == "one");
  CHECK_FALSE(disk.survives("/s/a/r"));
  auto before = disk.fsyncs;
  REQUIRE(disk.sync_files(files));
  CHECK(files.empty());
  CHECK_FALSE(disk.survives("/s/a/r")); // its entry is not durable yet
  node::node_disk::pending_syncs only_a{"/s/a"};
  REQUIRE(disk.sync_dirs(only_a));
  CHECK(disk.fsyncs - before == 3);
  CHECK(disk.survives("/s/a/r"));
  CHECK_FALSE(disk.survives("/s/b/r"));
  // An entry synced without its content: there after a power loss, empty.
  REQUIRE(disk.write_once_later("/s/a/q", "three", files, dirs));
  files.clear();
  node::node_disk::pending_syncs again{"/s/a"};
  REQUIRE(disk.sync_dirs(again));
  disk.power_loss();
  CHECK(disk.read("/s/a/r", 1 << 20) == "one");
  CHECK_FALSE(disk.exists("/s/b/r"));
  CHECK(disk.read("/s/a/q", 1 << 20) == "");
  // Its entry synced first (a refusal's sync of the directory), then its
  // content: there with its content.
  REQUIRE(disk.write_once_later("/s/a/p", "four", files, dirs));
  node::node_disk::pending_syncs first{"/s/a"};
  REQUIRE(disk.sync_dirs(first));
  REQUIRE(disk.sync_files(files));
  CHECK(disk.survives("/s/a/p"));
}
