// Queued jobs without an actor. A job actor costs a few kilobytes, and most
// queued jobs only wait: the api keeps their row in its read model and puts
// them in the scheduler's queue itself (an entry with no handle). The job's
// actor is spawned when the scheduler places it (the scheduler sends the
// placement here) or when anything else acts on it (a cancel, hold, move,
// grant, event or failed dependency); from then on it is the job's only
// writer, as job_actor.cpp's invariants say, until the job ends.
//
// Invariants:
//  1. A job without an actor is queued and has no live allocation, no grant
//     and no pending resume; the api commits nothing for it but its submit.
//  2. At most one actor per job: st.live holds it from its spawn to the job's
//     terminal row.
//  3. The actor spawned for a queued job the api enqueued does not enqueue
//     itself again (its entry is in the scheduler's queue, or should not be).
//  4. What the api sends after a commit it waited for is a re-key, never an
//     enqueue, for a job that was queued before it: the scheduler may have
//     placed it meanwhile (its placement waits in our mailbox), and a job
//     queued again while it holds an allocation would be placed twice.
#include "api/state.hpp"

namespace cq::coord::api_impl {

namespace {

/// Whether job `id`'s last finished attempt checkpointed: its next start
/// resumes (the flag is not stored).
bool resumes(api_state& st, const std::string& id) {
  auto h = st.allocs.find(id);
  if (h == st.allocs.end())
    return false;
  for (auto a = h->second.rbegin(); a != h->second.rend(); ++a)
    if (a->state == alloc_state::finished)
      return a->reason == bus::reason::checkpointed;
  return false;
}

/// The row a job actor starts from, out of the read model (no argv: the
/// store keeps it).
job_row row_of(api_state& st, const std::string& id) {
  job_row row;
  auto& node = *st.jobs.find(id);
  auto& entry = node.second;
  row.info = entry;
  row.info.argv.clear();
  row.seq = entry.seq;
  if (entry.order)
    row.rank = std::get<1>(*entry.order);
  row.spec_digest = spec_digest_of(st, node);
  return row;
}

/// enqueue_parked once the job's read-model entry `e` is found; with
/// `rekey`, the entry replaces the job's in the scheduler's queue and is
/// dropped there if the job is no longer queued (rekey_parked).
void enqueue_entry(api_ptr self, job_entry& e, std::vector<queue_entry>* batch,
                   bool rekey = false) {
  auto& st = self->state;
  if (e.state != job_state::queued || e.on_hold)
    return;
  // A succeeded dependency stays so, and one gone from the history stays
  // gone: only those from deps_met on are looked up.
  for (; e.deps_met < e.after.size(); ++e.deps_met)
    if (auto dep = st.jobs.find(e.after[e.deps_met]);
        dep != st.jobs.end() && dep->second.state != job_state::succeeded)
      return; // it waits (a failed dependency spawns its actor, which fails it; an
              // unknown one ended before the history window: classify_deps)
  std::int64_t rank = 0;
  if (e.order)
    rank = std::get<1>(*e.order);
  auto q = queue_entry_of(*st.ctx, e, e.seq, rank);
  if (batch)
    batch->push_back(std::move(q));
  else if (rekey)
    self->send(st.ctx->scheduler, rekey_atom::value, std::move(q));
  else
    self->send(st.ctx->scheduler, enqueue_atom::value, std::move(q));
}

} // namespace

job_actor actor_of(api_ptr self, const std::string& id) {
  auto& st = self->state;
  if (auto a = st.live.find(id); a != st.live.end())
    return a->second;
  auto j = st.jobs.find(id);
  if (j == st.jobs.end() || is_terminal(j->second.state))
    return {};
  // Invariant 1: only a queued job is without an actor.
  if (j->second.state != job_state::queued) {
    spdlog::critical("job {} is {} without an actor", id, j->second.state);
    std::abort();
  }
  auto [waiting, failed_dep] = classify_deps(st, j->second, false);
  auto row = row_of(st, id);
  auto actor = spawn_job(self->system(), st.ctx, std::move(row), std::nullopt, node_actor{},
                         std::move(waiting), std::move(failed_dep), resumes(st, id),
                         j->second.last_event, true);
  self->link_to(actor);
  st.live[id] = actor;
  return actor;
}

void enqueue_parked(api_ptr self, const std::string& id, std::vector<queue_entry>* batch,
                    bool rekey) {
  auto& st = self->state;
  if (st.live.count(id))
    return; // its actor enqueues (or re-keys) it
  if (auto j = st.jobs.find(id); j != st.jobs.end())
    enqueue_entry(self, j->second, batch, rekey);
}

void rekey_parked(api_ptr self, const std::string& id) {
  enqueue_parked(self, id, nullptr, true);
}

void park(api_ptr self, const std::string& id, std::vector<queue_entry>* batch) {
  park(self, id, self->state.jobs.at(id), batch);
}

void park(api_ptr self, const std::string& id, job_entry& e, std::vector<queue_entry>* batch) {
  auto& st = self->state;
  auto [waiting, failed_dep] = classify_deps(st, e);
  if (!failed_dep.empty())
    actor_of(self, id); // fails it at once
  else if (waiting.empty() && !st.live.count(id))
    enqueue_entry(self, e, batch);
}

} // namespace cq::coord::api_impl
