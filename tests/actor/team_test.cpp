// A team on one coordinator (SPEC sections 6 and 9): the role matrix, cell by
// cell; the audit of every mutating operation; node enablement; idempotent
// calls. On the real actors (see fixture.hpp).
#include "auth/permissions.hpp"
#include "fixture.hpp"

#include <fstream>
#include <functional>
#include <iterator>
#include <map>

namespace {

struct team : fixture {
  team() {
    add_node();
    opal = ok<bus::token_add_rep>("owner-token", bus::token_add_req{"opal", "operator"}).token;
    sam = ok<bus::token_add_rep>("owner-token", bus::token_add_req{"sam", "submitter"}).token;
  }
  std::string opal, sam;

  std::string token_of(coord::role r) {
    switch (r) {
    case coord::role::owner:
      return "owner-token";
    case coord::role::operator_:
      return opal;
    case coord::role::submitter:
      return sam;
    case coord::role::node:
      return node_token;
    }
    return {};
  }

  /// A queued job submitted with `token` (it belongs to that identity).
  std::string job_of(const std::string& token) {
    bus::job_spec s;
    s.argv = {"true"};
    s.cwd = "/";
    s.ram_bytes = 1ull << 50; // fits no node: stays queued (held for a node)
    return ok<bus::submit_rep>(token, bus::submit_req{s, {}, true}).job.id;
  }

  std::vector<bus::audit_info> audit(std::optional<std::string> op = {},
                                     std::optional<std::string> who = {}) {
    bus::audit_req q;
    q.op_name = std::move(op);
    q.who = std::move(who);
    return ok<bus::audit_rep>("owner-token", q).rows;
  }

  int n = 0;
  /// A request of each op, naming `job` where it names one.
  bus::coordinator_request sample(std::string_view op, const std::string& job) {
    ++n;
    bus::job_spec s;
    s.argv = {"true"};
    s.cwd = "/";
    s.ram_bytes = 1ull << 50;
    std::map<std::string_view, std::function<bus::coordinator_request()>> m{
        {"submit",
         [&] {
           return bus::submit_req{s, {}, true};
         }},
        {"ls", [&] { return bus::ls_req{}; }},
        {"show", [&] { return bus::show_req{job}; }},
        {"logs", [&] { return bus::logs_req{job}; }},
        {"events", [&] { return bus::events_req{}; }},
        {"profile_ls", [&] { return bus::profile_ls_req{}; }},
        {"profile_rm", [&] { return bus::profile_rm_req{"no-such-profile"}; }},
        {"node_ls", [&] { return bus::node_ls_req{}; }},
        {"cancel", [&] { return bus::cancel_req{job}; }},
        {"move",
         [&] {
           return bus::move_req{job, "front"};
         }},
        {"preempt", [&] { return bus::preempt_req{job}; }},
        {"node_enable", [&] { return bus::node_enable_req{"box"}; }},
        {"node_disable",
         [&] {
           return bus::node_disable_req{"box", std::string("test")};
         }},
        {"audit", [&] { return bus::audit_req{}; }},
        {"release", [&] { return bus::release_req{"no-such-hold"}; }},
        {"node_clear_fault",
         [&] {
           return bus::node_clear_fault_req{"box", "checked"};
         }},
        {"node_invite", [&] { return bus::node_invite_req{"n" + std::to_string(n)}; }},
        {"node_approve", [&] { return bus::node_approve_req{"box"}; }},
        {"node_diagnostic",
         [&] {
           return bus::node_diagnostic_req{"box", job, "check"};
         }},
        {"node_diagnostic_show", [&] { return bus::node_diagnostic_show_req{"box"}; }},
        {"token_add",
         [&] {
           return bus::token_add_req{"t" + std::to_string(n), "submitter"};
         }},
        {"token_ls", [&] { return bus::token_ls_req{}; }},
        {"token_revoke", [&] { return bus::token_revoke_req{"nobody"}; }},
        {"whoami", [&] { return bus::whoami_req{}; }},
        {"job_hold", [&] { return bus::job_hold_req{job}; }},
        {"terminal",
         [&] {
           return bus::terminal_req{job, "x"};
         }},
        {"node_join",
         [&] {
           return bus::node_join_req{"box", "wrong-code"};
         }},
        {"heartbeat",
         [&] {
           return bus::heartbeat_req{16ull << 30, 15ull << 30, 4, log->held};
         }},
        {"report",
         [&] {
           bus::report_req r;
           r.seq = 1;
           r.kind = "started";
           r.allocation = "no-such-allocation";
           r.job = job;
           return r;
         }},
    };
    auto i = m.find(op);
    if (i == m.end())
      FAIL("no sample request for op " << op << ": add one (and its permission row)");
    return i->second();
  }
};

std::optional<errc> code_of(const api_reply& r) {
  if (auto* e = std::get_if<bus::error_info>(&r.body))
    return e->code;
  return std::nullopt;
}

bool refused_for_role(const api_reply& r) {
  auto c = code_of(r);
  return c == errc::permission_denied || c == errc::unauthenticated;
}

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

TEST_CASE("an operation id: a replay returns the stored result and applies nothing") {
  team t;
  auto a = t.job_of("owner-token");
  auto b = t.job_of("owner-token");
  std::string op = "0b7e4f5c-1111-4222-8333-944455556666";
  auto first = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(first.job.state == job_state::cancelled);
  auto audit_rows = t.audit(std::string("cancel")).size();
  // The replay answers the stored result, and applies nothing (its audit
  // row says it was a replay).
  auto again = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(again.job.id == a);
  CHECK(again.job.state == job_state::cancelled);
  CHECK(again.job.finished_ms == first.job.finished_ms);
  auto rows = t.audit(std::string("cancel"));
  REQUIRE(rows.size() == audit_rows + 1);
  CHECK(rows.back().outcome == "replayed");
  // The same id with other arguments, or for another kind, is a conflict.
  CHECK(code_of(t.call("owner-token", bus::cancel_req{b, op})) == errc::operation_conflict);
  CHECK(code_of(t.call("owner-token", bus::move_req{b, "front", {}, {}, op})) ==
        errc::operation_conflict);
  CHECK(t.show(b).state == job_state::queued);
  // A refused request stores nothing: the id stays free for a good call.
  std::string op2 = "0b7e4f5c-2222-4222-8333-944455556666";
  CHECK(code_of(t.call(t.sam, bus::cancel_req{b, op2})) == errc::permission_denied);
  CHECK(t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{b, op2}).job.state ==
        job_state::cancelled);
  // Not a UUID.
  CHECK(code_of(t.call("owner-token", bus::cancel_req{b, std::string("x")})) ==
        errc::invalid_argument);
}

