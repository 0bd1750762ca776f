// Orders as state, one connection per node identity, answers from the right
// connection only, and reconciliation against heartbeats (issue 7 items 1,
// 2, 3, 7, 8 and 17), on the coordinator's real actors (see fixture.hpp).
#include "auth/auth.hpp"
#include "delayed.hpp"
#include "fixture.hpp"

namespace {

bus::allocation_info alloc_of(fixture& f, const std::string& job, std::size_t i = 0) {
  return f.ok<bus::show_rep>("owner-token", bus::show_req{job}).allocations.at(i);
}

bus::heartbeat_req beat(fixture& f, std::optional<std::string> daemon = {}) {
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, f.log->held};
  hb.daemon = std::move(daemon);
  return hb;
}

/// A node with one GPU lane; returns its heartbeat (for more of the same).
bus::heartbeat_req gpu_node(fixture& f) {
  f.add_node();
  auto hb = beat(f);
  hb.lanes = std::vector<bus::lane_info>{{"gpu0", 0, "GPU-0", 80ull << 30, 0, 0}};
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  return hb;
}

/// A one-GPU job with a RAM cap.
std::string submit_gpu_job(fixture& f) {
  bus::job_spec s;
  s.argv = {"train"};
  s.cwd = "/";
  s.gpus = 1;
  s.ram_bytes = 1ull << 30;
  return f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
}

void restart(fixture& f) {
  f.kill_coordinator();
  f.start();
}

} // namespace

TEST_CASE("a heartbeat that names a lane twice is refused and changes nothing") {
  fixture f;
  auto hb = gpu_node(f); // gpu0
  auto twice = hb;
  twice.lanes = std::vector<bus::lane_info>{{"gpu0", 0, "GPU-0", 80ull << 30, 0, 0},
                                            {"gpu1", 1, "GPU-1", 80ull << 30, 0, 0},
                                            {"gpu0", 2, "GPU-2", 80ull << 30, 0, 0}};
  auto r = f.call(f.node_token, twice);
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  auto& e = std::get<bus::error_info>(r.body);
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message == "lanes: lane 2 has the name of lane 0");
  auto nodes = f.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{}).nodes;
  REQUIRE(nodes.size() == 1);
  REQUIRE(nodes[0].lanes.size() == 1);
  CHECK(nodes[0].lanes[0].name == "gpu0");
  // The node still gets work on its one lane.
  auto job = submit_gpu_job(f);
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == job);
}

TEST_CASE("a second connection for a node is refused while the first one heartbeats") {
  fixture f;
  f.add_node();
  f.ok<bus::heartbeat_rep>(f.node_token, beat(f, "state-a"), "peer");
  auto other = f.call(f.node_token, beat(f, "state-b"), "copy");
  REQUIRE(std::holds_alternative<bus::error_info>(other.body));
  CHECK(std::get<bus::error_info>(other.body).code == errc::already_exists);
  // Work goes only to the first connection.
  f.submit({"true"});
  REQUIRE(f.log->sent.size() == 1);
  CHECK(f.log->sent[0].second == "peer");
  // The same daemon (same state dir id) restarted on a new connection takes over at once.
  f.ok<bus::heartbeat_rep>(f.node_token, beat(f, "state-a"), "peer-restarted");
  f.submit({"true"});
  CHECK(f.log->sent.back().second == "peer-restarted");
  // Once the live connection is stale, another one may speak for the node.
  f.advance(std::chrono::milliseconds(f.ctx->cfg.heartbeat_fresh_ms + 1));
  f.ok<bus::heartbeat_rep>(f.node_token, beat(f, "state-b"), "copy");
}

