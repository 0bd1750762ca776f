#include "auth/permissions.hpp"

#include <fmt/format.h>

namespace cq::coord {
namespace {

constexpr auto N = reach::none;
constexpr auto O = reach::own;
constexpr auto A = reach::any;

// SPEC section 6. Owner does everything but type into another's terminal. Operator manages the
// queue and nodes' enablement but cannot cancel or move another identity's jobs, approve nodes,
// clear faults or grant diagnostics. Submitter submits, manages its own jobs and reads the queue.
// Node speaks only the node protocol, for its own name (the name is its identity's, never a field).
// Columns: owner, operator, submitter, node.
constexpr permission table[] = {
    {"submit", true, false, {A, A, A, N}, "submit a job (it belongs to the caller)"},
    {"ls", false, false, {A, A, A, N}, "list jobs"},
    {"show", false, false, {A, A, A, N}, "show a job"},
    {"logs", false, false, {A, A, A, N}, "read a job's output"},
    {"events", false, false, {A, A, A, N}, "read job events"},
    {"profile_ls", false, false, {A, A, A, N}, "list profiles"},
    {"profile_rm", true, false, {A, A, A, N}, "forget a profile (its jobs are sized anew)"},
    {"clean", true, false, {A, A, N, N}, "forget finished jobs now (everyone's)"},
    {"node_ls", false, false, {A, A, A, N}, "list nodes"},
    {"cancel", true, false, {A, O, O, N}, "cancel a job"},
    {"job_hold", true, false, {A, O, O, N}, "keep a queued job from starting, or let it go"},
    {"move", true, false, {A, O, O, N}, "move a job in the serving order"},
    {"preempt", true, false, {A, O, O, N}, "ask a running job to yield"},
    // Keystrokes are not audited (the job's submit is); only the identity
    // that submitted a --pty job types into it, whatever its role.
    {"terminal", false, false, {O, O, O, N}, "type into one's own cq run --pty job"},
    {"node_enable", true, false, {A, A, N, N}, "let a node take new work"},
    {"node_disable", true, false, {A, A, N, N}, "stop giving a node new work"},
    {"audit", false, false, {A, A, N, N}, "read the audit log"},
    {"release", true, false, {A, N, N, N}, "release a hold"},
    {"node_clear_fault", true, false, {A, N, N, N}, "clear a latched GPU fault"},
    {"node_invite", true, false, {A, N, N, N}, "make a node's invite code"},
    {"node_approve", true, false, {A, N, N, N}, "approve a joined node"},
    {"node_diagnostic",
     true,
     false,
     {A, N, N, N},
     "grant one queued job a start on a disabled node"},
    {"node_diagnostic_show", false, false, {A, N, N, N}, "inspect a node's diagnostic grant"},
    {"token_add", true, false, {A, N, N, N}, "make a token"},
    {"token_ls", false, false, {A, N, N, N}, "list tokens"},
    {"token_revoke", true, false, {A, N, N, N}, "revoke a token"},
    {"whoami", false, false, {A, A, A, N}, "say which identity and role a token is"},
    {"node_join", true, true, {N, N, N, N}, "join with an invite code (no token)"},
    {"heartbeat", false, false, {N, N, N, A}, "a node's heartbeat, for its own name"},
    {"report", false, false, {N, N, N, A}, "a node's start and exit reports"},
};

std::string_view cell(reach r) {
  switch (r) {
  case reach::none:
    return "-";
  case reach::own:
    return "own jobs";
  case reach::any:
    return "yes";
  }
  return "-";
}

} // namespace

std::span<const permission> permissions() {
  return table;
}

const permission* permission_of(std::string_view op) {
  for (auto& p : table)
    if (p.op == op)
      return &p;
  return nullptr;
}

std::string permissions_markdown() {
  std::string out = "| operation | what | owner | operator | submitter | node | audited |\n"
                    "|---|---|---|---|---|---|---|\n";
  for (auto& p : table) {
    auto who = [&](role r) -> std::string_view {
      return p.anonymous ? "(invite code)" : cell(p.by_role[static_cast<std::size_t>(r)]);
    };
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", p.op, p.what, who(role::owner),
                       who(role::operator_), who(role::submitter), who(role::node),
                       p.mutating ? "yes" : "no");
  }
  return out;
}

} // namespace cq::coord