TEST_CASE("an operation id survives a coordinator crash between its commit and its reply") {
  team t;
  auto a = t.job_of("owner-token");
  std::string op = "0b7e4f5c-3333-4222-8333-944455556666";
  bus::move_req m{a, "front", {}, std::string("high"), op};
  auto first = t.ok<bus::move_rep>("owner-token", m);
  t.restart_with([](auto&) {}); // as if the reply had been lost with the process
  auto again = t.ok<bus::move_rep>("owner-token", m);
  CHECK(again.job.priority == "high");
  CHECK(again.job.position == first.job.position);
  // Node operations keep theirs too.
  std::string op3 = "0b7e4f5c-4444-4222-8333-944455556666";
  t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("x"), op3});
  t.ok<bus::node_rep>(t.opal, bus::node_enable_req{"box"});
  t.restart_with([](auto&) {});
  auto replay = t.ok<bus::node_rep>(t.opal, bus::node_disable_req{"box", std::string("x"), op3});
  CHECK_FALSE(replay.node.enabled); // the stored result...
  auto ls = t.ok<bus::node_ls_rep>("owner-token", bus::node_ls_req{});
  CHECK(ls.nodes[0].enabled); // ...and nothing applied again
}

TEST_CASE("an operation id is forgotten after its window, in memory and in the store") {
  team t;
  auto a = t.job_of("owner-token");
  std::string op = "0b7e4f5c-5555-4222-8333-944455556666";
  bus::move_req m{a, "front", {}, std::string("high"), op};
  t.ok<bus::move_rep>("owner-token", m);
  auto outcome_of_last_move = [&] { return t.audit(std::string("move")).back().outcome; };
  // Within the window (one day by default) a retry is a replay...
  t.advance(std::chrono::hours(23));
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() == "replayed");
  // ...and a day and a 24th after the call it is forgotten: the same call
  // runs anew, and a restart (which reads the store) does not bring it back.
  t.advance(std::chrono::hours(2) + std::chrono::seconds(1));
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() != "replayed");
  // That run stored its own result: a restart keeps it, as any other.
  t.restart_with([](auto&) {});
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() == "replayed");
  // (The fixture's wall clock starts again at its epoch on a restart, so the
  // result stored 25 hours in is a day and a 24th old 50 hours after it.)
  t.advance(std::chrono::hours(51));
  t.restart_with([](auto&) {});
  t.ok<bus::move_rep>("owner-token", m);
  CHECK(outcome_of_last_move() != "replayed");
}

