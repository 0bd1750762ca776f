// cq node invite, approve, ls.

#include "commands.hpp"
#include "cq/cli/to_json.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

namespace cq::cli {

int run_node_invite(const std::string& name, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::node_invite_rep>(bus::node_invite_req{name});
  if (!rep)
    return report_error(rep.error(), json);
  // Human mode prints the bare code so `CODE=$(cq node invite box)` works.
  if (json)
    fmt::print("{}\n", dump_json(to_json(*rep)));
  else
    fmt::print("{}\n", rep->code);
  return 0;
}

int run_node_approve(const std::string& name, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::node_rep>(bus::node_approve_req{name});
  if (!rep)
    return report_error(rep.error(), json);
  if (json)
    fmt::print("{}\n", dump_json(to_json(*rep)));
  else
    fmt::print("{} {}\n", rep->node.name, rep->node.state);
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
    fmt::print("{}\n", dump_json(to_json(*rep)));
    return 0;
  }
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  text_table t;
  t.header = {"NAME", "STATE", "ONLINE", "MEM GiB (AVAIL/TOTAL)", "CPUS", "GPUS", "RUNNING"};
  for (const auto& n : rep->nodes)
    t.rows.push_back({n.name, n.state, n.online ? "yes" : "no",
                      fmt::format("{:.1f}/{:.1f}", static_cast<double>(n.mem_available_bytes) / gib,
                                  static_cast<double>(n.mem_total_bytes) / gib),
                      std::to_string(n.cpus), std::to_string(n.lanes.size()),
                      std::to_string(n.running)});
  t.print();
  return 0;
}

} // namespace cq::cli