TEST_CASE("a start sent before the node connected goes out when it connects and is not given up") {
  fixture f;
  f.add_node();
  f.log->answers = false; // the node takes the order but the coordinator dies first
  auto id = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  restart(f);
  f.log->answers = true;
  // The restarted coordinator has no connection for the node yet: it waits.
  f.advance(std::chrono::seconds(10));
  CHECK(f.log->starts.size() == 1);
  f.heartbeat();
  REQUIRE(f.log->starts.size() == 2); // re-sent as soon as the node's connection speaks
  CHECK(f.log->starts[1].allocation == f.log->starts[0].allocation);
  CHECK(f.log->starts[1].argv == std::vector<std::string>{"true"});
  // The node took it: the start timeout no longer gives it up.
  f.advance(f.ctx->cfg.start_timeout);
  CHECK(f.show(id).state == "starting");
  f.report("started", f.log->starts[1]);
  f.report("exited", f.log->starts[1], 0);
  CHECK(f.show(id).state == "succeeded");
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations.size() == 1);
}

TEST_CASE("a stop is re-sent until the node takes it, and a cancelled start is never re-sent") {
  fixture f;
  f.add_node();
  f.log->reachable = false;
  auto id = f.submit({"sleep", "100"});
  CHECK(f.log->starts.empty()); // lost on the way
  auto r = f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  CHECK(r.job.state == "stopping");
  CHECK(alloc_of(f, id).stop_requested_ms != 0);
  f.advance(f.ctx->cfg.order_retry * 3);
  CHECK(f.log->stops.empty());
  // The node is back: the stop reaches it; the start is never sent again.
  f.log->reachable = true;
  f.advance_by_steps(f.ctx->cfg.order_timeout + 2 * f.ctx->cfg.order_retry,
                     std::chrono::milliseconds(500));
  REQUIRE(f.log->stops.size() == 1);
  CHECK(f.log->stops[0].allocation == alloc_of(f, id).id);
  CHECK(f.log->starts.empty());
  // The node reports it stopped before it started.
  bus::start_order o;
  o.allocation = alloc_of(f, id).id;
  o.job = id;
  f.report("exited", o, std::nullopt, "cancelled");
  CHECK(f.show(id).state == "cancelled");
  // Taken once, it is not sent again.
  f.advance(f.ctx->cfg.order_retry * 3);
  CHECK(f.log->stops.size() == 1);
}

TEST_CASE("a stopping job's stop is sent again after a coordinator restart, never its start") {
  fixture f;
  f.add_node();
  f.log->answers = false;
  auto id = f.submit({"sleep", "100"});
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  restart(f);
  f.log->answers = true;
  auto starts = f.log->starts.size();
  f.heartbeat();
  CHECK(f.log->starts.size() == starts);
  REQUIRE_FALSE(f.log->stops.empty());
  CHECK(f.log->stops.back().allocation == alloc_of(f, id).id);
}

TEST_CASE("an answer is accepted only from the connection its order went to") {
  fixture f;
  f.add_node();
  f.log->answers = false;
  auto id = f.submit({"true"});
  REQUIRE(f.log->sent.size() == 1);
  auto order_id = f.log->sent[0].first;
  // A second daemon authenticates (and is refused); its connection answers the order.
  f.call(f.node_token, beat(f, "other"), "copy");
  caf::anon_send(f.ctx->api, node_reply{"copy", order_id, order_reply{true, std::nullopt, {}}});
  // So does a connection that never authenticated, with every small id.
  for (std::uint64_t i = 0; i < 64; ++i)
    caf::anon_send(f.ctx->api, node_reply{"stranger", i, order_reply{true, std::nullopt, {}}});
  f.sched->run();
  // Neither counted: without the node's answer the start is fenced, and
  // lost once the job's lost-after has passed (its stop is never answered).
  f.advance(f.ctx->cfg.start_timeout);
  CHECK(alloc_of(f, id).stop_cause == "fence");
  CHECK(alloc_of(f, id).reason != "lost");
  f.advance(std::chrono::milliseconds(f.ctx->cfg.lost_after_ms + 1000));
  CHECK(alloc_of(f, id).reason == "lost");
}

TEST_CASE("order ids are random, so a reply cannot be aimed at a waiting order") {
  auto a = coord::new_order_id(), b = coord::new_order_id();
  CHECK(a != 0);
  CHECK(a != b);
  CHECK((a > 1'000'000 || b > 1'000'000));
}

