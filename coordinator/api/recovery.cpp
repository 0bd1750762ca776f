// Recovery: the api rebuilds its read model from the store's snapshot and
// spawns every node actor and the actors of jobs that are placed (or hold a
// grant, or resume); queued jobs wait without one (parked.cpp). ADR 0001:
// the store is the truth.
#include "api/history.hpp"
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
    st.operations[o.id] = op_record::of(o);
  schedule_expiry(self);
  // Each node's active grant, else its latest (a node has one active at most).
  for (auto& g : snap->grants) {
    auto& cur = st.grants[g.node];
    if (cur.state != "active" && (g.state == "active" || g.created_ms >= cur.created_ms))
      cur = g;
  }
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
  auto& keys = snap->jobs;
  auto& infos = snap->job_infos; // infos[i] is keys[i]'s (until the loop below takes them)
  if (defects.forget_queued_on_recovery) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (infos[i].state != job_state::queued) {
        keys[kept] = std::move(keys[i]);
        infos[kept++] = std::move(infos[i]);
      }
    keys.resize(kept);
    infos.resize(kept);
  }
  // Deliberate defect (cq-sim's terminal_changed): it loads the row as queued,
  // past the state machine, which has no edge out of a terminal state.
  if (defects.rerun_failed_on_recovery)
    for (auto& info : infos)
      if (info.state == job_state::failed && info.reason == bus::reason::exit_code)
        info.state = job_state::queued;
  if (defects.requeue_live_on_recovery)
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (live_alloc.erase(keys[i].id))
        policy::set_state(infos[i], job_state::queued);
  // Each job's fields move into its read-model entry (no job is copied). The
  // rows come in seq order: each goes at the end of by_seq, and takes its
  // last event seq from event_seqs (in seq order too).
  auto n = keys.size();
  st.jobs.reserve(n);
  std::vector<job_entry*> entries; // entries[i] is keys[i]'s
  entries.reserve(n);
  std::vector<const std::string*> sorted; // the ids, to be sorted
  sorted.reserve(n);
  // The finished jobs by their end (the snapshot's "recent" list), and by
  // (end, seq) for the history's passes: taken in this one walk over the
  // jobs, each a read-model entry of its own in memory.
  std::vector<std::pair<std::int64_t, const std::string*>> ended;
  std::vector<std::pair<std::int64_t, std::uint64_t>> ends; // (end, seq): ended_order
  auto ev = snap->event_seqs.begin();
  for (std::size_t i = 0; i < n; ++i) {
    auto& k = keys[i];
    auto [at, fresh] = st.jobs.try_emplace(k.id, std::move(infos.front()));
    if (!fresh) {
      // No index keeps ids unique in the store (ADR 0046): damage is loud,
      // and found here at no cost.
      st.ctx->fatal(fmt::format("the state database has a damaged row: jobs row {}: id: also "
                                "the id of the job submitted as seq {} (cq-coordinator --check "
                                "lists every damaged row)",
                                k.id, at->second.seq));
      return;
    }
    auto& node = *at;
    infos.pop_front(); // its block is free for the next entry
    auto& e = node.second;
    entries.push_back(&e);
    sorted.push_back(&node.first);
    e.seq = k.seq;
    while (ev != snap->event_seqs.end() && ev->first < k.seq)
      ++ev;
    if (ev != snap->event_seqs.end() && ev->first == k.seq)
      e.last_event = ev->second;
    keep_spec_digest(st, node, k.spec_digest);
    st.by_seq.emplace_hint(st.by_seq.end(), k.seq, &node);
    st.next_seq = std::max(st.next_seq, k.seq + 1);
    auto lvl = level_index(e.priority);
    place_in_order(st, node, lvl, k.rank, k.seq, is_terminal(e.state));
    count_queued(st, std::nullopt, e.state, lvl, lvl);
    if (is_terminal(e.state)) {
      ended.emplace_back(e.finished_ms, &e.id);
      if (e.finished_ms > 0)
        ends.emplace_back(e.finished_ms, k.seq);
    }
  }
  std::sort(ends.begin(), ends.end()); // a sorted range builds the set in linear time
  st.ended_order.insert(ends.begin(), ends.end());
  infos.clear();
  // A job's seq is never handed out again: history expiry keeps the events
  // of the job with the newest event row after the job itself is gone.
  if (!snap->event_seqs.empty())
    st.next_seq = std::max(st.next_seq, snap->event_seqs.back().first + 1);
  // Allocations whose job is no longer stored (one that ended after its job
  // waits for a later expiry pass, ADR 0046) are not history of any job: a
  // later job of the same client id must not inherit them.
  std::erase_if(st.allocs, [&](auto& kv) { return !st.jobs.count(kv.first); });
  // The snapshot's "recent" list: the latest jobs to end, oldest first.
  {
    auto keep = std::min(ended.size(), recent_finished_max);
    std::partial_sort(ended.begin(), ended.begin() + static_cast<std::ptrdiff_t>(keep), ended.end(),
                      [](auto& a, auto& b) { return a.first > b.first; });
    for (std::size_t i = keep; i-- > 0;)
      note_finished(st, *ended[i].second);
  }
  st.ids.assign(std::move(sorted)); // it sorts them, once
  std::set<std::string> granted;    // jobs holding an active grant (their actor holds it)
  for (auto& [node, g] : st.grants)
    if (g.state == "active")
      granted.insert(g.job);
  std::vector<queue_entry> parked;  // their queue entries, sent as one message
  parked.reserve(n - ended.size()); // at most one per job not ended: never moved
  for (std::size_t i = 0; i < n; ++i) {
    auto& k = keys[i];
    auto& id = k.id;
    auto& entry = *entries[i];
    auto state = entry.state;
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
      park(self, id, entry, &parked); // waits without an actor (parked.cpp)
      ++live;
      continue;
    }
    job_row row;
    row.info = entry;
    row.seq = k.seq, row.rank = k.rank, row.spec_digest = k.spec_digest;
    auto [waiting, failed_dep] = classify_deps(st, row.info);
    st.live[id] = spawn_job(self->system(), st.ctx, row, a, node, waiting, failed_dep, resume,
                            entry.last_event);
    self->link_to(st.live[id]);
    ++live;
  }
  // Recovery's memory (ADR 0051, 0064) stays prefaulted until the scheduler
  // has taken the parked jobs too: its map of them is the last bulk of it.
  auto recovered = [ctx = st.ctx] {
    if (ctx->recovered)
      ctx->recovered();
  };
  if (!parked.empty())
    self->request(st.ctx->scheduler, caf::infinite, enqueue_atom::value, std::move(parked))
        .then(recovered, [recovered](caf::error&) { recovered(); });
  else
    recovered();
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
  schedule_history(self, 0); // the oldest end, if any (else the first end arms it, api.cpp)
  cap_history(self, false);  // a store kept with a larger bound, or none
  spdlog::info("recovered {} jobs ({} live), {} nodes", snap->jobs.size(), live,
               snap->nodes.size());
}

} // namespace cq::coord::api_impl
