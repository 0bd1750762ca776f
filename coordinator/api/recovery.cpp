// Recovery: the api rebuilds its read model from the store's snapshot and
// spawns every node actor and the actors of jobs that are placed (or hold a
// grant, or resume); queued jobs wait without one (parked.cpp). ADR 0001:
// the store is the truth.
#include "api/state.hpp"
#include "policy/transitions.hpp"

#include <algorithm>

namespace cq::coord::api_impl {

void recover(api_ptr self, std::shared_ptr<snapshot> snap) {
  auto& st = self->state;
  for (auto& t : snap->tokens)
    if (auto r = parse_role(t.role); r && t.revoked_ms == 0)
      st.tokens[t.hash] = identity{t.identity, *r, t.created_ms};
  for (auto& i : snap->invites)
    st.invites[i.hash] = i;
  for (auto& o : snap->operations)
    st.operations[o.id] = o;
  schedule_expiry(self);
  // Each node's active grant, else its latest (a node has one active at most).
  for (auto& g : snap->grants) {
    auto& cur = st.grants[g.node];
    if (cur.state != "active" && (g.state == "active" || g.created_ms >= cur.created_ms))
      cur = g;
  }
  st.last_event.insert(snap->event_seqs.begin(), snap->event_seqs.end());
  for (auto& p : snap->profiles)
    st.profiles[p.key] = p;
  for (auto& n : snap->nodes) {
    auto& e = st.nodes[n.name];
    e.row = n;
    e.info.name = n.name;
    e.info.state = n.state;
    e.info.enabled = n.enabled;
    e.info.disabled_reason = n.disabled_reason;
    e.handle = spawn_node(self->system(), st.ctx, n);
    self->link_to(e.handle);
  }
  std::unordered_map<std::string, bus::allocation_info> live_alloc;
  for (auto& a : snap->allocations) {
    st.allocs[a.job].push_back(a);
    if (a.state != alloc_state::finished)
      live_alloc[a.job] = a;
  }
  std::size_t live = 0;
  auto& defects = st.ctx->cfg.defects;
  auto& infos = snap->job_infos;
  if (defects.forget_queued_on_recovery)
    std::erase_if(snap->jobs, [&](const job_key& k) {
      auto i = infos.find(k.id);
      if (i->second.state != job_state::queued)
        return false;
      infos.erase(i);
      return true;
    });
  // Deliberate defect (cq-sim's terminal_changed): it loads the row as queued,
  // past the state machine, which has no edge out of a terminal state.
  if (defects.rerun_failed_on_recovery)
    for (auto& [id, info] : infos)
      if (info.state == job_state::failed && info.reason == bus::reason::exit_code)
        info.state = job_state::queued;
  if (defects.requeue_live_on_recovery)
    for (auto& k : snap->jobs)
      if (live_alloc.erase(k.id))
        policy::set_state(infos.at(k.id), job_state::queued);
  // The read model takes the snapshot's map of every job whole (no job is
  // copied); the keys, in seq order, place each one.
  auto n = snap->jobs.size();
  st.jobs = std::move(infos);
  st.seq_of.reserve(n);
  st.order_key.reserve(n);
  st.last_event.reserve(n);
  // The rows come in seq order: each goes at the end of by_seq.
  for (auto& k : snap->jobs) {
    auto& info = st.jobs.at(k.id);
    if (!k.spec_digest.empty())
      st.spec_digest[k.id] = k.spec_digest;
    st.by_seq.emplace_hint(st.by_seq.end(), k.seq, k.id);
    st.seq_of[k.id] = k.seq;
    st.next_seq = std::max(st.next_seq, k.seq + 1);
    auto lvl = level_index(info.priority);
    place_in_order(st, k.id, lvl, k.rank, k.seq, is_terminal(info.state));
    count_queued(st, std::nullopt, info.state, lvl, lvl);
  }
  // Every id into the sorted set in its order: each insert at the end.
  std::vector<const std::string*> sorted;
  sorted.reserve(n);
  for (auto& k : snap->jobs)
    sorted.push_back(&k.id);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return *a < *b; });
  for (auto* id : sorted)
    st.ids.emplace_hint(st.ids.end(), *id);
  std::set<std::string> granted; // jobs holding an active grant (their actor holds it)
  for (auto& [node, g] : st.grants)
    if (g.state == "active")
      granted.insert(g.job);
  for (auto& k : snap->jobs) {
    auto& id = k.id;
    auto state = st.jobs.at(id).state;
    if (is_terminal(state))
      continue;
    std::optional<bus::allocation_info> a;
    node_actor node;
    if (auto i = live_alloc.find(id); i != live_alloc.end()) {
      a = i->second;
      if (auto n = st.nodes.find(a->node); n != st.nodes.end())
        node = n->second.handle;
    }
    if (a && !node) {
      spdlog::error("job {}: allocation {} is on unknown node {}", id, a->id, a->node);
      a.reset();
    }
    // The node actor learns of the allocation before any heartbeat this actor
    // forwards, so a heartbeat that overtakes the allocation actor's attach
    // does not stop the work as a stray (found by cq-sim, fault kind anywhere).
    if (a)
      self->send(node, expect_atom::value, a->id);
    // The resume flag is not stored: it is the last finished attempt's outcome.
    bool resume = false;
    if (auto history = st.allocs.find(id); history != st.allocs.end())
      for (auto h = history->second.rbegin(); h != history->second.rend(); ++h)
        if (h->state == alloc_state::finished) {
          resume = h->reason == bus::reason::checkpointed;
          break;
        }
    if (state == job_state::queued && !a && !resume && !granted.count(id)) {
      park(self, id); // waits without an actor (parked.cpp)
      ++live;
      continue;
    }
    job_row row;
    row.info = st.jobs.at(id);
    row.seq = k.seq, row.rank = k.rank, row.spec_digest = k.spec_digest;
    auto [waiting, failed_dep] = classify_deps(st, row.info);
    std::uint64_t last_event = 0;
    if (auto e = snap->event_seqs.find(id); e != snap->event_seqs.end())
      last_event = e->second;
    st.live[id] =
        spawn_job(self->system(), st.ctx, row, a, node, waiting, failed_dep, resume, last_event);
    self->link_to(st.live[id]);
    ++live;
  }
  // Active grants: the job holds its own, and the grant's actor tells the
  // scheduler (a grant whose job is gone is left as it is: the job's end
  // committed its end, or the job never came back).
  for (auto& [node, g] : st.grants)
    if (g.state == "active")
      if (auto j = st.live.find(g.job); j != st.live.end()) {
        self->send(j->second, grant_atom::value, g);
        st.grant_actors[node] = spawn_grant(self->system(), st.ctx, g);
        self->link_to(st.grant_actors[node]);
      }
  schedule_history(self, 0);
  spdlog::info("recovered {} jobs ({} live), {} nodes", snap->jobs.size(), live,
               snap->nodes.size());
}

} // namespace cq::coord::api_impl
