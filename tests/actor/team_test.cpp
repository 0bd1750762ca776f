// A team on one coordinator (SPEC sections 6 and 9): the role matrix, cell by
// cell; the audit of every mutating operation; node enablement; diagnostic
// grants (idempotent calls: idempotency_test.cpp). On the real actors (see
// fixture.hpp).
#include "team.hpp"

using namespace team_fixture;

namespace {

template <std::size_t I = 0>
void every_op_has_a_row() {
  if constexpr (I < std::variant_size_v<bus::coordinator_request>) {
    using T = std::variant_alternative_t<I, bus::coordinator_request>;
    INFO("op " << T::op);
    CHECK(coord::permission_of(T::op) != nullptr);
    every_op_has_a_row<I + 1>();
  }
}

} // namespace

TEST_CASE("every operation of the protocol has exactly one permission row") {
  every_op_has_a_row();
  CHECK(coord::permissions().size() == std::variant_size_v<bus::coordinator_request>);
}

TEST_CASE("the permission table in docs/operations.md is the one the coordinator enforces") {
  std::ifstream in(std::string(CQ_DOCS) + "/operations.md");
  REQUIRE(in);
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto begin = doc.find("<!-- permissions:begin -->\n");
  auto end = doc.find("<!-- permissions:end -->");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  begin += std::string_view("<!-- permissions:begin -->\n").size();
  // On a difference, paste coord::permissions_markdown() between the markers.
  CHECK(doc.substr(begin, end - begin) == coord::permissions_markdown());
}

TEST_CASE("the role matrix: every (role, operation) cell is enforced as the table says") {
  team t;
  for (auto& p : coord::permissions()) {
    if (p.anonymous)
      continue;
    for (std::size_t ri = 0; ri < coord::role_count; ++ri) {
      auto r = static_cast<coord::role>(ri);
      auto token = t.token_of(r);
      auto cell = p.by_role[ri];
      INFO("op " << p.op << ", role " << coord::to_string(r));
      // A job of someone else (the submitter's, or the operator's when the
      // caller is the submitter).
      auto other = t.job_of(r == coord::role::submitter ? t.opal : t.sam);
      auto reply = t.call(token, t.sample(p.op, other));
      if (cell == coord::reach::none) {
        CHECK(code_of(reply) == errc::permission_denied);
        continue;
      }
      if (cell == coord::reach::any) {
        CHECK_FALSE(refused_for_role(reply));
        continue;
      }
      // Own jobs only: refused on another identity's job, allowed on its own.
      CHECK(code_of(reply) == errc::permission_denied);
      auto mine = t.job_of(token);
      CHECK_FALSE(refused_for_role(t.call(token, t.sample(p.op, mine))));
    }
  }
  // A job belongs to the identity that submitted it.
  CHECK(t.show(t.job_of(t.sam)).owner == "sam");
}

TEST_CASE("a node token speaks only the node protocol, a missing or revoked token nothing") {
  team t;
  auto job = t.job_of("owner-token");
  CHECK(code_of(t.call(t.node_token, bus::show_req{job})) == errc::permission_denied);
  CHECK(code_of(t.call("", bus::show_req{job})) == errc::unauthenticated);
  CHECK(code_of(t.call("cq_not-a-token", bus::show_req{job})) == errc::unauthenticated);
  t.ok<bus::token_ls_rep>("owner-token", bus::token_revoke_req{"sam"});
  CHECK(code_of(t.call(t.sam, bus::ls_req{})) == errc::unauthenticated);
  // Tokens are listed without their secrets; the revoked one is gone.
  auto ls = t.ok<bus::token_ls_rep>("owner-token", bus::token_ls_req{});
  for (auto& k : ls.tokens)
    CHECK(k.name != "sam");
}

TEST_CASE("failed authentications are limited per peer without slowing other peers") {
  team t;
  int limited = 0;
  for (int i = 0; i < 30; ++i) {
    auto r = t.call("cq_guess" + std::to_string(i), bus::ls_req{}, "attacker");
    auto* e = std::get_if<bus::error_info>(&r.body);
    REQUIRE(e);
    limited += e->message.find("too many failed") != std::string::npos;
  }
  CHECK(limited >= 15);
  // Even the right token is refused from that peer while it is limited...
  auto r = t.call("owner-token", bus::ls_req{}, "attacker");
  CHECK(code_of(r) == errc::unauthenticated);
  // ...and other peers are served at once.
  CHECK_FALSE(code_of(t.call("owner-token", bus::ls_req{}, "other")));
  // The allowance refills with time.
  t.advance(std::chrono::seconds(5));
  CHECK_FALSE(code_of(t.call("owner-token", bus::ls_req{}, "attacker")));
}

