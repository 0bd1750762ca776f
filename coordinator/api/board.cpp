// The board (cq-coordinator --board FILE, SPEC section 8, and the status
// page's data, --http): a JSON snapshot of nodes (lanes, holds, faults), the
// queue with why its first jobs wait, and the latest jobs to end. The api marks it
// stale on every change it hears of; a coalesced rewrite follows at most
// board_interval later, so a storm of changes costs a few writes a second.
// The api only builds the snapshot and hands its bytes to context::write_board;
// in production that is coordinator/adapters/board_writer.cpp, which replaces
// the file atomically on a thread of its own (no file I/O on an actor's thread).
#include "api/state.hpp"
#include "cq/json.hpp"

namespace cq::coord {

namespace api_impl {

namespace {
constexpr auto board_interval = std::chrono::milliseconds(250);
constexpr std::size_t board_queue_max = 1000; ///< jobs listed; the counts cover all
constexpr std::size_t board_reasons_max = 10; ///< queued jobs explained per snapshot
} // namespace

void mark_board(api_ptr self) {
  auto& st = self->state;
  if (!st.ctx->write_board || st.board_scheduled)
    return;
  st.board_scheduled = true;
  self->delayed_send(self, board_interval, board_atom::value);
}

std::string board_json(api_ptr self, const std::map<std::string, bus::string_list>& why) {
  auto& st = self->state;
  nlohmann::ordered_json out;
  out["at_ms"] = now_ms(self, *st.ctx);
  auto& nodes = out["nodes"] = nlohmann::ordered_json::array();
  for (auto& [name, n] : st.nodes)
    nodes.push_back(cq::to_json(node_view(self, n)));
  // Counted by the state's name and the priority (views into the entries,
  // which outlive this function): no job is copied, and only the listed
  // ones are read past their state (the board is rewritten up to 4 times a
  // second, and 100,000 copies took tens of milliseconds).
  std::map<std::string_view, std::uint64_t> by_state;
  std::map<std::pair<std::string_view, std::string_view>, std::uint64_t> by_priority;
  auto& queue = out["queue"] = nlohmann::ordered_json::array();
  std::array<std::uint64_t, 3> pos{};
  for (auto& [k, id] : st.order) {
    const bus::job_info& j = id->second;
    auto state = to_string(j.state);
    ++by_state[state];
    ++by_priority[{state, j.priority}];
    std::uint64_t position = j.position;
    if (j.state == job_state::queued)
      position = ++pos[std::get<0>(k)];
    if (queue.size() >= board_queue_max)
      continue;
    nlohmann::ordered_json e;
    e["id"] = j.id, e["name"] = j.name, e["owner"] = j.owner;
    e["state"] = state, e["priority"] = j.priority, e["position"] = position;
    e["node"] = j.node, e["allocation"] = j.allocation, e["attempt"] = j.attempt;
    e["gpus"] = j.gpus, e["lanes"] = j.lanes, e["effective_ram_bytes"] = j.effective_ram_bytes;
    e["submitted_ms"] = j.submitted_ms, e["started_ms"] = j.started_ms;
    e["lease_ms"] = j.lease_ms, e["on_hold"] = j.on_hold;
    auto& pending = e["after"] = nlohmann::ordered_json::array();
    for (auto& d : j.after)
      if (auto dj = st.jobs.find(d);
          dj != st.jobs.end() && dj->second.state != job_state::succeeded)
        pending.push_back(d);
    if (auto w = why.find(j.id); w != why.end())
      e["waiting"] = w->second;
    queue.push_back(std::move(e));
  }
  auto& counts = out["counts"] = nlohmann::ordered_json::object();
  for (auto& [state, n] : by_state)
    counts[std::string(state)] = n;
  auto& jobs_by = out["jobs_by"] = nlohmann::ordered_json::array();
  for (auto& [k, n] : by_priority)
    jobs_by.push_back({{"state", k.first}, {"priority", k.second}, {"jobs", n}});
  out["queue_listed"] = queue.size();
  auto& recent = out["recent"] = nlohmann::ordered_json::array();
  for (auto it = st.recent_finished.rbegin(); it != st.recent_finished.rend(); ++it) {
    auto f = st.jobs.find(*it);
    if (f == st.jobs.end())
      continue;
    auto& j = f->second;
    nlohmann::ordered_json e;
    e["id"] = j.id, e["name"] = j.name, e["owner"] = j.owner;
    e["state"] = to_string(j.state), e["reason"] = to_string(j.reason);
    e["exit_code"] = j.exit_code ? nlohmann::ordered_json(*j.exit_code) : nlohmann::ordered_json();
    e["node"] = j.node, e["priority"] = j.priority, e["submitted_ms"] = j.submitted_ms;
    e["started_ms"] = j.started_ms, e["finished_ms"] = j.finished_ms;
    recent.push_back(std::move(e));
  }
  out["events_readers"] = st.waiters.size();
  return out.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void write_board(api_ptr self) {
  auto& st = self->state;
  st.board_scheduled = false;
  if (!st.ctx->write_board)
    return;
  // The scheduler's reasons for the first queued jobs that wait for nothing a
  // person or a dependency holds (the page's "waiting" lines), then the
  // snapshot; without them when the scheduler cannot say.
  auto ids = explainable_queued(st, board_reasons_max);
  if (ids.empty()) {
    st.ctx->write_board(board_json(self, {}));
    return;
  }
  explain_queued(self, std::move(ids), [self](auto reasons) {
    std::map<std::string, bus::string_list> why;
    if (reasons)
      for (auto& r : *reasons)
        why[r.job] = std::move(r.waiting);
    self->state.ctx->write_board(board_json(self, why));
  });
}

} // namespace api_impl

} // namespace cq::coord
