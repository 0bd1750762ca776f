// Holds (Attention) and the kernel fault latch, as the coordinator honours
// them (SPEC section 5), on the real actors (see fixture.hpp).
#include "fixture.hpp"

#include <fmt/format.h>

namespace {

bus::heartbeat_req beat_with(std::vector<bus::hold_info> holds,
                             std::optional<bus::fault_info> fault, int lanes = 2) {
  bus::heartbeat_req hb{16ull << 30, 15ull << 30, 4, {}};
  std::vector<bus::lane_info> ls;
  for (int i = 0; i < lanes; ++i)
    ls.push_back({"gpu" + std::to_string(i), i, "GPU-" + std::to_string(i), 80ull << 30, 0, 0});
  hb.lanes = ls;
  hb.holds = std::move(holds);
  hb.fault = std::move(fault);
  return hb;
}

std::string submit_job(fixture& f, std::uint64_t gpus) {
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 30;
  if (gpus)
    s.gpus = gpus;
  return f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
}

} // namespace

TEST_CASE("a node in a hold gets no work until that exact hold is released") {
  fixture f;
  f.add_node();
  bus::hold_info h{"hold-1", "", "alloc-x", "pid 42 survived cleanup", 1};
  f.ok<bus::heartbeat_rep>(f.node_token, beat_with({h}, std::nullopt));
  auto id = submit_job(f, 0);
  CHECK(f.log->starts.empty());
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).waiting;
  REQUIRE_FALSE(why.empty());
  // Which hold, and the command that ends it.
  CHECK(why[0].find("in hold hold-1") != std::string::npos);
  CHECK(why[0].find("cq release --hold hold-1") != std::string::npos);
  auto stale = f.call("owner-token", bus::release_req{"hold-0"});
  REQUIRE(std::holds_alternative<bus::error_info>(stale.body));
  CHECK(std::get<bus::error_info>(stale.body).code == errc::not_found);
  CHECK(f.log->releases.empty());
  f.ok<bus::node_rep>("owner-token", bus::release_req{"hold-1"});
  REQUIRE(f.log->releases == std::vector<std::string>{"hold-1"});
  // Released: the job is placed without waiting for the next heartbeat.
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == id);
}

TEST_CASE("a held lane is skipped while the node's other lanes keep serving") {
  fixture f;
  f.add_node();
  bus::hold_info h{"hold-2", "gpu0", "alloc-y", "unreadable process", 1};
  f.ok<bus::heartbeat_rep>(f.node_token, beat_with({h}, std::nullopt));
  submit_job(f, 1);
  REQUIRE(f.log->starts.size() == 1);
  REQUIRE(f.log->starts[0].lanes);
  CHECK(*f.log->starts[0].lanes == std::vector<std::string>{"gpu1"});
  auto waits = submit_job(f, 1); // the only free lane is taken, gpu0 is held
  CHECK(f.log->starts.size() == 1);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{waits}).waiting;
  REQUIRE_FALSE(why.empty());
  auto lines = fmt::format("{}", fmt::join(why, "\n"));
  INFO(lines);
  CHECK(lines.find("gpu0 is in hold hold-2") != std::string::npos);
  CHECK(lines.find("cq release --hold hold-2") != std::string::npos);
}

TEST_CASE("a latched GPU fault stops GPU placements but not CPU ones") {
  fixture f;
  f.add_node();
  bus::fault_info fault{79, "PCI:0000:3b:00",
                        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", 1};
  f.ok<bus::heartbeat_rep>(f.node_token, beat_with({}, fault));
  auto gpu = submit_job(f, 1);
  CHECK(f.log->starts.empty());
  auto cpu = submit_job(f, 0);
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == cpu);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{gpu}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].find("fault") != std::string::npos);
}

TEST_CASE("only the Owner clears a fault, with a reason, and it is audited") {
  fixture f;
  f.add_node();
  bus::fault_info fault{48, "PCI:0000:3b:00", "NVRM: Xid 48: DBE", 1};
  f.ok<bus::heartbeat_rep>(f.node_token, beat_with({}, fault));
  auto by_node = f.call(f.node_token, bus::node_clear_fault_req{"box", "checked"});
  CHECK(std::get<bus::error_info>(by_node.body).code == errc::permission_denied);
  auto no_reason = f.call("owner-token", bus::node_clear_fault_req{"box", ""});
  CHECK(std::get<bus::error_info>(no_reason.body).code == errc::invalid_argument);
  CHECK(f.log->clears.empty());
  auto r =
      f.ok<bus::node_rep>("owner-token", bus::node_clear_fault_req{"box", "reseated the card"});
  CHECK_FALSE(r.node.fault);
  REQUIRE(f.log->clears == std::vector<std::string>{"reseated the card"});
  auto again = f.call("owner-token", bus::node_clear_fault_req{"box", "again"});
  CHECK(std::get<bus::error_info>(again.body).code == errc::invalid_state);
  auto gpu = submit_job(f, 1);
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == gpu);
}