TEST_CASE("joins with a wrong invite code are limited per peer, and their audit rows bounded") {
  team t;
  auto before = t.audit(std::string("node_join")).size();
  int limited = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = t.call("", bus::node_join_req{"box", "cqi_guess" + std::to_string(i)}, "guesser");
    auto* e = std::get_if<bus::error_info>(&r.body);
    REQUIRE(e);
    CHECK(e->code == errc::unauthenticated);
    limited += e->message.find("too many failed") != std::string::npos;
  }
  CHECK(limited >= 85);
  CHECK(t.audit(std::string("node_join")).size() - before <= 15);
  // Another peer joins at once with a good code.
  auto inv = t.ok<bus::node_invite_rep>("owner-token", bus::node_invite_req{"other"});
  t.ok<bus::node_join_rep>("", bus::node_join_req{"other", inv.code}, "honest");
}

TEST_CASE("every mutating operation writes an audit row, allowed and refused") {
  team t;
  for (auto& p : coord::permissions()) {
    if (!p.mutating)
      continue;
    INFO("op " << p.op);
    auto job = t.job_of("owner-token");
    auto before = t.audit(std::string(p.op)).size();
    // Refused: by a role the table denies it to (or a bad invite code).
    std::optional<coord::role> denied;
    for (std::size_t ri = 0; ri < coord::role_count; ++ri)
      if (p.by_role[ri] == coord::reach::none)
        denied = static_cast<coord::role>(ri);
    if (p.anonymous) {
      CHECK(code_of(t.call("", t.sample(p.op, job))) == errc::unauthenticated);
    } else {
      REQUIRE(denied);
      CHECK(code_of(t.call(t.token_of(*denied), t.sample(p.op, job))) == errc::permission_denied);
    }
    auto after_refusal = t.audit(std::string(p.op));
    REQUIRE(after_refusal.size() == before + 1);
    CHECK(after_refusal.back().outcome != "ok");
    CHECK_FALSE(after_refusal.back().args.empty());
    // Allowed (the Owner may call everything; a node joins with its code).
    if (p.anonymous) {
      auto inv = t.ok<bus::node_invite_rep>("owner-token", bus::node_invite_req{"joiner"});
      t.ok<bus::node_join_rep>("", bus::node_join_req{"joiner", inv.code});
    } else {
      t.call("owner-token", t.sample(p.op, job));
    }
    CHECK(t.audit(std::string(p.op)).size() == before + 2);
  }
  // The filters of the audit log.
  t.job_of(t.sam);
  auto mine = t.audit(std::nullopt, std::string("sam"));
  REQUIRE_FALSE(mine.empty());
  for (auto& a : mine)
    CHECK(a.who == "sam");
  bus::audit_req since;
  since.since_ms = INT64_MAX / 2;
  CHECK(t.ok<bus::audit_rep>("owner-token", since).rows.empty());
  CHECK(code_of(t.call(t.sam, bus::audit_req{})) == errc::permission_denied);
  CHECK_FALSE(code_of(t.call(t.opal, bus::audit_req{})));
}

TEST_CASE("a disabled node finishes what runs and gets no new work") {
  team t;
  auto first = t.submit({"sleep", "100"});
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  auto rep = t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("disk check")});
  CHECK_FALSE(rep.node.enabled);
  CHECK(rep.node.disabled_reason == "by opal: disk check");
  // Disabled again without a reason: the first one's stands; with one, it
  // is replaced.
  CHECK(t.ok<bus::node_rep>("owner-token", bus::node_disable_req{"box", std::nullopt})
            .node.disabled_reason == "by opal: disk check");
  CHECK(t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("disk check")})
            .node.disabled_reason == "by opal: disk check");
  auto second = t.submit({"true"});
  t.heartbeat();
  CHECK(t.log->starts.size() == 1);
  CHECK(t.log->stops.empty());
  auto why = t.ok<bus::show_rep>("owner-token", bus::show_req{second}).waiting;
  REQUIRE_FALSE(why.empty());
  CHECK(why[0].find("disabled") != std::string::npos);
  t.report("exited", t.log->starts[0], 0);
  CHECK(t.show(first).state == job_state::succeeded);
  t.heartbeat();
  CHECK(t.log->starts.size() == 1);
  // Kept across a restart, and shown in the listing.
  t.restart_with([](auto&) {});
  auto ls = t.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{});
  REQUIRE(ls.nodes.size() == 1);
  CHECK_FALSE(ls.nodes[0].enabled);
  t.ok<bus::node_rep>(t.opal, bus::node_enable_req{"box"});
  t.heartbeat();
  CHECK(t.log->starts.size() == 2);
}
// ---- one-job diagnostic grants (the compute-queue seed, every rule) --------