TEST_CASE("an allocation the node's heartbeats stop listing becomes lost and its job is requeued") {
  fixture f;
  f.add_node();
  auto id = f.submit({"sleep", "100"});
  auto first = f.log->starts.at(0);
  f.report("started", first);
  f.heartbeat(); // lists it: nothing happens
  CHECK(f.show(id).state == "running");
  std::erase(f.log->held, first.allocation); // the node lost its state
  f.heartbeat();
  auto a = alloc_of(f, id, 0);
  CHECK(a.reason == "lost");
  CHECK(a.detail.find("no longer lists") != std::string::npos);
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].attempt == 2);
  CHECK(f.show(id).state == "starting");
}

TEST_CASE("a heartbeat sent before the node took a start does not make the allocation lost") {
  fixture f;
  f.add_node();
  f.log->answers = false; // the order is on its way: not yet taken
  auto id = f.submit({"true"});
  f.ok<bus::heartbeat_rep>(f.node_token, bus::heartbeat_req{16ull << 30, 15ull << 30, 4, {}});
  CHECK(f.show(id).state == "starting");
  CHECK(alloc_of(f, id).reason == bus::reason::none);
}

TEST_CASE("the exit of a GPU fault stop keeps the requeued job off the node until its heartbeat") {
  fixture f;
  auto hb = gpu_node(f);
  auto id = submit_gpu_job(f);
  auto order = f.log->starts.at(0);
  f.report("started", order);
  // The exit (requeue) arrives before the heartbeat that carries the fault.
  f.report("exited", order, std::nullopt, "fault");
  auto j = f.show(id);
  CHECK(j.state == "queued");
  CHECK(j.reason == bus::reason::none);
  CHECK(f.log->starts.size() == 1); // not placed on the faulted node again
  // The node's heartbeat carries the latched fault: still off.
  hb.fault = bus::fault_info{79, "PCI:0000:3b:00", "Xid 79", 1};
  hb.allocations = f.log->held;
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  CHECK(f.log->starts.size() == 1);
  // Cleared: placed again, attempt 2.
  hb.fault.reset();
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].attempt == 2);
}

TEST_CASE("a launch the node refuses for its own reasons requeues the job instead of failing it") {
  fixture f;
  auto hb = gpu_node(f);
  auto id = submit_gpu_job(f);
  auto order = f.log->starts.at(0);
  f.report("exited", order, 125, "refused");
  CHECK(f.show(id).state == "queued");
  CHECK(alloc_of(f, id).reason == "refused");
  CHECK(f.log->starts.size() == 1); // blocked until the node's next heartbeat
  hb.allocations = f.log->held;
  f.ok<bus::heartbeat_rep>(f.node_token, hb);
  REQUIRE(f.log->starts.size() == 2);
  f.report("started", f.log->starts[1]);
  f.report("exited", f.log->starts[1], 0);
  CHECK(f.show(id).state == "succeeded");
}

TEST_CASE("a start a node's crash cut short before its record was durable, ended refused after "
          "its restart (the report names no job), starts the job again, even with --no-requeue") {
  fixture f;
  f.add_node();
  bus::job_spec spec;
  spec.argv = {"true"};
  spec.cwd = "/";
  spec.no_requeue = true;
  auto id = f.ok<bus::submit_rep>("owner-token", bus::submit_req{spec}).job.id;
  REQUIRE(f.log->starts.size() == 1);
  // What cq-node's recovery sends for it (node/actors/recovery.cpp).
  auto order = f.log->starts[0];
  order.job.clear();
  f.report("exited", order, {}, "refused");
  // Requeued and placed again at once (the node has room), not failed.
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].attempt == 2);
  CHECK(f.show(id).state == "starting");
  CHECK(alloc_of(f, id, 0).reason == "refused");
  f.report("started", f.log->starts[1]);
  f.report("exited", f.log->starts[1], 0);
  CHECK(f.show(id).state == "succeeded");
}

TEST_CASE("a job's effective RAM is its cap in the start order, however it was derived") {
  fixture f;
  f.add_node();
  f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  REQUIRE(f.log->starts[0].ram_bytes);
  CHECK(*f.log->starts[0].ram_bytes == f.ctx->cfg.default_ram_bytes);
}

