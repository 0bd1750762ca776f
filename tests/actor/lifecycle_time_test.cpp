// Issue 9 on the real actors and virtual time: blocked notices once per
// episode, and node loss (down, unknown, lost, fenced) (see fixture.hpp).
#include "fixture.hpp"

namespace {

std::string submit_ram(fixture& f, const std::string& name, std::uint64_t gib) {
  bus::job_spec s;
  s.name = name;
  s.argv = {"train"};
  s.cwd = "/";
  s.ram_bytes = gib << 30;
  return f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
}

std::vector<std::string> kinds(fixture& f, const std::string& job) {
  std::vector<std::string> out;
  for (auto& e : f.ok<bus::events_rep>("owner-token", bus::events_req{{job}}).events)
    out.push_back(e.kind);
  return out;
}

std::size_t count(const std::vector<std::string>& v, const std::string& kind) {
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), kind));
}

/// Advances by `total`, heartbeating every 5 s so the node stays live.
void live_for(fixture& f, std::chrono::milliseconds total) {
  for (auto t = std::chrono::milliseconds(0); t < total; t += std::chrono::seconds(5)) {
    f.advance(std::chrono::seconds(5));
    f.heartbeat();
  }
}

/// A 16 GiB node and a lease of 10 s (the window: lease_window_ms, 5 s); a
/// low job that fills the node and may be preempted, started. Returns its
/// spec and its id.
std::pair<bus::job_spec, std::string> low_started(fixture& f) {
  f.restart_with([](actors::config& c) {
    c.lease_ms = 10'000;
    c.yield_grace = std::chrono::minutes(10);
  });
  f.add_node(); // 16 GiB
  bus::job_spec low;
  low.argv = {"train"}, low.cwd = "/", low.ram_bytes = 15ull << 30, low.priority = "low";
  low.preempt = "checkpoint";
  auto v = f.ok<bus::submit_rep>("owner-token", bus::submit_req{low}).job.id;
  f.report("started", f.log->starts.at(0));
  return {low, v};
}

/// A node ("box", 16 GiB) that is down after 10 s without a heartbeat, and
/// whose allocations are lost 60 s later.
void node_loss_setup(fixture& f) {
  f.restart_with([](actors::config& c) {
    c.node_timeout_ms = 10'000;
    c.lost_after_ms = 60'000;
  });
  f.add_node();
}

/// A job started on the node_loss_setup node, whose node then went down
/// (its allocation unknown); returns the job id and its start order.
std::pair<std::string, bus::start_order> started_then_down(fixture& f) {
  auto j = submit_ram(f, "j", 4);
  REQUIRE(f.log->starts.size() == 1);
  auto first = f.log->starts[0];
  f.report("started", first);
  f.advance(std::chrono::seconds(11)); // no heartbeat: down, unknown
  REQUIRE(f.ok<bus::show_rep>("owner-token", bus::show_req{j}).allocations[0].state ==
          alloc_state::unknown);
  return {j, first};
}

} // namespace