TEST_CASE("an out-of-memory exit fails the job with reason oom and feeds its profile") {
  fixture f;
  f.add_node();
  bus::job_spec s;
  s.argv = {"hungry"};
  s.cwd = "/";
  s.ram_bytes = 128ull << 20;
  auto id = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
  auto order = f.log->starts.at(0);
  f.report("started", order);
  bus::report_req r;
  r.seq = 1000;
  r.kind = "exited";
  r.allocation = order.allocation;
  r.job = id;
  r.signal = 9;
  r.reason = bus::reason::oom;
  r.peak_ram_bytes = 128ull << 20;
  r.wall_ms = 900;
  f.ok<bus::report_rep>(f.node_token, r);
  auto j = f.show(id);
  CHECK(j.state == "failed");
  CHECK(j.reason == "oom");
  auto profiles = f.ok<bus::profile_ls_rep>("owner-token", bus::profile_ls_req{}).profiles;
  REQUIRE(profiles.size() == 1);
  CHECK(profiles[0].key == "hungry");
  CHECK(profiles[0].peak_ram_bytes == 128ull << 20);
  // The next run of the same command without --ram is sized from it.
  bus::job_spec again;
  again.argv = {"hungry"};
  again.cwd = "/";
  auto next = f.ok<bus::submit_rep>("owner-token", bus::submit_req{again}).job;
  CHECK(next.effective_ram_bytes == 192ull << 20); // 128 MiB x 1.25, in 64 MiB steps
}

TEST_CASE("a GPU fault stop requeues the job instead of failing it") {
  fixture f;
  f.add_node();
  f.ok<bus::heartbeat_rep>(f.node_token, beat_with({}, std::nullopt));
  auto id = submit_job(f, 1);
  auto order = f.log->starts.at(0);
  f.report("started", order);
  bus::report_req r;
  r.seq = 2000;
  r.kind = "exited";
  r.allocation = order.allocation;
  r.job = id;
  r.signal = 15;
  r.reason = bus::reason::fault;
  f.ok<bus::report_rep>(f.node_token, r);
  auto j = f.show(id);
  CHECK(j.state == "queued");
  CHECK(j.reason == bus::reason::none);
  CHECK(j.attempt == 1);
  auto allocs = f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations;
  REQUIRE(allocs.size() == 1);
  CHECK(allocs[0].reason == "fault");
  CHECK(allocs[0].state == "finished");
}

TEST_CASE("a checkpointed exit requeues the job and its next start resumes, across a restart") {
  fixture f;
  f.add_node();
  bus::job_spec s;
  s.argv = {"train"};
  s.cwd = "/";
  s.preempt = "checkpoint";
  auto id = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
  auto order = f.log->starts.at(0);
  CHECK_FALSE(order.resume.value_or(false));
  f.report("started", order);
  // The coordinator asks it to yield; the request is durable and reaches the node.
  caf::anon_send(f.ctx->api, yield_atom::value, id, std::string("test"));
  f.sched->run();
  REQUIRE(f.log->yields == std::vector<std::string>{order.allocation});
  auto shown = f.ok<bus::show_rep>("owner-token", bus::show_req{id});
  CHECK(shown.allocations.at(0).yield_requested_ms != 0);
  bus::report_req r;
  r.seq = 3000;
  r.kind = "exited";
  r.allocation = order.allocation;
  r.job = id;
  r.exit_code = 6;
  r.reason = bus::reason::checkpointed;
  // Kill the coordinator before the next placement, so the flag must come
  // back from the store: the node's report is committed first.
  f.ok<bus::report_rep>(f.node_token, r);
  REQUIRE(f.log->starts.size() == 2); // placed again at once
  CHECK(f.log->starts[1].resume.value_or(false));
  f.kill_coordinator();
  f.start();
  // The second start was not confirmed before the restart: it is sent again as
  // soon as the node's connection speaks, and still resumes.
  f.heartbeat();
  REQUIRE(f.log->starts.size() == 3);
  CHECK(f.log->starts[2].allocation == f.log->starts[1].allocation);
  CHECK(f.log->starts[2].resume.value_or(false));
}