TEST_CASE("re-inviting a joined node is refused unless the Owner replaces it") {
  fixture f;
  f.add_node();
  auto again = f.call("owner-token", bus::node_invite_req{"box", {}});
  REQUIRE(std::holds_alternative<bus::error_info>(again.body));
  CHECK(std::get<bus::error_info>(again.body).code == errc::already_exists);
  auto inv = f.ok<bus::node_invite_rep>("owner-token", bus::node_invite_req{"box", true});
  // The old token is revoked at once, and the node needs approval again.
  auto old = f.call(f.node_token, bus::heartbeat_req{1, 1, 1, {}});
  CHECK(std::get<bus::error_info>(old.body).code == errc::unauthenticated);
  auto nodes = f.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{}).nodes;
  CHECK(nodes.at(0).state == "pending");
  auto old_token = f.node_token;
  auto token = f.ok<bus::node_join_rep>("", bus::node_join_req{"box", inv.code}).token;
  f.node_token = token;
  CHECK_FALSE(f.ok<bus::heartbeat_rep>(token, beat(f), "new-daemon").approved);
  // Revocation is durable.
  restart(f);
  auto after = f.call(old_token, bus::heartbeat_req{1, 1, 1, {}}, "old-daemon");
  CHECK(std::get<bus::error_info>(after.body).code == errc::unauthenticated);
  f.ok<bus::heartbeat_rep>(token, beat(f), "new-daemon");
}

TEST_CASE("a heartbeat the node built before it took a start never makes the allocation lost, "
          "whatever order they arrive in") {
  fixture f;
  f.add_node();
  auto clocked = [&](std::uint64_t n, std::vector<std::string> allocs) {
    auto hb = beat(f, std::string("daemon-1"));
    hb.allocations = std::move(allocs);
    hb.boot_ms = 1000;
    hb.beat = n;
    return hb;
  };
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(5, {}));
  // The node sends heartbeat 6, then takes the start (its ack says so); the
  // heartbeat arrives after the ack.
  f.log->ack_at = node_clock{1000, 6};
  auto id = f.submit({"train"});
  REQUIRE(f.log->starts.size() == 1);
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(6, {}));
  CHECK(f.show(id).state == job_state::starting);
  // A duplicate of an older heartbeat changes nothing either.
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(5, {}));
  CHECK(f.show(id).state == job_state::starting);
  CHECK(f.log->starts.size() == 1);
  // Heartbeat 7 was built after the node took the start: not listing it
  // means the node lost it, and the job is placed again.
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(7, {}));
  CHECK(alloc_of(f, id, 0).reason == "lost");
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].allocation != f.log->starts[0].allocation);
}

TEST_CASE("a late heartbeat of a node's old connection does not take its orders back") {
  fixture f;
  f.add_node();
  auto clocked = [&](std::uint64_t n) {
    auto hb = beat(f, std::string("daemon-1"));
    hb.boot_ms = 1000;
    hb.beat = n;
    return hb;
  };
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(5), "peer"); // the connection of add_node()
  // The node reconnects; its new connection speaks first...
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(6), "new");
  // ...then a heartbeat the old connection still carried is drained.
  f.ok<bus::heartbeat_rep>(f.node_token, clocked(5), "peer");
  f.submit({"train"});
  REQUIRE(f.log->sent.size() == 1);
  CHECK(f.log->sent[0].second == "new");
}

TEST_CASE("a start re-sent on the node's new connection is not given up before that connection "
          "had the whole start timeout") {
  // cq-sim seed 204566: the start was re-sent on a reconnect 9 ms before the
  // timeout counted from the placement; the job was placed again and the
  // re-sent order started it a second time.
  fixture f;
  f.add_node();
  f.log->answers = false; // the orders arrive; no answer comes back
  auto id = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  f.advance(f.ctx->cfg.start_timeout - std::chrono::seconds(1));
  f.heartbeat("peer2"); // the node reconnects: the start goes out again there
  REQUIRE(!f.log->sent.empty());
  CHECK(f.log->sent.back().second == "peer2");
  f.advance(std::chrono::seconds(2));
  CHECK(f.show(id).state == "starting");
  CHECK(alloc_of(f, id).reason != "lost");
  // Unanswered on the new connection too, it is fenced at that one's deadline.
  f.advance(f.ctx->cfg.start_timeout);
  CHECK(alloc_of(f, id).stop_cause == "fence");
  CHECK(alloc_of(f, id).state == alloc_state::unknown);
}

