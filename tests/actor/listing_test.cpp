// The rows listing (ls_req::rows, docs/adr/0030): the coordinator orders,
// filters, folds and pages the rows cq ls draws; and a queued job that waits
// without an actor still starts, cancels and moves (see fixture.hpp).
#include "fixture.hpp"

namespace {

constexpr auto array_id = "5c0ffee0-1d2e-4a3b-8c4d-0e1f2a3b4c5d";

/// A spec no node can take (a 1 TiB cap): it stays queued.
bus::job_spec too_big(std::string name, std::optional<std::string> priority = {}) {
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.name = std::move(name);
  s.ram_bytes = 1ull << 40;
  s.priority = std::move(priority);
  return s;
}

/// Submits `argv` and lets it start and exit with `code` on the fixture's node.
std::string finished(fixture& f, std::vector<std::string> argv, std::int64_t code) {
  auto before = f.log->starts.size();
  auto id = f.submit(std::move(argv));
  REQUIRE(f.log->starts.size() == before + 1);
  f.report("started", f.log->starts.back());
  f.report("exited", f.log->starts.back(), code);
  return id;
}

/// The allocations the node was told to start for job `id`.
bus::string_list allocations_of(fixture& f, const std::string& id) {
  bus::string_list out;
  for (auto& s : f.log->starts)
    if (s.job == id)
      out.push_back(s.allocation);
  return out;
}

bus::ls_rep rows(fixture& f, bus::ls_req q) {
  q.rows = true;
  return f.ok<bus::ls_rep>("owner-token", q);
}

std::vector<std::string> row_ids(const bus::ls_rep& rep) {
  std::vector<std::string> out;
  for (auto& r : rep.rows.value())
    out.push_back(r.job ? r.job->id : "array " + r.array->array);
  return out;
}

} // namespace