TEST_CASE("a blocked notice fires once per episode, after the configured delay") {
  fixture f;
  f.restart_with([](actors::config& c) { c.blocked_after_other_ms = 60'000; });
  f.add_node(); // 16 GiB
  auto a = submit_ram(f, "a", 15);
  REQUIRE(f.log->starts.size() == 1);
  f.report("started", f.log->starts[0]);
  auto b = submit_ram(f, "b", 15);
  live_for(f, std::chrono::seconds(55));
  CHECK(count(kinds(f, b), "blocked") == 0);
  live_for(f, std::chrono::seconds(10));
  auto evs = f.ok<bus::events_rep>("owner-token", bus::events_req{{b}}).events;
  REQUIRE(count(kinds(f, b), "blocked") == 1);
  auto blocked = std::find_if(evs.begin(), evs.end(), [](auto& e) { return e.kind == "blocked"; });
  CHECK(blocked->detail.find("head of the queue") != std::string::npos);
  CHECK(blocked->detail.find("box") != std::string::npos); // names what blocks it
  // The same episode never notifies again.
  live_for(f, std::chrono::minutes(5));
  CHECK(count(kinds(f, b), "blocked") == 1);
  CHECK(f.show(b).state == job_state::queued); // a notice never stops a run
  CHECK(f.show(a).state == job_state::running);
  // A new head opens a new episode.
  f.report("exited", f.log->starts[0], 0);
  REQUIRE(f.log->starts.size() == 2);
  f.report("started", f.log->starts[1]);
  auto c = submit_ram(f, "c", 15);
  live_for(f, std::chrono::seconds(65));
  CHECK(count(kinds(f, c), "blocked") == 1);
  CHECK(count(kinds(f, b), "blocked") == 1);
}

TEST_CASE("behind a requested yield the shorter delay applies") {
  fixture f;
  f.restart_with([](actors::config& c) {
    c.blocked_after_yield_ms = 20'000;
    c.blocked_after_other_ms = 600'000;
    c.lease_ms = 10'000;
    c.yield_grace = std::chrono::minutes(10);
  });
  f.add_node();
  bus::job_spec low;
  low.argv = {"train"}, low.cwd = "/", low.ram_bytes = 15ull << 30, low.priority = "low";
  low.preempt = "checkpoint";
  auto v = f.ok<bus::submit_rep>("owner-token", bus::submit_req{low}).job.id;
  f.report("started", f.log->starts.at(0));
  bus::job_spec high = low;
  high.priority = "high", high.preempt = std::nullopt;
  auto h = f.ok<bus::submit_rep>("owner-token", bus::submit_req{high}).job.id;
  live_for(f, std::chrono::seconds(5));
  CHECK(f.log->yields.empty()); // not before the lease boundary
  live_for(f, std::chrono::seconds(10));
  REQUIRE(f.log->yields.size() == 1); // at the boundary
  CHECK(count(kinds(f, v), "yield_requested") == 1);
  live_for(f, std::chrono::seconds(25));
  CHECK(count(kinds(f, h), "blocked") == 1);
  auto evs = f.ok<bus::events_rep>("owner-token", bus::events_req{{h}}).events;
  CHECK(evs.back().detail.find("requested yield") != std::string::npos);
}

TEST_CASE("passes run on news: not for a heartbeat that changes nothing, nor at a boundary no "
          "queued job may preempt") {
  fixture f;
  auto [low, v] = low_started(f);
  auto waiting = f.ok<bus::submit_rep>("owner-token", bus::submit_req{low}).job.id;
  // The same heartbeat again and again, across six lease boundaries of v's:
  // nothing a pass reads changes, and nothing queued outranks v.
  auto before = f.passes;
  for (int i = 0; i < 15; ++i) {
    f.advance(std::chrono::seconds(4));
    f.heartbeat();
  }
  CHECK(f.passes == before);
  CHECK(f.log->yields.empty());
  CHECK(f.show(waiting).state == job_state::queued);
  // A job of a higher level: its submit runs a pass, and v's next boundary
  // asks v to yield (the boundaries it renewed before stay renewed).
  bus::job_spec high = low;
  high.priority = "high", high.preempt = std::nullopt;
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{high});
  CHECK(f.passes > before);
  for (int i = 0; i < 3 && f.log->yields.empty(); ++i) {
    f.advance(std::chrono::seconds(4));
    f.heartbeat();
  }
  REQUIRE(f.log->yields.size() == 1);
  CHECK(count(kinds(f, v), "yield_requested") == 1);
  // Less memory available and nothing else: no start can come of it, no
  // pass (ADR 0063).
  auto quiet = f.passes;
  bus::heartbeat_req hb{16ull << 30, 14ull << 30, 4, f.log->held};
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.passes == quiet);
  // v's use listed for the first time: news, a pass.
  hb.usage = std::vector<bus::alloc_usage>{{f.log->starts.at(0).allocation, 1ull << 30, 0}};
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.passes == quiet + 1);
  // v's use grows by as much as the node's available memory falls: the same
  // room for a start, no pass.
  hb.mem_available_bytes = 12ull << 30;
  hb.usage->front().ram_bytes = 3ull << 30;
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.passes == quiet + 1);
  // Its use falls back while the memory stays: less room (its growth still
  // to come counts again), no pass. Then more memory available: a pass.
  hb.usage->front().ram_bytes = 1ull << 30;
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.passes == quiet + 1);
  hb.mem_available_bytes = 13ull << 30;
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.passes == quiet + 2);
}

TEST_CASE("a boundary no queued job outranks is not watched: a better job that comes within its "
          "window still preempts at it") {
  fixture f;
  auto [low, v] = low_started(f);
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{low}); // queued, outranks nothing
  // v's first boundary (10 s) passes with nothing queued above v: no timer
  // looked at it (a timer there renewed the lease, and the job below waited
  // for the next boundary, 20 s).
  for (int i = 0; i < 3; ++i) {
    f.advance(std::chrono::seconds(4));
    f.heartbeat();
  }
  CHECK(f.log->yields.empty());
  // 12 s: within the window of that boundary, a job of a higher level.
  bus::job_spec high = low;
  high.priority = "high", high.preempt = std::nullopt;
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{high});
  REQUIRE(f.log->yields.size() == 1);
  CHECK(count(kinds(f, v), "yield_requested") == 1);
}