TEST_CASE("exit 6 without a yield request is an ordinary failure, whoever made the yield file") {
  fixture f;
  f.add_node();
  bus::job_spec s;
  s.argv = {"sh", "-c", ": > \"$CQ_YIELD_FILE\"; exit 6"};
  s.cwd = "/";
  s.preempt = "checkpoint";
  auto id = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
  auto order = f.log->starts.at(0);
  f.report("started", order);
  // The node saw exit 6 with the yield file present and says checkpointed.
  f.report("exited", order, 6, "checkpointed");
  auto j = f.show(id);
  CHECK(j.state == "failed");
  CHECK(j.reason == "exit_code");
  CHECK(j.exit_code == 6);
  CHECK(f.log->starts.size() == 1); // not requeued
}

TEST_CASE("a job whose RAM floor can never be met leaves an idle node to a job that fits") {
  fixture f;
  f.add_node(); // 16 GiB total
  bus::job_spec never;
  never.argv = {"never"};
  never.cwd = "/";
  never.ram_bytes = 1ull << 30;
  never.ram_floor_bytes = 30ull << 30;
  // Held for a node: submit refuses a job no node could ever run.
  auto a = f.ok<bus::submit_rep>("owner-token", bus::submit_req{never, {}, true}).job.id;
  bus::job_spec big;
  big.argv = {"big"};
  big.cwd = "/";
  big.ram_bytes = 15ull << 30; // needs nearly the whole node: any reservation would block it
  auto b = f.ok<bus::submit_rep>("owner-token", bus::submit_req{big}).job.id;
  REQUIRE(f.log->starts.size() == 1);
  CHECK(f.log->starts[0].job == b);
  auto why = f.ok<bus::show_rep>("owner-token", bus::show_req{a}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].find("can never fit") != std::string::npos);
  CHECK(why[0].find("30.0 GiB RAM floor") != std::string::npos);
}

TEST_CASE("job names are checked and a name derived from the command is made safe") {
  fixture f;
  bus::job_spec s;
  s.argv = {"/opt/tools/\x1b[31mred\nname"};
  s.cwd = "/";
  auto j = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job;
  CHECK(j.name == "__31mred_name");
  s.name = "bad\nname";
  auto r = f.call("owner-token", bus::submit_req{s});
  REQUIRE(std::holds_alternative<bus::error_info>(r.body));
  CHECK(std::get<bus::error_info>(r.body).message.rfind("name:", 0) == 0);
}

namespace {

std::vector<std::string> hold_events(fixture& f, const std::string& job) {
  std::vector<std::string> out;
  for (auto& e : f.ok<bus::events_rep>("owner-token", bus::events_req{{job}}).events)
    if (e.kind == "held" || e.kind == "released")
      out.push_back(e.kind + " " + e.detail.substr(5, e.detail.find(' ', 5) - 5)); // "hold ID ..."
  return out;
}

} // namespace

TEST_CASE("a hold is an event of its allocation's job, once, across restarts, and its release") {
  fixture f;
  f.add_node();
  // Heartbeats with two lanes that list what the node holds.
  auto beat = [&](std::vector<bus::hold_info> holds) {
    auto hb = beat_with(std::move(holds), std::nullopt);
    hb.allocations = f.log->held;
    f.ok<bus::heartbeat_rep>(f.node_token, hb);
  };
  beat({});
  auto id = submit_job(f, 1);
  REQUIRE(f.log->starts.size() == 1);
  auto order = f.log->starts[0];
  f.report("started", order);
  // While the job runs, the hold goes through its job actor.
  bus::hold_info h{"hold-7", "gpu0", order.allocation, "pid 4242 outlived cleanup", 5};
  beat({h});
  CHECK(hold_events(f, id) == std::vector<std::string>{"held hold-7"});
  // The job ends; the hold stays: no second event, not after a restart either.
  f.report("exited", order, 0);
  CHECK(f.show(id).state == "succeeded");
  beat({h});
  f.kill_coordinator();
  f.start();
  beat({h});
  CHECK(hold_events(f, id) == std::vector<std::string>{"held hold-7"});
  // A person releases it: the terminal job's stream records it (the api
  // writes it, with the next seq).
  f.ok<bus::node_rep>("owner-token", bus::release_req{"hold-7"});
  beat({});
  CHECK(hold_events(f, id) == std::vector<std::string>{"held hold-7", "released hold-7"});
  auto evs = f.ok<bus::events_rep>("owner-token", bus::events_req{{id}}).events;
  for (std::size_t i = 0; i < evs.size(); ++i)
    CHECK(evs[i].seq == i + 1);
}