TEST_CASE("rows: running first, queued by level and position, an array folded, finished newest "
          "first; paged and filtered by the coordinator") {
  fixture f;
  f.add_node();
  auto a = finished(f, {"true"}, 0);
  f.advance(std::chrono::seconds(1));
  auto b = f.submit({"sleep", "60"});
  REQUIRE(f.log->starts.size() == 2);
  f.report("started", f.log->starts[1]);
  // --hold-for-node: queued although no node has the RAM.
  auto c = f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("c"), {}, true}).job.id;
  auto d =
      f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("d", "high"), {}, true}).job.id;
  bus::submit_req arr{too_big("sweep"), std::string(array_id), true};
  arr.array_indexes = std::vector<std::uint64_t>{0, 1, 2};
  f.ok<bus::submit_rep>("owner-token", arr);
  f.advance(std::chrono::seconds(1));
  auto e = f.submit({"false"});
  REQUIRE(f.log->starts.size() == 3);
  f.report("started", f.log->starts[2]);
  f.report("exited", f.log->starts[2], 1);

  bus::ls_req all{true};
  auto rep = rows(f, all);
  auto want = std::vector<std::string>{b, d, c, std::string("array ") + array_id, e, a};
  CHECK(row_ids(rep) == want);
  CHECK(rep.total_rows == 6u);
  CHECK(rep.total == 8u);
  CHECK(rep.jobs.empty());
  auto& folded = *rep.rows->at(3).array;
  CHECK(folded.tasks == 3u);
  CHECK(folded.queued == 3u);
  CHECK(folded.name == "sweep");
  CHECK(rep.rows->at(1).job->position == 1u); // d: first of the high level
  CHECK(rep.rows->at(2).job->position == 1u); // c: first of medium
  CHECK(rep.rows->at(1).job->priority == "high");
  CHECK_FALSE(rep.rows->at(2).job->priority.has_value()); // medium is the default

  // Pages of two rows, continued by cursor.
  bus::ls_req page{true, std::uint64_t{2}};
  auto p1 = rows(f, page);
  CHECK(row_ids(p1) == std::vector<std::string>{b, d});
  REQUIRE(p1.next_cursor);
  page.cursor = p1.next_cursor;
  auto p2 = rows(f, page);
  CHECK(row_ids(p2) == std::vector<std::string>{c, std::string("array ") + array_id});

  // Without --all, no finished rows; filters are the coordinator's.
  CHECK(row_ids(rows(f, bus::ls_req{})) ==
        std::vector<std::string>{b, d, c, std::string("array ") + array_id});
  bus::ls_req failed{true};
  failed.states = bus::string_list{"failed"};
  CHECK(row_ids(rows(f, failed)) == std::vector<std::string>{e});
  bus::ls_req named{true};
  named.name_pattern = "sweep-*";
  named.expand = true;
  CHECK(rows(f, named).rows->size() == 3);
  bus::ls_req bad{true};
  bad.rows = true;
  bad.states = bus::string_list{"asleep"};
  auto refused = f.call("owner-token", bad);
  REQUIRE(std::holds_alternative<bus::error_info>(refused.body));
  CHECK(std::get<bus::error_info>(refused.body).message.find("asleep") != std::string::npos);

  // A plain listing (jobs, not rows) is filtered by the coordinator too, its
  // total counting the jobs that pass; and a bad state is refused the same.
  auto ids_of = [](const bus::ls_rep& rep) {
    std::vector<std::string> out;
    for (auto& j : rep.jobs)
      out.push_back(j.id);
    return out;
  };
  auto plain = f.ok<bus::ls_rep>("owner-token", failed);
  CHECK(ids_of(plain) == std::vector<std::string>{e});
  CHECK(plain.total == 1u);
  bus::ls_req sweeps{true};
  sweeps.name_pattern = "sweep-*";
  sweeps.mine = true;
  sweeps.limit = 2;
  auto s1 = f.ok<bus::ls_rep>("owner-token", sweeps);
  CHECK(s1.jobs.size() == 2);
  CHECK(s1.total == 3u);
  REQUIRE(s1.next_cursor);
  sweeps.cursor = s1.next_cursor;
  auto s2 = f.ok<bus::ls_rep>("owner-token", sweeps);
  REQUIRE(s2.jobs.size() == 1);
  CHECK(s2.jobs[0].name == "sweep-2");
  CHECK_FALSE(s2.next_cursor);
  bus::ls_req theirs{true};
  theirs.owner = "someone-else";
  auto none = f.ok<bus::ls_rep>("owner-token", theirs);
  CHECK(none.jobs.empty());
  CHECK(none.total == 0u);
  bad.rows.reset();
  refused = f.call("owner-token", bad);
  REQUIRE(std::holds_alternative<bus::error_info>(refused.body));
  CHECK(std::get<bus::error_info>(refused.body).message.find("asleep") != std::string::npos);

  // A page of at most 0 jobs is refused, in each form (an array's page read
  // before the start of its tasks, a plain one before the first job's seq).
  for (int form = 0; form < 3; ++form) {
    bus::ls_req zero{true, std::uint64_t{0}};
    if (form == 1)
      zero.array = array_id;
    if (form == 2)
      zero.rows = true;
    auto r = f.call("owner-token", zero);
    REQUIRE(std::holds_alternative<bus::error_info>(r.body));
    CHECK(std::get<bus::error_info>(r.body).code == errc::invalid_argument);
    CHECK(std::get<bus::error_info>(r.body).message.starts_with("limit:"));
  }
}