TEST_CASE("a node without heartbeats is down; its allocation is unknown, then lost and fenced") {
  fixture f;
  node_loss_setup(f);
  auto j = submit_ram(f, "j", 4);
  REQUIRE(f.log->starts.size() == 1);
  auto first = f.log->starts[0];
  f.report("started", first);
  f.advance(std::chrono::seconds(11)); // no heartbeat
  auto rep = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  REQUIRE(rep.allocations.size() == 1);
  CHECK(rep.allocations[0].state == alloc_state::unknown);
  CHECK(rep.job.state == job_state::running);
  auto nodes = f.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{}).nodes;
  CHECK(nodes.at(0).down);
  // Still unknown just before lost-after (its resources stay taken) ...
  f.advance(std::chrono::seconds(58));
  CHECK(f.show(j).state == job_state::running);
  // ... lost after it, and queued again (attempt + 1 at its next start).
  f.advance(std::chrono::seconds(3));
  rep = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  CHECK(rep.job.state == job_state::queued);
  CHECK(rep.allocations[0].reason == bus::reason::lost);
  auto k = kinds(f, j);
  CHECK(count(k, "lost") == 1);
  CHECK(k.back() == "requeued");
  // The node comes back still listing the given-away allocation: it is told
  // to stop it, and gets no new work until it no longer lists it.
  auto stops_before = f.log->stops.size();
  f.heartbeat(); // held still lists first.allocation
  REQUIRE(f.log->stops.size() > stops_before);
  CHECK(f.log->stops.back().allocation == first.allocation);
  CHECK(f.log->starts.size() == 1);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{j}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].find("given away") != std::string::npos);
  // Its late exit report changes nothing.
  f.report("exited", first, 0);
  CHECK(f.show(j).state != job_state::succeeded);
  f.heartbeat(); // lists nothing now
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].job == j);
  CHECK(f.log->starts[1].attempt == 2);
}

TEST_CASE("a node back before lost-after keeps its allocation") {
  fixture f;
  node_loss_setup(f);
  auto j = submit_ram(f, "j", 4);
  f.report("started", f.log->starts.at(0));
  f.advance(std::chrono::seconds(20));
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{j}).allocations[0].state ==
        alloc_state::unknown);
  f.heartbeat(); // lists it
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{j}).allocations[0].state ==
        alloc_state::running);
  live_for(f, std::chrono::seconds(120));
  CHECK(f.show(j).state == job_state::running);
  CHECK(f.log->starts.size() == 1);
}

TEST_CASE("a node still listing an allocation that exited there (its cleanup) is not fenced") {
  fixture f;
  f.add_node();
  auto a = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  auto first = f.log->starts[0];
  f.report("started", first);
  f.report("exited", first, 0);
  REQUIRE(f.show(a).state == job_state::succeeded);
  // The node is still cleaning up: its heartbeats list the allocation.
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, {first.allocation}};
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  auto stops = f.log->stops.size();
  auto b = f.submit({"true"});
  hb.allocations = f.log->held; // what it took since, and the one it cleans up
  hb.allocations.push_back(first.allocation);
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  // New work goes there (its start may be re-sent until the node reports
  // it), and nobody stops what merely ends.
  REQUIRE(f.log->starts.size() >= 2);
  for (std::size_t i = 1; i < f.log->starts.size(); ++i) {
    CHECK(f.log->starts[i].job == b);
    CHECK(f.log->starts[i].allocation == f.log->starts[1].allocation);
  }
  CHECK(f.log->stops.size() == stops);
}

// Found by cq-sim (seed 2647, fault kind anywhere): the node came back and
// listed the allocation (found) just as the job's lost-after check fired; the
// job had asked for the loss before the found reached it, and the allocation
// was given away while its node ran it.
TEST_CASE("an allocation found again is not given up by a lost-after check already on its way") {
  fixture f;
  node_loss_setup(f);
  auto [j, first] = started_then_down(f);
  f.advance(std::chrono::seconds(58));
  // The lost-after check falls due, and the node's heartbeat reaches every
  // actor but the job's first: the job then sees its check before the found.
  f.sched->advance_time(std::chrono::seconds(3));
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, f.log->held};
  auto rep = f.try_call(f.node_token, hb, "peer",
                        [&] { f.sched->run_jobs_filtered(all_but({"cq.job"})); });
  REQUIRE(rep.has_value());
  f.sched->run();
  auto show = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  CHECK(show.job.state == job_state::running);
  CHECK(show.allocations.size() == 1);
  CHECK(show.allocations[0].state == alloc_state::running);
  CHECK(count(kinds(f, j), "lost") == 0);
  CHECK(f.log->starts.size() == 1);
}