namespace {

/// A store that commits, then never answers the commit a predicate picks: the
/// coordinator is killed with the change durable and its reply unsent.
struct mute_state {
  store_actor real;
  std::function<bool(const change_batch&)> mute;
  std::shared_ptr<int> muted;
  static inline const char* name = "test.mute_store";
};
store_actor::behavior_type mute_store(store_actor::stateful_pointer<mute_state> self,
                                      store_actor real,
                                      std::function<bool(const change_batch&)> mute,
                                      std::shared_ptr<int> muted) {
  self->state.real = real;
  self->state.mute = std::move(mute);
  self->state.muted = muted;
  self->link_to(real);
  return {
      [=](commit_atom, std::shared_ptr<const change_batch> b) -> caf::result<commit_result> {
        auto rp = self->make_response_promise<commit_result>();
        bool mute = self->state.mute(*b);
        self->request(self->state.real, caf::infinite, commit_atom::value, b)
            .then([=](const commit_result& r) mutable {
              if (mute && r.error.empty()) {
                ++*self->state.muted; // durable; the reply is lost with the process
                return;
              }
              rp.deliver(r);
            });
        return rp;
      },
      [=](load_atom, const std::string& j) -> caf::result<job_payload> {
        return self->delegate(self->state.real, load_atom::value, j);
      },
      [=](event_atom, const events_query& q) -> caf::result<bus::events_rep> {
        return self->delegate(self->state.real, event_atom::value, q);
      },
      [=](audit_atom, const audit_query& q) -> caf::result<bus::audit_rep> {
        return self->delegate(self->state.real, audit_atom::value, q);
      },
      [=](flush_atom) {},
      [=](check_atom) {},
  };
}

bool has_operation(const change_batch& b) {
  for (auto& c : b)
    if (std::holds_alternative<operation_row>(c))
      return true;
  return false;
}
bool submits(const change_batch& b, const std::string& id) {
  for (auto& c : b)
    if (auto* j = std::get_if<job_row>(&c); j && j->info.id == id && !j->spec_digest.empty())
      return true;
  return false;
}

} // namespace

TEST_CASE("a replay after a coordinator killed between commit and reply returns the result") {
  team t;
  auto muted = std::make_shared<int>(0);
  auto a = t.job_of("owner-token");
  std::string id = "0b7e4f5c-6666-4222-8333-944455556666";
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  s.ram_bytes = 1ull << 50;
  t.kill_coordinator();
  t.opts.wrap_store = [=](caf::actor_system& sys, store_actor real) {
    return sys.spawn(
        mute_store, real, [=](const change_batch& b) { return has_operation(b) || submits(b, id); },
        muted);
  };
  t.start();
  std::string op = "0b7e4f5c-7777-4222-8333-944455556666";
  // The cancel is committed; its reply never comes (the process "dies").
  CHECK_FALSE(t.try_call("owner-token", bus::cancel_req{a, op}).has_value());
  CHECK_FALSE(t.try_call("owner-token", bus::submit_req{s, id}).has_value());
  CHECK(*muted == 2);
  t.kill_coordinator();
  t.opts.wrap_store = {};
  t.start();
  // The client's retries: the stored results, nothing applied twice.
  auto audit_before = t.audit().size();
  auto again = t.ok<bus::cancel_rep>("owner-token", bus::cancel_req{a, op});
  CHECK(again.job.state == job_state::cancelled);
  auto sub = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(sub.job.id == id);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 2);
  auto rows = t.audit();
  REQUIRE(rows.size() == audit_before + 2); // each replay says it was one, and applied nothing
  CHECK(rows[rows.size() - 2].outcome == "replayed");
  CHECK(rows.back().outcome == "replayed");
}

TEST_CASE("a client job id: the same spec returns the stored job, another is a conflict") {
  team t;
  bus::job_spec s;
  s.argv = {"true"};
  s.cwd = "/";
  std::string id = "0b7e4f5c-5555-4222-8333-944455556666";
  auto first = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(first.job.id == id);
  REQUIRE(t.log->starts.size() == 1);
  t.report("started", t.log->starts[0]);
  t.report("exited", t.log->starts[0], 0);
  REQUIRE(t.show(id).state == job_state::succeeded);
  t.restart_with([](auto&) {});
  // Terminal, after a restart: the stored job, no second one.
  auto again = t.ok<bus::submit_rep>("owner-token", bus::submit_req{s, id});
  CHECK(again.job.state == job_state::succeeded);
  CHECK(t.ok<bus::ls_rep>("owner-token", bus::ls_req{true}).jobs.size() == 1);
  auto other = s;
  other.argv = {"false"};
  CHECK(code_of(t.call("owner-token", bus::submit_req{other, id})) == errc::job_conflict);
  CHECK(code_of(t.call("owner-token", bus::submit_req{s, std::string("not-a-uuid")})) ==
        errc::invalid_argument);
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