TEST_CASE("a queued job waits without an actor until it is placed or acted on, across a "
          "restart") {
  fixture f;
  auto base = f.sys->registry().running();
  std::vector<std::string> ids;
  for (int i = 0; i < 50; ++i)
    ids.push_back(f.submit({"true"}));
  // No node: fifty queued jobs, and no actor for any of them.
  CHECK(f.sys->registry().running() == base);
  // Acted on: a hold spawns the one job's actor; a move of another needs none.
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{ids[0]});
  CHECK(f.sys->registry().running() == base + 1);
  bus::move_req m;
  m.job = ids[49];
  m.placement = "front";
  f.ok<bus::move_rep>("owner-token", m);
  CHECK(f.sys->registry().running() == base + 1);
  // A cancel ends its job (and the actor spawned for it).
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{ids[1]});
  CHECK(f.sys->registry().running() == base + 1);
  // Across a restart the queued ones still wait without actors.
  f.kill_coordinator();
  f.start();
  base = f.sys->registry().running();
  // A node joins: the moved job starts first, through the api.
  f.add_node();
  REQUIRE_FALSE(f.log->starts.empty());
  CHECK(f.log->starts.front().job == ids[49]);
  CHECK(f.sys->registry().running() > base);
  f.report("started", f.log->starts.front());
  f.report("exited", f.log->starts.front(), 0);
  CHECK(f.show(ids[49]).state == bus::job_state::succeeded);
  CHECK(f.show(ids[0]).state == bus::job_state::queued); // still held
}

TEST_CASE("a finished job is forgotten after the history window, in the store and in memory; a "
          "job after it still starts") {
  fixture f;
  f.add_node();
  auto a = f.submit({"true"});
  REQUIRE(f.log->starts.size() == 1);
  bus::job_spec after_a;
  after_a.argv = {"true"};
  after_a.cwd = "/";
  after_a.after = bus::string_list{a};
  auto b = f.ok<bus::submit_rep>("owner-token", bus::submit_req{after_a}).job.id;
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{b});
  f.report("started", f.log->starts[0]);
  f.report("exited", f.log->starts[0], 0);
  REQUIRE(f.show(a).state == bus::job_state::succeeded);
  // Within the window (30 days by default) it stays.
  f.advance(std::chrono::hours(24 * 29));
  f.heartbeat();
  CHECK(f.show(a).state == bus::job_state::succeeded);
  // Past the window and its slack (a 24th of it), it is gone everywhere.
  f.advance(std::chrono::hours(24 * 3));
  f.heartbeat();
  auto gone = f.call("owner-token", bus::show_req{a});
  REQUIRE(std::holds_alternative<bus::error_info>(gone.body));
  CHECK(std::get<bus::error_info>(gone.body).code == errc::not_found);
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
  auto snap = f.db->load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).id == b);
  for (auto& al : snap.allocations)
    CHECK(al.job != a);
  // Its dependent, released (also after a restart), starts: a dependency no
  // longer known ended before the window, so it had succeeded.
  f.kill_coordinator();
  f.start();
  f.heartbeat();
  f.ok<bus::job_hold_rep>("owner-token", bus::job_hold_req{b, true});
  REQUIRE(f.log->starts.size() == 2);
  CHECK(f.log->starts[1].job == b);
}

TEST_CASE("cq clean forgets finished jobs now, in the store and in memory; --older-than keeps "
          "the recent ones and live jobs stay") {
  fixture f;
  f.add_node();
  auto a = finished(f, {"true"}, 0);
  REQUIRE(f.show(a).state == bus::job_state::succeeded);
  f.advance(std::chrono::hours(2));
  f.heartbeat();
  auto b = finished(f, {"true"}, 1);
  REQUIRE(f.show(b).state == bus::job_state::failed);
  auto c = f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("held"), {}, true}).job.id;
  f.advance(std::chrono::minutes(1));
  f.heartbeat();
  // Older than an hour: only the first.
  auto one = f.ok<bus::clean_rep>("owner-token", bus::clean_req{3'600'000});
  CHECK(one.forgotten == 1);
  // Its node is told to remove its directories now (ADR 0072).
  REQUIRE(f.log->forgets.size() == 1);
  CHECK(f.log->forgets[0].jobs == bus::string_list{a});
  CHECK(f.log->forgets[0].allocations == allocations_of(f, a));
  auto gone = f.call("owner-token", bus::show_req{a});
  REQUIRE(std::holds_alternative<bus::error_info>(gone.body));
  CHECK(std::get<bus::error_info>(gone.body).code == errc::not_found);
  CHECK(f.show(b).state == bus::job_state::failed);
  // Every finished job: the second; the queued one stays.
  auto rest = f.ok<bus::clean_rep>("owner-token", bus::clean_req{});
  CHECK(rest.forgotten == 1);
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
  auto snap = f.db->load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.info(0).id == c);
  for (auto& al : snap.allocations)
    CHECK((al.job != a && al.job != b));
  // Nothing left to forget; and after a restart the store agrees.
  CHECK(f.ok<bus::clean_rep>("owner-token", bus::clean_req{}).forgotten == 0);
  f.kill_coordinator();
  f.start();
  CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
}

