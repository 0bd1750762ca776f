// The node daemon's real actors (node/actors) on CAF's deterministic
// scheduler and virtual time, over cq-sim's simulated host (sim/node_host):
// the supervisor's timers, cleanup holds and recovery, with no real process
// and no sleep. Frames are the real wire bytes; the test plays the
// coordinator.
#include "delayed.hpp"
#include "node_world.hpp"

using namespace cq;

using cq::testing::node_world;

TEST_CASE("a stop order kills a workload that ignores TERM when its grace period ends, and its "
          "exit is reported cancelled") {
  node_world w;
  sim::workload job;
  job.run_ms = 600'000;
  job.ignores_term = true;
  w.order(node_world::start("a1", job));
  w.run_for(100);
  REQUIRE(w.running.count("a1"));
  REQUIRE(w.of("a1", "started").size() == 1);
  bus::stop_order stop;
  stop.allocation = "a1";
  stop.grace_ms = 5000;
  w.order(stop);
  w.run_for(4900);
  CHECK(w.running.count("a1")); // TERM is ignored; the grace period is not over
  w.run_for(300);
  CHECK_FALSE(w.running.count("a1"));
  w.run_for(1000);
  auto exits = w.of("a1", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].reason == bus::reason::cancelled);
  CHECK(exits[0].signal == 9);
}

TEST_CASE("a job's timeout sends TERM, then KILL ten seconds later, and is reported as timeout") {
  node_world w;
  sim::workload job;
  job.run_ms = 600'000;
  job.ignores_term = true;
  auto o = node_world::start("a2", job);
  o.timeout_ms = 2000;
  w.order(o);
  w.run_for(2100);
  CHECK(w.running.count("a2")); // TERM at 2 s, ignored
  w.run_for(9800);
  CHECK(w.running.count("a2"));
  w.run_for(300);
  CHECK_FALSE(w.running.count("a2"));
  w.run_for(1000);
  auto exits = w.of("a2", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].reason == bus::reason::timeout);
}

TEST_CASE("a job that ends before its timeout leaves no timer holding its supervisor") {
  // The timeout comes through the watchdog, which drops it once the leader
  // ended: a timer of the supervisor's own would keep it for the whole
  // timeout, an hour here, after its job ended (docs/adr/0070).
  node_world w;
  sim::workload job;
  job.run_ms = 1000;
  auto o = node_world::start("a9", job);
  o.timeout_ms = 3'600'000;
  w.order(o);
  w.run_for(2000);
  REQUIRE(w.of("a9", "exited").size() == 1);
  for (auto& m : test::delayed_messages(*w.sched)) {
    CHECK(m.receiver != "cq.node.supervisor");
    CHECK(m.sender != "cq.node.supervisor");
  }
}