// Found by cq-sim (seed 3159): the loss was decided as the node came back; the
// heartbeat listing the allocation had been taken before the give-up, so the
// node was not fenced, and the job's next attempt was placed on that node
// while the given-away one still ran there.
TEST_CASE("an allocation given away as its node came back fences the node at once") {
  fixture f;
  node_loss_setup(f);
  auto [j, first] = started_then_down(f);
  f.advance(std::chrono::seconds(58));
  // The lost-after check falls due and the job asks for the loss first ...
  f.sched->advance_time(std::chrono::seconds(3));
  f.sched->run_jobs_filtered(named({"cq.job"}));
  // ... then the node's heartbeat, listing it, reaches every actor but the
  // allocation's, which takes the loss before the found.
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, f.log->held};
  REQUIRE(f.try_call(f.node_token, hb, "peer", [&] {
             f.sched->run_jobs_filtered(all_but({"cq.allocation"}));
           }).has_value());
  auto stops_before = f.log->stops.size();
  f.sched->run();
  auto show = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  CHECK(show.job.state == job_state::queued); // given away: the node was down for lost-after
  CHECK(show.allocations[0].reason == bus::reason::lost);
  // The node is stopped at once and gets no new work meanwhile.
  REQUIRE(f.log->stops.size() > stops_before);
  CHECK(f.log->stops.back().allocation == first.allocation);
  CHECK(f.log->starts.size() == 1);
}

// Found by cq-sim (seed 1676): a coordinator restarted while a node was down
// recovers its allocations unknown; the node's heartbeats after the restart
// listed them, but nothing found them (the new node actor had never seen the
// node down), and lost-after gave them all away while the node ran them.
TEST_CASE("a restarted coordinator finds the unknown allocations a node's heartbeat lists") {
  fixture f;
  node_loss_setup(f);
  auto [j, first] = started_then_down(f);
  f.kill_coordinator();
  f.start();
  f.heartbeat(); // lists it
  auto show = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  CHECK(show.allocations[0].state == alloc_state::running);
  live_for(f, std::chrono::seconds(120)); // well past lost-after
  show = f.ok<bus::show_rep>("owner-token", bus::show_req{j});
  CHECK(show.job.state == job_state::running);
  CHECK(show.allocations.size() == 1);
  CHECK(count(kinds(f, j), "lost") == 0);
  CHECK(f.log->starts.size() == 1);
}

TEST_CASE("an exit reported late (a coordinator's outage) ends the run when the node measured it "
          "ended, not when the report came") {
  fixture f;
  f.add_node();
  auto id = submit_ram(f, "late", 1);
  auto o = f.log->starts.at(0);
  f.report("started", o);
  auto started = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).job.started_ms;
  REQUIRE(started > 0);
  // The job ran 8 s; its report reaches the coordinator 29 s after the start.
  live_for(f, std::chrono::seconds(29));
  auto reply = f.try_report("exited", o, 0, "", 8'000);
  REQUIRE(reply.has_value());
  auto shown = f.ok<bus::show_rep>("owner-token", bus::show_req{id});
  CHECK(shown.job.state == bus::job_state::succeeded);
  CHECK(shown.job.finished_ms == started + 8'000);
  REQUIRE(!shown.allocations.empty());
  CHECK(shown.allocations.back().finished_ms == started + 8'000);
  // A wall time longer than the coordinator has seen is not believed: the
  // end is never later than the report.
  auto id2 = submit_ram(f, "clock", 1);
  auto o2 = f.log->starts.at(1);
  f.report("started", o2);
  auto started2 = f.ok<bus::show_rep>("owner-token", bus::show_req{id2}).job.started_ms;
  live_for(f, std::chrono::seconds(5));
  REQUIRE(f.try_report("exited", o2, 0, "", 3'600'000).has_value());
  auto now2 = f.ok<bus::show_rep>("owner-token", bus::show_req{id2}).job.finished_ms;
  CHECK(now2 > started2);
  CHECK(now2 <= started2 + 10'000);
}