/// Whether job `id` is no longer known (show says not found).
bool forgotten(fixture& f, const std::string& id) {
  auto r = f.call("owner-token", bus::show_req{id});
  auto* e = std::get_if<bus::error_info>(&r.body);
  return e && e->code == errc::not_found;
}

TEST_CASE("at most [retention] history_jobs finished jobs are kept, the oldest to end going "
          "first, in the store and in memory; live jobs stay, and a smaller bound applies at "
          "start (ADR 0071)") {
  fixture f;
  f.restart_with([](actors::config& c) { c.history_jobs = 3; });
  f.add_node();
  auto held = f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("held"), {}, true});
  // Three end in one millisecond (taken in submission order), three later.
  std::vector<std::string> done;
  for (int i = 0; i < 6; ++i) {
    if (i >= 3)
      f.advance(std::chrono::milliseconds(10));
    done.push_back(finished(f, {"true"}, i % 2));
    INFO(i);
    CHECK(f.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() ==
          1 + std::min<std::size_t>(done.size(), 3));
  }
  for (int i = 0; i < 6; ++i) {
    INFO(i);
    CHECK(forgotten(f, done[i]) == (i < 3));
  }
  // Whoever asks for a job not known (by a whole id) is told how much
  // history is kept.
  auto asked = f.call("owner-token", bus::show_req{"0e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b"});
  CHECK_THAT(std::get<bus::error_info>(asked.body).message,
             Catch::Matchers::EndsWith("(finished jobs are kept for 30d, at most 3 of them)"));
  CHECK(f.show(held.job.id).state == bus::job_state::queued);
  auto stored = [&] {
    std::set<std::string> out;
    for (auto& k : f.db->load().jobs)
      out.insert(k.id);
    return out;
  };
  CHECK(stored() == std::set<std::string>{held.job.id, done[3], done[4], done[5]});
  // The node that ran them is told of each, once (ADR 0072).
  bus::string_list told, told_allocs, want_allocs;
  for (auto& o : f.log->forgets) {
    told.insert(told.end(), o.jobs.begin(), o.jobs.end());
    told_allocs.insert(told_allocs.end(), o.allocations.begin(), o.allocations.end());
  }
  for (int i = 0; i < 3; ++i)
    for (auto& al : allocations_of(f, done[i]))
      want_allocs.push_back(al);
  CHECK(told == bus::string_list{done[0], done[1], done[2]});
  CHECK(told_allocs == want_allocs);
  for (auto& al : f.db->load().allocations)
    CHECK((al.job != done[0] && al.job != done[1] && al.job != done[2]));
  // A smaller bound: the next start keeps the newest one. Its node hears of
  // the jobs forgotten then with its first heartbeat, in one order.
  auto told_before = f.log->forgets.size();
  f.restart_with([](actors::config& c) { c.history_jobs = 1; });
  CHECK(stored() == std::set<std::string>{held.job.id, done[5]});
  CHECK(f.log->forgets.size() == told_before);
  f.heartbeat();
  REQUIRE(f.log->forgets.size() == told_before + 1);
  CHECK(f.log->forgets.back().jobs == bus::string_list{done[3], done[4]});
  CHECK(forgotten(f, done[4]));
  CHECK(f.show(done[5]).state == bus::job_state::failed);
  // No bound: nothing more goes.
  f.restart_with([](actors::config& c) { c.history_jobs = 0; });
  f.heartbeat();
  finished(f, {"true"}, 0);
  CHECK(stored().size() == 3);
}

