// What both platforms' process hosts compute over their own process table:
// a process group's tree (adapters.hpp: tree_rss_bytes) and the cleanup scan
// (seams.hpp: process_host::cleanup_scan).
#include "node/adapters/adapters.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_map>

namespace cq::node {

namespace {

std::uint64_t page_size() {
  static const auto page = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
  return page;
}

} // namespace

std::uint64_t tree_rss_bytes(const std::vector<proc_entry>& procs, pid_t pgid,
                             std::vector<const proc_entry*>* members) {
  // Members: the group, then (to a fixed point) children of members.
  std::unordered_map<pid_t, bool> in;
  for (auto& p : procs)
    if (p.pgrp == pgid)
      in[p.pid] = true;
  bool grew = !in.empty();
  while (grew) {
    grew = false;
    for (auto& p : procs)
      if (!in.count(p.pid) && in.count(p.ppid)) {
        in[p.pid] = true;
        grew = true;
      }
  }
  std::uint64_t sum = 0;
  for (auto& p : procs)
    if (in.count(p.pid)) {
      sum += p.rss_pages * page_size();
      if (members)
        members->push_back(&p);
    }
  return sum;
}

std::optional<leader_id>
find_marked_leader(const std::vector<proc_entry>& procs,
                   const std::function<marker(pid_t, std::string_view)>& env,
                   const std::string& marker, bool* changing) {
  std::optional<leader_id> found;
  bool between = false;
  for (auto& p : procs) {
    if (p.pid != p.pgrp || p.state == 'Z')
      continue;
    auto m = env(p.pid, marker);
    if (m == marker::present)
      found = leader_id{p.pid, p.start_ticks};
    between = between || m == marker::changing;
  }
  if (changing)
    *changing = !found && between;
  return found;
}

std::optional<leader_id>
find_marked_leader_settled(const std::function<std::optional<leader_id>(bool* changing)>& find) {
  for (int attempt = 0;; ++attempt) {
    bool changing = false;
    auto found = find(&changing);
    if (found || !changing || attempt == 9)
      return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

scan_result scan_for_cleanup(const scan_request& req, const std::vector<proc_entry>& procs,
                             std::vector<pid_t> members,
                             const std::function<marker(pid_t, std::string_view)>& env,
                             const std::function<bool(const proc_entry&)>& kill) {
  auto needle = "CQ_ALLOCATION_ID=" + req.allocation;
  auto self = ::getpid();
  auto me = ::geteuid();
  scan_result out;
  std::sort(members.begin(), members.end());
  for (auto& p : procs) {
    if (p.pid == self || p.state == 'Z' || p.state == 'X')
      continue;
    bool in_group = std::binary_search(members.begin(), members.end(), p.pid);
    if (!in_group && p.start_ticks < req.leader.start_ticks)
      continue;
    bool target = in_group || (req.by_group && p.pgrp == req.leader.pid && p.pid != req.leader.pid);
    bool suspect = false;
    bool changing = false;
    if (!target) {
      auto m = env(p.pid, needle);
      target = m == marker::present;
      // One between two programs (any owner's) is read again by the next
      // scan: the scan is not empty meanwhile. An owner the scan did not
      // read counts as ours: a hold, not a miss.
      changing = m == marker::changing;
      suspect = changing ||
                (m == marker::unreadable && (p.uid == me || p.uid == proc_entry::unknown_uid));
    }
    if (!target && !suspect)
      continue;
    if (target)
      kill(p);
    if (out.count++ < 16)
      out.found += fmt::format("{}pid {} (start {}, state {}{})", out.found.empty() ? "" : ", ",
                               p.pid, p.start_ticks, p.state,
                               changing  ? ", between two programs"
                               : suspect ? ", environment unreadable"
                                         : "");
  }
  if (out.count > 16)
    out.found += fmt::format(" and {} more", out.count - 16);
  return out;
}

} // namespace cq::node