namespace {
/// Runs a one-second job `id` (leaving a marked process behind with
/// `escapee`) and checks its exit is reported well within [cleanup] poll_ms
/// (100 ms) of its end.
void reported_within_poll(const char* id, bool escapee) {
  node_world w;
  sim::workload job;
  job.run_ms = 1000;
  job.escapee = escapee;
  w.order(node_world::start(id, job));
  w.run_for(1000);
  w.run_for(20); // well within poll_ms
  auto exits = w.of(id, "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 0);
  CHECK_FALSE(exits[0].detail.has_value());
}
} // namespace

TEST_CASE("a job whose processes are all gone is reported at once: the confirming scan does not "
          "wait for [cleanup] poll_ms") {
  reported_within_poll("a5", false);
}

TEST_CASE("a job that leaves a process behind is reported once the cleanup's kill ended it, not "
          "a [cleanup] poll_ms later") {
  // The first scan kills the marked process that outlived the workload.
  reported_within_poll("a6", true);
}

TEST_CASE("retention of allocations: the hourly sweep removes a finished allocation's directory "
          "and its job's state dir once older than the window, and keeps a recent one and an "
          "unacknowledged one") {
  node_world w(10 * 60'000); // a 10-minute window
  sim::workload job;
  job.run_ms = 1000;
  auto& disk = w.host->disk();
  auto root = w.dir / "node";
  w.order(node_world::start("a7", job));
  w.order(node_world::start("a9", job));
  w.run_for(3000);
  REQUIRE(w.of("a7", "exited").size() == 1);
  REQUIRE(w.of("a9", "exited").size() == 1);
  // a9's acknowledgement mark is lost (as after a power loss): a restart
  // would report its exit again from exit.json, so it is kept.
  REQUIRE(disk.exists(root / "allocations" / "a9" / "reported"));
  REQUIRE(disk.remove(root / "allocations" / "a9" / "reported"));
  CHECK(disk.is_directory(root / "allocations" / "a7"));
  CHECK(disk.is_directory(root / "jobs" / "j-a7" / "state"));
  w.run_until(55 * 60'000); // past the window, before the next sweep
  CHECK(disk.is_directory(root / "allocations" / "a7"));
  w.order(node_world::start("a8", job));
  w.run_until(61 * 60'000); // the sweep at 60 min
  REQUIRE(w.of("a8", "exited").size() == 1);
  CHECK_FALSE(disk.is_directory(root / "allocations" / "a7"));
  CHECK_FALSE(disk.exists(root / "allocations" / "a7" / "exit.json"));
  CHECK_FALSE(disk.is_directory(root / "jobs" / "j-a7"));
  CHECK(disk.is_directory(root / "allocations" / "a8")); // finished 5 minutes ago
  CHECK(disk.exists(root / "allocations" / "a9" / "exit.json"));
  CHECK(disk.is_directory(root / "jobs" / "j-a8" / "state"));
}

TEST_CASE("retention of allocations: a sweep that can remove nothing lists no directory, and an "
          "allocation that finished after the last full sweep is still removed once its window "
          "has passed") {
  node_world w(3 * 3'600'000); // a 3-hour window: a sweep every hour
  sim::workload job;
  job.run_ms = 1000;
  auto& disk = w.host->disk();
  auto root = w.dir / "node";
  w.order(node_world::start("b1", job));
  w.run_for(3000);
  REQUIRE(w.of("b1", "exited").size() == 1);
  w.run_until(90 * 60'000); // the sweep at 60 min read b1's directory: it expires at 3 h 1 s
  auto listed = disk.listings;
  w.run_until(150 * 60'000); // the sweep at 120 min: nothing can have expired
  CHECK(disk.listings == listed);
  w.order(node_world::start("b2", job)); // finishes after the last full sweep
  w.run_for(3000);
  REQUIRE(w.of("b2", "exited").size() == 1);
  // The sweep at 180 min reads the directories (a full sweep at least once a
  // window, for directories made by hand): b1 is a second short of its window.
  w.run_until(185 * 60'000);
  CHECK(disk.listings > listed);
  CHECK(disk.is_directory(root / "allocations" / "b1"));
  w.run_until(245 * 60'000); // the sweep at 240 min removes b1
  CHECK_FALSE(disk.is_directory(root / "allocations" / "b1"));
  CHECK(disk.is_directory(root / "allocations" / "b2"));
  auto after_b1 = disk.listings;
  CHECK(after_b1 > listed);
  w.run_until(305 * 60'000); // the sweep at 300 min: b2 expires at 330
  CHECK(disk.listings == after_b1);
  CHECK(disk.is_directory(root / "allocations" / "b2"));
  w.run_until(365 * 60'000); // the sweep at 360 min removes b2
  CHECK_FALSE(disk.is_directory(root / "allocations" / "b2"));
  CHECK_FALSE(disk.is_directory(root / "jobs" / "j-b2"));
}

TEST_CASE("a forget order removes at once the directories of jobs the coordinator forgot, an "
          "unacknowledged exit's once it is acknowledged, never a running one; a bad order "
          "removes nothing (ADR 0072)") {
  node_world w; // no [retention] window: only the order removes anything
  sim::workload quick;
  quick.run_ms = 1000;
  sim::workload slow;
  slow.run_ms = 600'000;
  auto& disk = w.host->disk();
  auto root = w.dir / "node";
  w.unacked_exits = {"f5"};
  for (auto* a : {"f1", "f2", "f4", "f5"})
    w.order(node_world::start(a, quick));
  w.order(node_world::start("f3", slow));
  w.run_for(3000);
  for (auto* a : {"f1", "f2", "f4", "f5"})
    REQUIRE(w.of(a, "exited").size() == 1);
  REQUIRE(w.running.count("f3"));
  // f2's acknowledgement mark is lost: its job is forgotten, so it goes too.
  REQUIRE(disk.remove(root / "allocations" / "f2" / "reported"));
  auto alloc = [&](const char* a) { return disk.is_directory(root / "allocations" / a); };
  auto job = [&](const char* a) {
    return disk.is_directory(root / "jobs" / (std::string("j-") + a));
  };
  // One name that is not an id: refused whole, nothing removed.
  bus::forget_order bad;
  bad.jobs = {"j-f1"};
  bad.allocations = {"f1", "../f4"};
  w.order(bad);
  w.run_for(100);
  REQUIRE_FALSE(w.replies.back().ok);
  CHECK(w.replies.back().error.code == errc::invalid_argument);
  CHECK(alloc("f1"));
  bus::forget_order o;
  o.jobs = {"j-f1", "j-f2", "j-f3", "j-f5", "j-gone"};
  o.allocations = {"f1", "f2", "f3", "f5", "gone"};
  w.order(o);
  w.run_for(100);
  CHECK(w.replies.back().ok);
  CHECK_FALSE(alloc("f1"));
  CHECK_FALSE(job("f1"));
  CHECK_FALSE(alloc("f2"));
  CHECK_FALSE(job("f2"));
  CHECK(alloc("f3")); // still running, and its state dir with it
  CHECK(job("f3"));
  CHECK(alloc("f4")); // not named
  CHECK(job("f4"));
  CHECK(alloc("f5")); // its exit is not acknowledged yet
  CHECK(job("f5"));
  // Acknowledged when re-sent: then it goes, with its state dir.
  w.unacked_exits.clear();
  w.run_for(30'000);
  CHECK_FALSE(alloc("f5"));
  CHECK_FALSE(job("f5"));
  CHECK(alloc("f3"));
  CHECK(alloc("f4"));
}

TEST_CASE("a forget order keeps a held allocation, a directory with no exit record, and the "
          "state dir of a job with an allocation still running (ADR 0072)") {
  node_world w;
  auto& disk = w.host->disk();
  auto root = w.dir / "node";
  sim::workload quick;
  quick.run_ms = 1000;
  sim::workload stuck = quick;
  stuck.suspect_ms = 600'000; // outlives cleanup: the node holds its allocation
  sim::workload slow;
  slow.run_ms = 600'000;
  w.unacked_exits = {"g1"}; // and its exit is not acknowledged when the order comes
  w.order(node_world::start("g1", stuck));
  w.order(node_world::start("g2", quick));
  auto second = node_world::start("g3", slow); // j-g2's second allocation, running
  second.job = "j-g2";
  w.order(second);
  w.run_for(12'000); // past [cleanup] max_wait_ms: g1 is held
  REQUIRE(w.of("g1", "exited").size() == 1);
  REQUIRE(w.of("g2", "exited").size() == 1);
  REQUIRE(w.heartbeats.back().holds.value_or(std::vector<bus::hold_info>{}).size() == 1);
  // A directory a crash left with its record but no exit record (recovery
  // leaves such a start to the coordinator: its process may run).
  REQUIRE(disk.make_dirs(root / "allocations" / "g4"));
  REQUIRE(disk.write_atomic(root / "allocations" / "g4" / "alloc.json",
                            R"({"allocation": "g4", "job": "j-g4"})"));
  REQUIRE(disk.make_dirs(root / "jobs" / "j-g4" / "state"));
  bus::forget_order o;
  o.jobs = {"j-g1", "j-g2", "j-g4"};
  o.allocations = {"g1", "g2", "g3", "g4"};
  w.order(o);
  w.run_for(100);
  REQUIRE(w.replies.back().ok);
  auto alloc = [&](const char* a) { return disk.is_directory(root / "allocations" / a); };
  auto job = [&](const char* j) { return disk.is_directory(root / "jobs" / j); };
  CHECK(alloc("g1")); // held
  CHECK(job("j-g1"));
  CHECK_FALSE(alloc("g2")); // finished and acknowledged
  CHECK(alloc("g3"));       // running
  CHECK(job("j-g2"));       // g3 may use it
  CHECK(alloc("g4"));       // no exit record
  CHECK(job("j-g4"));
  // Its hold keeps g1 also once its exit is acknowledged.
  w.unacked_exits.clear();
  w.run_for(30'000);
  REQUIRE(w.heartbeats.back().holds.value_or(std::vector<bus::hold_info>{}).size() == 1);
  CHECK(alloc("g1"));
  CHECK(job("j-g1"));
}

TEST_CASE("a process that outlives cleanup's deadline puts the node into a hold, reported in "
          "heartbeats until a release order names it") {
  node_world w;
  sim::workload job;
  job.run_ms = 1000;
  job.suspect_ms = 60'000; // its environment cannot be read; never signalled
  w.order(node_world::start("a3", job));
  w.run_for(1100);
  CHECK(w.of("a3", "exited").empty()); // cleanup waits for it
  w.run_for(11'000);                   // [cleanup] max_wait_ms is 10 s
  auto exits = w.of("a3", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 0);
  CHECK(exits[0].detail.value_or("").find("could not confirm") != std::string::npos);
  w.run_for(1000);
  auto& hb = w.heartbeats.back();
  REQUIRE(hb.holds);
  REQUIRE(hb.holds->size() == 1);
  auto hold = hb.holds->front();
  CHECK(hold.allocation == "a3");
  CHECK(hold.lane.empty()); // the whole node: the job held no lanes
  w.order(bus::release_order{hold.id});
  w.run_for(2000);
  CHECK(w.heartbeats.back().holds.value_or(std::vector<bus::hold_info>{}).empty());
}

TEST_CASE("a start empties the trash of what a crash left half removed, and nothing else "
          "(ADR 0072)") {
  node_world w;
  sim::workload quick;
  quick.run_ms = 1000;
  w.order(node_world::start("t1", quick));
  w.run_for(3000);
  REQUIRE(w.of("t1", "exited").size() == 1);
  auto& disk = w.host->disk();
  auto root = w.dir / "node";
  CHECK(disk.is_directory(root / "trash"));
  CHECK(disk.list(root / "trash").empty());
  // As a crash while the remover worked leaves it: part of a directory.
  w.host->crash();
  REQUIRE(disk.make_dirs(root / "trash" / "t0" / "control"));
  REQUIRE(disk.write_atomic(root / "trash" / "t0" / "alloc.json", "{}"));
  REQUIRE(disk.make_dirs(root / "trash" / "j-t0" / "state"));
  w.run_for(1000);
  w.host->boot("node-token");
  w.run_for(1000);
  CHECK(disk.list(root / "trash").empty());
  CHECK(disk.is_directory(root / "allocations" / "t1")); // the kept one stays
  CHECK(disk.is_directory(root / "jobs" / "j-t1"));
  auto& hb = w.heartbeats.back();
  CHECK(std::find(hb.allocations.begin(), hb.allocations.end(), "t0") == hb.allocations.end());
}

TEST_CASE("a daemon restarted while its workload runs re-adopts it, keeps listing it, and "
          "reports its exit once") {
  node_world w;
  sim::workload job;
  job.run_ms = 20'000;
  job.exit_code = 3;
  w.order(node_world::start("a4", job));
  w.run_for(2000);
  REQUIRE(w.running.count("a4"));
  w.host->crash();
  w.run_for(3000);
  w.host->boot("node-token");
  w.run_for(2000);
  auto& hb = w.heartbeats.back();
  CHECK(std::find(hb.allocations.begin(), hb.allocations.end(), "a4") != hb.allocations.end());
  w.run_for(20'000);
  auto exits = w.of("a4", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 3);
  CHECK(exits[0].reason == bus::reason::none);
}

TEST_CASE("a daemon restarted after its machine's wall clock stepped back counts its heartbeats "
          "from after its last start, so the coordinator does not take them for old ones") {
  // The coordinator ignores a heartbeat whose (boot_ms, beat) is not newer
  // than one it saw from the same state dir (ADR 0019). A daemon that took
  // the stepped-back wall clock as its boot_ms was ignored for good: cq-sim
  // seed 500178 (clock_skew, a power loss) left its node down and a job
  // pinned there queued.
  node_world w;
  w.run_for(3000);
  REQUIRE_FALSE(w.heartbeats.empty());
  auto first = w.heartbeats.back();
  REQUIRE(first.boot_ms);
  w.host->crash();
  w.run_for(1000);
  w.host->set_clock_offset(-60'000); // a minute back, before the first start
  w.host->boot("node-token");
  w.run_for(3000);
  auto again = w.heartbeats.back();
  REQUIRE(again.boot_ms);
  CHECK(*again.boot_ms > *first.boot_ms);
  CHECK(*again.boot_ms <= *first.boot_ms + 10); // one more than the last start's
  // The wall clock forward again: it is taken as it is.
  w.host->crash();
  w.run_for(1000);
  w.host->set_clock_offset(120'000);
  w.host->boot("node-token");
  w.run_for(3000);
  CHECK(*w.heartbeats.back().boot_ms > *again.boot_ms + 60'000);
}

TEST_CASE("a workload that ends while its daemon is down is finished from cq-shim's status file "
          "after the restart") {
  node_world w;
  sim::workload job;
  job.run_ms = 3000;
  job.exit_code = 0;
  w.order(node_world::start("a5", job));
  w.run_for(1000);
  w.host->crash();
  w.run_for(5000); // it ends meanwhile
  CHECK_FALSE(w.running.count("a5"));
  w.host->boot("node-token");
  w.run_for(3000);
  auto exits = w.of("a5", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 0);
  CHECK(exits[0].reason == bus::reason::none);
}

TEST_CASE("after a power loss, an allocation of the earlier boot is not re-adopted, even where its "
          "leader's pid and start time now name a process of the new boot") {
  node_world w;
  sim::workload job;
  job.run_ms = 60'000;
  w.order(node_world::start("a7", job));
  w.run_for(2000);
  REQUIRE(w.running.count("a7"));
  // After the kernel wrote its `leader` file back; pids and start times
  // count from the boot, so the old pair names another process now, which
  // adopt() alone takes for the leader.
  w.host->power_loss_pids_reused();
  w.run_for(1000);
  w.host->boot("node-token");
  w.run_for(3000);
  auto exits = w.of("a7", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].reason == bus::reason::lost);
  CHECK(w.of("a7", "started").size() == 1); // not reported started again
  w.run_for(2000);
  auto& hb = w.heartbeats.back();
  CHECK(std::find(hb.allocations.begin(), hb.allocations.end(), "a7") == hb.allocations.end());
}

TEST_CASE("a start report is kept in memory only, with alloc.json its durable record, and a daemon "
          "restarted before it was acknowledged reports the start again") {
  node_world w;
  w.ack_starts = false;
  sim::workload job;
  job.run_ms = 20'000;
  w.order(node_world::start("a6", job));
  w.run_for(2000);
  REQUIRE(w.running.count("a6"));
  REQUIRE(w.of("a6", "started").size() == 1);
  // The start cost no outbox file (two fsyncs): only the seq block is there.
  for (auto& name : w.host->disk().list(w.dir / "node" / "outbox"))
    CHECK(name.find(".json") == std::string::npos);
  w.host->crash();
  w.run_for(1000);
  w.ack_starts = true;
  w.host->boot("node-token");
  w.run_for(3000);
  auto starts = w.of("a6", "started");
  REQUIRE(starts.size() == 2); // reported again, under a new seq
  CHECK(starts[1].job == "j-a6");
  auto sent = w.reports.size();
  w.run_for(10'000); // acknowledged now: not sent again
  for (std::size_t i = sent; i < w.reports.size(); ++i)
    CHECK(w.reports[i].kind != "started");
  w.run_for(10'000);
  CHECK(w.of("a6", "exited").size() == 1);
}

TEST_CASE("a job's start pays five fsyncs (its directory, its state dir's two, alloc.json and "
          "its directory): control/ is durable with alloc.json, without a sync of its own") {
  node_world w;
  sim::workload job;
  job.run_ms = 60'000;
  auto& disk = w.host->disk();
  // A first job: the node's status file and the outbox's block of report
  // seqs are written once, not per job.
  w.order(node_world::start("a7", job));
  w.run_for(2000);
  REQUIRE(w.running.count("a7"));
  auto before = disk.fsyncs;
  std::size_t at_start = 0;
  w.on_report = [&](const bus::report_req& r) {
    if (r.kind == "started" && r.allocation == "a8")
      at_start = disk.fsyncs;
  };
  w.order(node_world::start("a8", job));
  w.run_for(2000);
  REQUIRE(w.running.count("a8"));
  CHECK(at_start - before == 5);
  // A power loss now keeps what the launch relied on: the record, and the
  // directory of CQ_YIELD_FILE.
  disk.power_loss();
  auto dir = w.dir / "node" / "allocations" / "a8";
  CHECK(disk.exists(dir / "alloc.json"));
  CHECK(disk.is_directory(dir / "control"));
  CHECK(disk.is_directory(w.dir / "node" / "jobs" / "j-a8" / "state"));
}

TEST_CASE("an exit's record is written off the daemon's path: the exited report goes out only "
          "once exit.json is durable, and every heartbeat lists the allocation until then") {
  node_world w;
  auto& disk = w.host->disk();
  auto root = w.dir / "node" / "allocations";
  // Start reports stay unacknowledged, so they stay in the outbox while
  // the exits are being recorded: a heartbeat lists each allocation once.
  w.ack_starts = false;
  std::vector<std::string> early, unlisted, twice;
  w.on_report = [&](const bus::report_req& r) {
    if (r.kind == "exited" && !disk.exists(root / r.allocation / "exit.json"))
      early.push_back(r.allocation);
  };
  // Started and not yet reported exited (each exit is acknowledged at once):
  // held, so listed.
  w.on_heartbeat = [&](const bus::heartbeat_req& hb) {
    std::set<std::string> seen;
    for (auto& id : hb.allocations)
      if (!seen.insert(id).second)
        twice.push_back(id);
    for (auto& r : w.reports)
      if (r.kind == "started" && w.of(r.allocation, "exited").empty() &&
          std::count(hb.allocations.begin(), hb.allocations.end(), r.allocation) == 0)
        unlisted.push_back(r.allocation);
  };
  // Ends spread over heartbeats, so that some heartbeat goes out while an
  // exit record is being written.
  for (int i = 0; i < 12; ++i) {
    sim::workload job;
    job.run_ms = 700 + 250 * i;
    w.order(node_world::start("e" + std::to_string(i), job));
  }
  w.run_for(10'000);
  CHECK(early.empty());
  CHECK(unlisted.empty());
  CHECK(twice.empty());
  for (int i = 0; i < 12; ++i) {
    auto id = "e" + std::to_string(i);
    REQUIRE(w.of(id, "exited").size() == 1);
    CHECK(disk.exists(root / id / "exit.json"));
  }
}

TEST_CASE("cq-sim's disk: directories made for a later sync, or without one, are lost at a power "
          "loss until their parent is synced") {
  sim::sim_disk disk;
  REQUIRE(disk.make_dirs("/s/allocations"));
  node::node_disk::pending_syncs later;
  REQUIRE(disk.make_dirs_later("/s/jobs/j1/state", later));
  REQUIRE(disk.make_dir_unsynced("/s/allocations/a1"));
  CHECK(disk.is_directory("/s/jobs/j1/state"));
  CHECK(later.size() == 3); // the parents of state/, j1/ and jobs/
  disk.power_loss();
  CHECK_FALSE(disk.exists("/s/jobs"));
  CHECK_FALSE(disk.exists("/s/allocations/a1"));
  CHECK(disk.is_directory("/s/allocations"));
  // Again, as a start makes them (launch.cpp): its directories for the
  // later sync, control/ without one, its record, then the syncs.
  later.clear();
  REQUIRE(disk.make_dirs_later("/s/allocations/a1", later));
  REQUIRE(disk.make_dirs_later("/s/jobs/j1/state", later));
  REQUIRE(disk.make_dir_unsynced("/s/allocations/a1/control"));
  REQUIRE(disk.write_atomic("/s/allocations/a1/alloc.json", "{}"));
  auto before = disk.fsyncs;
  REQUIRE(disk.sync_dirs(later));
  CHECK(later.empty());
  CHECK(disk.fsyncs - before == 4); // allocations/, j1/, jobs/ and /s: each once
  disk.power_loss();
  CHECK(disk.is_directory("/s/jobs/j1/state"));
  CHECK(disk.is_directory("/s/allocations/a1/control"));
  CHECK(disk.exists("/s/allocations/a1/alloc.json"));
}

TEST_CASE("cq-sim's disk: syncing a start's directories visits what it made, not every entry of "
          "allocations/ (a long run stays linear)") {
  sim::sim_disk disk;
  REQUIRE(disk.make_dirs("/s/allocations"));
  node::node_disk::pending_syncs later;
  for (int i = 0; i < 500; ++i) {
    REQUIRE(disk.make_dirs_later("/s/allocations/a" + std::to_string(i), later));
    REQUIRE(disk.sync_dirs(later));
  }
  auto before = disk.sync_visits;
  REQUIRE(disk.make_dirs_later("/s/allocations/a500", later));
  REQUIRE(disk.sync_dirs(later));
  CHECK(disk.sync_visits - before == 1); // it walked all 500 before
  disk.power_loss();
  CHECK(disk.is_directory("/s/allocations/a500"));
}

TEST_CASE("cq-sim's disk: a sync that failed is not tried again: its directory stays lost at a "
          "power loss, and the next start's sync visits only its own (a fault names it)") {
  sim::sim_disk disk;
  REQUIRE(disk.make_dirs("/s/allocations"));
  std::vector<std::string> hit;
  bool fail = true;
  sim::sim_disk::fault_plan plan;
  plan.fail = [&](std::string_view op,
                  const std::filesystem::path& path) -> std::optional<std::string> {
    if (op != "sync" || !fail)
      return std::nullopt;
    hit.push_back(path.filename().string());
    return std::string("Input/output error");
  };
  disk.set_faults(plan);
  node::node_disk::pending_syncs later;
  REQUIRE(disk.make_dirs_later("/s/allocations/a1", later));
  CHECK_FALSE(disk.sync_dirs(later));
  REQUIRE(disk.make_dirs_later("/s/allocations/a2", later));
  CHECK_FALSE(disk.sync_dirs(later));
  // Each fault named the start whose sync it failed (cq-sim's oracle permits
  // launch_failed for the allocation a disk fault names).
  CHECK(hit == std::vector<std::string>{"a1", "a2"});
  fail = false;
  REQUIRE(disk.make_dirs_later("/s/allocations/a3", later));
  REQUIRE(disk.sync_dirs(later));
  disk.power_loss();
  CHECK_FALSE(disk.exists("/s/allocations/a1"));
  CHECK_FALSE(disk.exists("/s/allocations/a2"));
  CHECK(disk.is_directory("/s/allocations/a3"));
}

TEST_CASE("a start whose directory's sync fails does not launch: its exit (launch_failed) is "
          "persisted in the outbox as well as in exit.json") {
  node_world w;
  auto& disk = w.host->disk();
  disk.set_faults(node_world::failing_sync_of("a9"));
  auto outbox = w.dir / "node" / "outbox";
  bool persisted = false;
  w.on_report = [&](const bus::report_req& r) {
    if (r.kind == "exited" && r.allocation == "a9")
      for (auto& name : disk.list(outbox))
        persisted = persisted || name.find(".json") != std::string::npos;
  };
  sim::workload job;
  job.run_ms = 60'000;
  w.order(node_world::start("a9", job));
  w.run_for(2000);
  CHECK_FALSE(w.running.count("a9"));
  auto exits = w.of("a9", "exited");
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].reason == bus::reason::launch_failed);
  CHECK(exits[0].exit_code == 125);
  CHECK(persisted);
  CHECK(w.of("a9", "started").empty());
}

TEST_CASE("a start cut short by a crash before its record was durable (alloc.json missing, empty "
          "or cut) is reported refused after the restart, never run, and its order again is "
          "not run; one that shows it was launched is not") {
  node_world w;
  auto& disk = w.host->disk();
  w.run_for(1000);
  w.host->crash();
  // What a crash can leave of a start (ADR 0045): the directory alone, or
  // alloc.json created but not yet (or not wholly) written.
  auto root = w.dir / "node" / "allocations";
  for (auto* id : {"b1", "b2", "b3", "b4"})
    REQUIRE(disk.make_dirs(root / id));
  REQUIRE(disk.write_once(root / "b2" / "alloc.json", ""));
  REQUIRE(disk.write_once(root / "b3" / "alloc.json", R"({"allocation": "b3", "jo)"));
  // Launched (its leader file is there), its record damaged since: not
  // claimed never started; the coordinator's reconciliation decides.
  REQUIRE(disk.write_once(root / "b4" / "alloc.json", "{"));
  REQUIRE(disk.write_volatile(root / "b4" / "leader", "4242 17\n"));
  w.run_for(1000);
  w.host->boot("node-token");
  w.run_for(3000);
  for (auto* id : {"b1", "b2", "b3"}) {
    INFO(id);
    auto exits = w.of(id, "exited");
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].reason == bus::reason::refused);
    CHECK(disk.exists(root / id / "exit.json"));
    CHECK(w.of(id, "started").empty());
  }
  CHECK(w.of("b4", "exited").empty());
  CHECK_FALSE(disk.exists(root / "b4" / "exit.json"));
  // The coordinator's start order, re-sent since it was never acknowledged,
  // is acknowledged and not run: the exit above says it ended.
  sim::workload job;
  job.run_ms = 60'000;
  auto replies = w.replies.size();
  w.order(node_world::start("b2", job));
  w.run_for(2000);
  REQUIRE(w.replies.size() == replies + 1);
  CHECK(w.replies.back().ok);
  CHECK_FALSE(w.running.count("b2"));
  CHECK(w.of("b2", "exited").size() == 1);
}