TEST_CASE("after cq clean forgot every job and a restart, new jobs take seqs above the events "
          "history kept, and every submit succeeds") {
  fixture f;
  f.add_node();
  for (int i = 0; i < 3; ++i)
    finished(f, {"true"}, 0);
  f.advance(std::chrono::minutes(1));
  f.heartbeat();
  CHECK(f.ok<bus::clean_rep>("owner-token", bus::clean_req{}).forgotten == 3);
  // The newest event's job keeps its events (store.cpp: event ids are rowids).
  REQUIRE(f.db->load().jobs.empty());
  REQUIRE_FALSE(f.db->load().event_seqs.empty());
  f.kill_coordinator();
  f.start();
  // Before, seqs started again at 1, and the third submit's first event
  // collided with the kept events (job seq 3, event seq 1).
  for (int i = 0; i < 4; ++i)
    f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("held"), {}, true});
  auto snap = f.db->load();
  REQUIRE(snap.jobs.size() == 4);
  CHECK(snap.jobs.front().seq > snap.event_seqs.front().first);
}

TEST_CASE("an allocation whose job is no longer stored (it ended after its job was forgotten) is "
          "no job's history after a restart, not even a new job's of the same id") {
  fixture f;
  f.add_node();
  const std::string id = "5d1f0c2e-8a43-4b7e-9c61-2f0e7a9b3d14";
  // What expiry leaves for a later pass: the allocation of a job it removed.
  bus::allocation_info a;
  a.id = "orphan", a.job = id, a.node = "n1", a.attempt = 1;
  a.state = bus::alloc_state::finished, a.reason = bus::reason::cancelled;
  a.created_ms = 1, a.started_ms = 2, a.finished_ms = 3;
  REQUIRE_FALSE(f.db->apply({a}));
  f.kill_coordinator();
  f.start();
  bus::job_spec spec;
  spec.argv = {"true"};
  spec.cwd = "/";
  f.ok<bus::submit_rep>("owner-token", bus::submit_req{spec, id});
  CHECK(f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations.size() <= 1);
  for (auto& al : f.ok<bus::show_rep>("owner-token", bus::show_req{id}).allocations)
    CHECK(al.id != "orphan");
}

TEST_CASE("a large page's id prefix covers every job's, and grows when a new job's id needs "
          "more; a small page's is its own rows'") {
  fixture f;
  auto submit_held = [&] {
    return f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("p"), {}, true}).job.id;
  };
  // 300 jobs id1001..id1300 (6 characters; neighbours share 5): 8, the least.
  f.next_id = 1000;
  for (int i = 0; i < 300; ++i)
    submit_held();
  CHECK(rows(f, {}).id_prefix == 8u);
  CHECK(rows(f, {}).rows->size() == 300u);
  // Two more that share 11 characters: a listing of them all needs 12 (the
  // prefix a large page keeps is recomputed once ids change).
  f.next_id = 1'000'000'000;
  auto x = submit_held();
  submit_held();
  REQUIRE(x == "id1000000001");
  CHECK(rows(f, {}).id_prefix == 12u);
  bus::ls_req old_jobs;
  old_jobs.all = false;
  old_jobs.limit = 5;
  CHECK(rows(f, old_jobs).id_prefix == 8u); // the first five: id1001..id1005
  // Forgetting jobs changes ids too: cancelled and cleaned, they no longer count.
  for (auto id : {std::string("id1000000001"), std::string("id1000000002")})
    f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{id});
  f.advance(std::chrono::seconds(1));
  CHECK(f.ok<bus::clean_rep>("owner-token", bus::clean_req{}).forgotten == 2u);
  CHECK(rows(f, {}).id_prefix == 8u);
}

