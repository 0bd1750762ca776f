// cq node invite, approve, ls, clear-fault; cq release.

#include "commands.hpp"
#include "cq/json.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

namespace cq::cli {

int run_node_invite(const std::string& name, bool replace, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  bus::node_invite_req req{name, {}};
  if (replace)
    req.replace = true;
  auto rep = s->call<bus::node_invite_rep>(req);
  if (!rep)
    return report_error(rep.error(), json);
  // Human mode prints the bare code so `CODE=$(cq node invite box)` works.
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(rep->code);
  return 0;
}

int run_node_approve(const std::string& name, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call_retrying<bus::node_rep>(bus::node_approve_req{name, operation_id()});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("{} {}", rep->node.name, rep->node.state));
  return 0;
}

int run_node_ls(bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::node_ls_rep>(bus::node_ls_req{});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    fmt::print("{}\n", json_text(*rep));
    return 0;
  }
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  // MEM GiB: available/total.
  text_table t;
  t.header = {"NAME", "STATE",   "ONLINE", "MEM GiB", "CPUS",
              "GPUS", "RUNNING", "MEMCAP", "FAULT",   "HOLDS"};
  t.flex = 0;
  for (const auto& n : rep->nodes)
    t.rows.push_back({n.name, n.enabled ? n.state : n.state + ",disabled", n.online ? "yes" : "no",
                      fmt::format("{:.1f}/{:.1f}", static_cast<double>(n.mem_available_bytes) / gib,
                                  static_cast<double>(n.mem_total_bytes) / gib),
                      std::to_string(n.cpus), std::to_string(n.lanes.size()),
                      std::to_string(n.running), n.mem_cap_mode.empty() ? "-" : n.mem_cap_mode,
                      n.fault ? fmt::format("xid {}", n.fault->xid) : "-",
                      n.holds.empty() ? "-" : std::to_string(n.holds.size())});
  t.print();
  for (const auto& n : rep->nodes)
    if (!n.enabled)
      print_line(fmt::format("{} is disabled ({}): it finishes what runs and gets no new work",
                             n.name, n.disabled_reason));
  // Holds need a person: show their ids so they can be released by name.
  for (const auto& n : rep->nodes)
    for (const auto& h : n.holds)
      print_line(fmt::format("hold {} on {}{}: {}", h.id, n.name,
                             h.lane.empty() ? "" : "/" + h.lane, h.reason));
  return 0;
}

int run_node_clear_fault(const std::string& name, const std::string& reason, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep =
      s->call_retrying<bus::node_rep>(bus::node_clear_fault_req{name, reason, operation_id()});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("{}: fault cleared", rep->node.name));
  return 0;
}

int run_release(const std::string& hold, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call_retrying<bus::node_rep>(bus::release_req{hold, operation_id()});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", json_text(*rep));
  else
    print_line(fmt::format("released {} on {}", hold, rep->node.name));
  return 0;
}

} // namespace cq::cli
