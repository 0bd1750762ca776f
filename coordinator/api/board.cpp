// The board (cq-coordinator --board FILE, SPEC section 8): a JSON snapshot of
// nodes (lanes, holds, faults) and the queue, for dashboards. The api marks it
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
} // namespace

void mark_board(api_ptr self) {
  auto& st = self->state;
  if (!st.ctx->write_board || st.board_scheduled)
    return;
  st.board_scheduled = true;
  self->delayed_send(self, board_interval, board_atom::value);
}

std::string board_json(api_ptr self) {
  auto& st = self->state;
  nlohmann::ordered_json out;
  out["at_ms"] = now_ms(self, *st.ctx);
  auto& nodes = out["nodes"] = nlohmann::ordered_json::array();
  for (auto& [name, n] : st.nodes)
    nodes.push_back(cq::to_json(node_view(self, n)));
  std::map<std::string, std::uint64_t> counts;
  auto& queue = out["queue"] = nlohmann::ordered_json::array();
  std::array<std::uint64_t, 3> pos{};
  for (auto& [k, id] : st.order) {
    bus::job_info j = id->second;
    ++counts[std::string(to_string(j.state))];
    if (j.state == job_state::queued)
      j.position = ++pos[std::get<0>(k)];
    if (queue.size() >= board_queue_max)
      continue;
    nlohmann::ordered_json e;
    e["id"] = j.id, e["name"] = j.name, e["owner"] = j.owner;
    e["state"] = to_string(j.state), e["priority"] = j.priority, e["position"] = j.position;
    e["node"] = j.node, e["allocation"] = j.allocation, e["attempt"] = j.attempt;
    e["gpus"] = j.gpus, e["lanes"] = j.lanes, e["effective_ram_bytes"] = j.effective_ram_bytes;
    e["submitted_ms"] = j.submitted_ms, e["started_ms"] = j.started_ms;
    queue.push_back(std::move(e));
  }
  out["counts"] = counts;
  out["queue_listed"] = queue.size();
  return out.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

} // namespace api_impl

} // namespace cq::coord