namespace {

struct diag : team {
  /// A job pinned to `node` (1 GiB), as submitted.
  static bus::job_spec pinned_spec(const std::string& node) {
    bus::job_spec s;
    s.argv = {"true"};
    s.cwd = "/";
    s.ram_bytes = 1ull << 30;
    s.node = node;
    return s;
  }
  std::string submit_spec(const bus::job_spec& s, bool hold_for_node = false) {
    return ok<bus::submit_rep>("owner-token", bus::submit_req{s, {}, hold_for_node}).job.id;
  }
  /// A queued job pinned to `node`.
  std::string pinned(const std::string& node) { return submit_spec(pinned_spec(node)); }
  /// A pinned job that waits until the node reports 20 GiB available.
  std::string waiting(const std::string& node) {
    auto s = pinned_spec(node);
    s.ram_start_min_bytes = 20ull << 30; // the node reports 15 GiB available
    return submit_spec(s, true);         // held: more than the node has, until roomy()
  }
  void roomy() {
    bus::heartbeat_req hb{32ull << 30, 30ull << 30, 4, log->held};
    ok<bus::heartbeat_rep>(node_token, hb);
  }
  void disable() {
    ok<bus::node_rep>("owner-token", bus::node_disable_req{"box", std::string("x")});
  }
  api_reply grant(const std::string& job, std::string token = "owner-token") {
    return call(token, bus::node_diagnostic_req{"box", job, "one regression run"});
  }
  std::optional<bus::grant_info> shown() {
    return ok<bus::grant_rep>("owner-token", bus::node_diagnostic_show_req{"box"}).grant;
  }
  bool enabled() {
    return ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{}).nodes.at(0).enabled;
  }
};

} // namespace

TEST_CASE("a grant is for a disabled node: on an enabled one it is refused") {
  diag t;
  auto j = t.pinned("box");
  REQUIRE(t.log->starts.size() == 1); // the node is enabled: it just runs
  auto big = diag::pinned_spec("box");
  big.ram_bytes = 1ull << 50; // fits no node: stays queued (held for a node)
  auto k = t.submit_spec(big, true);
  CHECK(code_of(t.grant(k)) == errc::invalid_state);
  CHECK_FALSE(t.shown());
  (void)j;
}

TEST_CASE("a grant needs a queued job, pinned to exactly that node, never started") {
  diag t;
  t.disable();
  auto unpinned = t.job_of("owner-token");
  CHECK(code_of(t.grant(unpinned)) == errc::invalid_state);
  // A job that ran before (attempt 1, requeued) is refused.
  t.pinned("box");
  t.ok<bus::node_rep>("owner-token", bus::node_enable_req{"box"});
  REQUIRE(t.log->starts.size() == 1);
  auto ran = t.log->starts[0].job;
  t.disable();
  t.report("exited", t.log->starts[0], std::nullopt, "fault"); // requeued (not its fault)
  REQUIRE(t.show(ran).state == job_state::queued);
  CHECK(code_of(t.grant(ran)) == errc::invalid_state);
  // A cancelled job is refused.
  auto gone = t.pinned("box");
  t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{gone});
  CHECK(code_of(t.grant(gone)) == errc::invalid_state);
  CHECK_FALSE(t.shown());
}

TEST_CASE("a grant needs a node with no allocations") {
  diag t;
  auto running = t.pinned("box");
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  t.disable();
  auto j = t.pinned("box");
  CHECK(code_of(t.grant(j)) == errc::invalid_state);
  t.report("exited", t.log->starts[0], 0);
  t.heartbeat();
  CHECK(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  (void)running;
}

TEST_CASE("only the Owner creates or inspects grants; an Operator cannot enable a node this way") {
  diag t;
  t.disable();
  auto j = t.pinned("box");
  CHECK(code_of(t.grant(j, t.opal)) == errc::permission_denied);
  CHECK(code_of(t.call(t.opal, bus::node_diagnostic_show_req{"box"})) == errc::permission_denied);
  CHECK(code_of(t.grant(j, t.sam)) == errc::permission_denied);
  t.heartbeat();
  CHECK(t.log->starts.empty());
  CHECK_FALSE(t.enabled());
}

TEST_CASE("the granted job starts on the disabled node; every other job stays queued") {
  diag t;
  t.disable();
  auto other_pinned = t.pinned("box");
  auto cpu_job = t.job_of("owner-token");
  auto j = t.pinned("box");
  auto rep = t.grant(j);
  REQUIRE(std::holds_alternative<bus::grant_rep>(rep.body));
  CHECK(std::get<bus::grant_rep>(rep.body).grant->state == "active");
  t.heartbeat();
  // The grant is consumed by the placement, in its transaction.
  REQUIRE(t.log->starts.size() == 1);
  CHECK(t.log->starts[0].job == j);
  CHECK(t.shown()->state == "consumed");
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], 0);
  CHECK(t.show(j).state == job_state::succeeded);
  t.heartbeat();
  // Nothing else ran, and the node stays disabled after the success.
  CHECK(t.log->starts.size() == 1);
  CHECK(t.show(other_pinned).state == job_state::queued);
  CHECK(t.show(cpu_job).state == job_state::queued);
  CHECK_FALSE(t.enabled());
  // The grant was consumed once: granting again needs a new grant.
  t.heartbeat();
  CHECK(t.log->starts.size() == 1);
}