TEST_CASE("a fenced start the node launched late is placed again only after the node reports its "
          "exit") {
  // Issue 17: the node daemon was paused with the start order in its socket;
  // resumed after the start timeout, it launched the start, took the stop
  // behind it, and the coordinator placed the next attempt on it while the
  // first was still being killed.
  fixture f;
  f.add_node();
  f.log->answers = false; // the node is paused: orders wait, no answer comes back
  auto id = f.submit({"train"});
  REQUIRE(!f.log->starts.empty());
  auto first = f.log->starts[0];
  f.advance(f.ctx->cfg.start_timeout);
  CHECK(alloc_of(f, id).stop_cause == "fence");
  // Resumed: it takes the stop (and runs the first attempt until it is killed).
  f.log->answers = true;
  f.advance_by_steps(f.ctx->cfg.order_timeout + 2 * f.ctx->cfg.order_retry,
                     std::chrono::milliseconds(500));
  REQUIRE(!f.log->stops.empty());
  CHECK(f.log->stops.back().allocation == first.allocation);
  auto other_starts = [&] {
    return std::count_if(f.log->starts.begin(), f.log->starts.end(),
                         [&](auto& o) { return o.allocation != first.allocation; });
  };
  for (int i = 0; i < 5; ++i) {
    f.heartbeat();
    f.advance(std::chrono::seconds(1));
  }
  CHECK(other_starts() == 0);
  CHECK(f.show(id).state == "starting");
  // Its cleanup ended: the node reports the exit, and only then is the job
  // placed again.
  f.report("started", first);
  f.report("exited", first, std::nullopt, "cancelled");
  f.heartbeat();
  REQUIRE(other_starts() == 1);
  CHECK(f.log->starts.back().attempt == 2);
  auto allocs = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations;
  REQUIRE(allocs.size() == 2);
  for (auto& a : allocs) // the fenced one ended; the second is the live one
    CHECK(a.state ==
          (a.id == first.allocation ? bus::alloc_state::finished : bus::alloc_state::starting));
}

TEST_CASE("a start order expires when it would be fenced, stated on the node's clock") {
  fixture f;
  f.add_node();
  // The node's clock runs an hour ahead of the coordinator's.
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, {}};
  auto coordinator_now = f.ctx->epoch_ms + std::chrono::duration_cast<std::chrono::milliseconds>(
                                               f.sched->clock().now() - f.ctx->steady)
                                               .count();
  hb.wall_ms = coordinator_now + 3'600'000;
  f.ok<bus::heartbeat_rep>(f.node_token, hb, "peer");
  f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  REQUIRE(f.log->starts[0].expires_ms.has_value());
  CHECK(*f.log->starts[0].expires_ms == *hb.wall_ms + f.ctx->cfg.start_timeout.count());
}

TEST_CASE("an allocation that ended is not held for its start deadline") {
  // Its start deadline (start_timeout, 30 s) comes through the node actor:
  // no delayed message names the allocation actor, so it is freed when it
  // ends, not 30 s after its start. A drain of thousands of jobs held every
  // ended allocation's memory that long (docs/adr/0070).
  fixture f;
  f.add_node();
  auto id = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  f.report("started", f.log->starts[0]);
  f.report("exited", f.log->starts[0], 0);
  REQUIRE(f.show(id).state == "succeeded");
  int deadlines = 0; // still pending, at the node actor
  for (auto& m : test::delayed_messages(*f.sched)) {
    CHECK(m.receiver != "cq.allocation");
    CHECK(m.sender != "cq.allocation");
    deadlines += m.content && m.content->content().match_elements<timeout_atom, std::string>();
  }
  CHECK(deadlines == 1);
  // And the deadline still gives up a start that no connection took.
  f.log->answers = false;
  auto second = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 2);
  f.advance(f.ctx->cfg.start_timeout);
  CHECK(alloc_of(f, second).stop_cause == "fence");
}
