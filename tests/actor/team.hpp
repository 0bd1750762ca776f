#pragma once
// The team fixture of the actor tests (SPEC sections 6 and 9): a coordinator
// with a node, an Owner, an Operator (opal) and a Submitter (sam), and a
// sample request of every op (team_test.cpp, idempotency_test.cpp).
#include "auth/permissions.hpp"
#include "fixture.hpp"

#include <fstream>
#include <functional>
#include <iterator>
#include <map>

namespace team_fixture {

using namespace cq;
using namespace cq::actors;

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
        {"clean", [&] { return bus::clean_req{std::uint64_t{1} << 60}; }},
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

inline std::optional<errc> code_of(const api_reply& r) {
  if (auto* e = std::get_if<bus::error_info>(&r.body))
    return e->code;
  return std::nullopt;
}

inline bool refused_for_role(const api_reply& r) {
  auto c = code_of(r);
  return c == errc::permission_denied || c == errc::unauthenticated;
}

} // namespace team_fixture