TEST_CASE("a row carries a job's RAM cap only for an OOM, and its timeout only for a timeout") {
  fixture f;
  f.add_node();
  auto ended = [&](std::optional<std::uint64_t> timeout_ms, std::string reason) {
    bus::job_spec s;
    s.argv = {"python3", "train.py"};
    s.cwd = "/";
    s.ram_bytes = 1ull << 30;
    s.timeout_ms = timeout_ms;
    auto before = f.log->starts.size();
    auto id = f.ok<bus::submit_rep>("owner-token", bus::submit_req{s}).job.id;
    REQUIRE(f.log->starts.size() == before + 1);
    f.report("started", f.log->starts.back());
    f.report("exited", f.log->starts.back(), 137, std::move(reason));
    return id;
  };
  auto timed_out = ended(60'000, "timeout");
  auto oom = ended(std::nullopt, "oom");
  auto waiting =
      f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("w"), {}, true}).job.id;
  auto rep = rows(f, bus::ls_req{true});
  auto brief = [&](const std::string& id) -> const bus::job_brief& {
    for (auto& r : *rep.rows)
      if (r.job && r.job->id == id)
        return *r.job;
    FAIL("no row for " << id);
    throw std::logic_error("unreachable");
  };
  CHECK(brief(timed_out).reason == bus::reason::timeout);
  CHECK(brief(timed_out).timeout_ms == 60'000u);
  CHECK_FALSE(brief(timed_out).effective_ram_bytes);
  INFO("the OOM row's state: " << to_string(brief(oom).state));
  CHECK(brief(oom).reason == bus::reason::oom);
  CHECK(brief(oom).effective_ram_bytes == 1ull << 30);
  CHECK_FALSE(brief(oom).timeout_ms);
  // A queued row has neither: cq ls draws them only in those outcomes.
  CHECK_FALSE(brief(waiting).effective_ram_bytes);
  CHECK_FALSE(brief(waiting).timeout_ms);
}

TEST_CASE("a name finds its jobs as they are submitted and forgotten") {
  // resolve_job looks names up in an index built at the first lookup, added
  // to by submits and rebuilt after jobs leave the history (name_index.hpp).
  fixture f;
  f.add_node();
  bus::job_spec eval;
  eval.argv = {"true"};
  eval.cwd = "/";
  eval.name = "eval";
  auto a = f.ok<bus::submit_rep>("owner-token", bus::submit_req{eval}).job.id;
  REQUIRE(f.log->starts.size() == 1);
  f.report("started", f.log->starts[0]);
  f.report("exited", f.log->starts[0], 0);
  CHECK(f.show("eval").id == a);
  // A live job of the same name is the one a name means.
  auto b = f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("eval"), {}, true}).job.id;
  CHECK(f.show("eval").id == b);
  // The finished one forgotten: the name finds only the other.
  f.advance(std::chrono::minutes(1));
  f.heartbeat();
  CHECK(f.ok<bus::clean_rep>("owner-token", bus::clean_req{}).forgotten == 1);
  CHECK(f.show("eval").id == b);
  // Two live jobs of one name: the name is ambiguous and says so.
  auto c = f.ok<bus::submit_rep>("owner-token", bus::submit_req{too_big("eval"), {}, true}).job.id;
  auto two = f.call("owner-token", bus::show_req{"eval"});
  REQUIRE(std::holds_alternative<bus::error_info>(two.body));
  auto& e = std::get<bus::error_info>(two.body);
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("matches 2 jobs") != std::string::npos);
  CHECK(e.message.find(b.substr(0, 8)) != std::string::npos);
  CHECK(e.message.find(c.substr(0, 8)) != std::string::npos);
  // After a restart the index is built again from the recovered jobs.
  f.kill_coordinator();
  f.start();
  CHECK(std::holds_alternative<bus::error_info>(f.call("owner-token", bus::show_req{"eval"}).body));
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{c});
  CHECK(f.show("eval").id == b);
  // None of them live: the newest (a job run again, by cq retry or by hand).
  f.ok<bus::cancel_rep>("owner-token", bus::cancel_req{b});
  CHECK(f.show("eval").id == c);
}