TEST_CASE("a grant is consumed atomically: a second pinned job queued first never takes it") {
  diag t;
  t.disable();
  auto first = t.pinned("box");
  auto j = t.pinned("box");
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  // A second grant for the same node while one is active is refused.
  CHECK(code_of(t.grant(first)) == errc::invalid_state);
  for (int i = 0; i < 3; ++i)
    t.heartbeat();
  REQUIRE(t.log->starts.size() == 1);
  CHECK(t.log->starts[0].job == j);
  CHECK(t.show(first).state == job_state::queued);
  // A restart does not bring the consumed grant back.
  t.restart_with([](auto&) {});
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], 1);
  t.heartbeat();
  for (auto& o : t.log->starts) // the unconfirmed start re-sent after the restart, only
    CHECK(o.allocation == t.log->starts[0].allocation);
  CHECK(t.show(j).state == job_state::failed);
  CHECK(t.show(first).state == job_state::queued);
  CHECK_FALSE(t.enabled()); // still disabled after a failure
}

TEST_CASE("a grant is consumed only once the job's RAM constraints fit") {
  diag t;
  t.disable();
  auto j = t.waiting("box");
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  t.heartbeat();
  CHECK(t.log->starts.empty());
  CHECK(t.shown()->state == "active");
  // More memory free: it fits, starts, and the grant is consumed.
  t.roomy();
  REQUIRE(t.log->starts.size() == 1);
  CHECK(t.shown()->state == "consumed");
}

TEST_CASE("exit 6 of a diagnostic run fails it without requeue") {
  diag t;
  t.disable();
  auto j = t.pinned("box");
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  t.heartbeat();
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], 6);
  CHECK(t.show(j).state == job_state::failed);
  CHECK(t.show(j).diagnostic);
  t.heartbeat();
  CHECK(t.log->starts.size() == 1);
}

TEST_CASE("a lost diagnostic allocation fails without requeue") {
  diag t;
  t.disable();
  auto j = t.pinned("box");
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  t.heartbeat();
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], std::nullopt, "lost");
  CHECK(t.show(j).state == job_state::failed);
  CHECK(t.show(j).reason == bus::reason::lost);
  t.heartbeat();
  CHECK(t.log->starts.size() == 1);
  CHECK_FALSE(t.enabled());
}

TEST_CASE("cancelling the pending job revokes its grant") {
  diag t;
  t.disable();
  auto j = t.waiting("box");
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  CHECK(t.shown()->state == "active");
  t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{j});
  CHECK(t.shown()->state == "revoked");
  auto k = t.waiting("box");
  t.roomy();
  CHECK(t.log->starts.empty());
  // The node can be granted again, for another job; a restart keeps it.
  t.heartbeat(); // back to 15 GiB: k waits
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(k).body));
  t.restart_with([](auto&) {});
  CHECK(t.shown()->state == "active");
  t.roomy();
  REQUIRE(t.log->starts.size() == 1);
  CHECK(t.log->starts[0].job == k);
  CHECK(t.shown()->state == "consumed");
}

TEST_CASE("a granted job that fails by its dependency revokes its grant") {
  diag t;
  t.disable();
  auto dep = t.job_of("owner-token");
  auto s = diag::pinned_spec("box");
  s.after = bus::string_list{dep};
  auto j = t.submit_spec(s);
  REQUIRE(std::holds_alternative<bus::grant_rep>(t.grant(j).body));
  t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{dep});
  CHECK(t.show(j).reason == bus::reason::dependency_failed);
  CHECK(t.shown()->state == "revoked");
  // The node can be granted again.
  auto k = t.pinned("box");
  CHECK(std::holds_alternative<bus::grant_rep>(t.grant(k).body));
}
