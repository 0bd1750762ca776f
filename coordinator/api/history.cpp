// Finished jobs' history: forgotten after [retention] history (ADR 0031),
// beyond the newest [retention] history_jobs (ADR 0071), or now by `cq
// clean` (an owner's or operator's request). Each deletes its rows in one
// store transaction and then drops the same jobs from memory.
#include "api/history.hpp"
#include "cq/units.hpp"

namespace cq::coord::api_impl {

namespace {

/// History passes are grouped too: one per 24th of its window (at least 1 s).
std::int64_t history_slack_ms(const context& ctx) {
  return std::max<std::int64_t>(ctx.cfg.history_window_ms / 24, 1000);
}

/// Whether `j` is a finished job that history_expiry `x` forgets: the
/// store's rule.
bool expires(const job_entry& j, const history_expiry& x) {
  return is_terminal(j.state) && j.finished_ms > 0 &&
         (j.finished_ms < x.before_ms || (j.finished_ms == x.before_ms && j.seq < x.before_seq));
}

/// Tells each node that ran the `jobs` (by id) to remove their directories
/// now (ADR 0072): one forget order per node and per forget_order_items
/// allocations, sent once; a node down or not heard from since the start
/// gets them with its next heartbeat (node_actor.cpp).
void tell_nodes(api_ptr self, const std::vector<const std::string*>& jobs) {
  auto& st = self->state;
  std::map<std::string, std::vector<bus::forget_order>> orders; // by node
  for (auto* job : jobs) {
    auto a = st.allocs.find(*job);
    if (a == st.allocs.end())
      continue;
    std::map<std::string, bus::string_list> here; // the job's allocations by node
    for (auto& al : a->second)
      here[al.node].push_back(al.id);
    for (auto& [node, ids] : here) {
      // A job's allocations go in one order unless they alone fill one.
      auto& list = orders[node];
      if (list.empty() || list.back().jobs.size() >= bus::forget_order_items ||
          list.back().allocations.size() + ids.size() > bus::forget_order_items)
        list.emplace_back();
      list.back().jobs.push_back(*job);
      for (auto& id : ids) {
        if (list.back().allocations.size() >= bus::forget_order_items)
          list.emplace_back().jobs.push_back(*job);
        list.back().allocations.push_back(id);
      }
    }
  }
  for (auto& [node, list] : orders)
    if (auto n = st.nodes.find(node); n != st.nodes.end() && n->second.handle)
      for (auto& o : list)
        self->send(n->second.handle, std::move(o));
}

using job_iter = decltype(api_state::jobs)::iterator;

/// The jobs in memory that history_expiry `x` forgets, each once, in the
/// order they ended: the store's rule applied to a prefix of ended_order.
std::vector<job_iter> expiring(api_state& st, const history_expiry& x) {
  std::vector<job_iter> out;
  std::unordered_set<const std::string*> seen; // once, should a job have two ends in the set
  auto end = st.ended_order.lower_bound(std::pair{x.before_ms, x.before_seq});
  for (auto e = st.ended_order.begin(); e != end; ++e) // seqs start at 1: (ms, 0) is "before ms"
    if (auto s = st.by_seq.find(e->second); s != st.by_seq.end())
      if (auto it = st.jobs.find(s->second->first);
          it != st.jobs.end() && expires(it->second, x) && seen.insert(&it->first).second)
        out.push_back(it);
  return out;
}

/// `batch` (which forgets by `x`) with the replay record each forgotten job
/// leaves (ADR 0073): a job submitted with a client id within the operations
/// window keeps, until the window has passed since its submission, the
/// digest of its spec and a short reply, so that a submit retried with the
/// id replays instead of making the job again. The rows are operations of
/// kind "submit" keyed by the job's id: stored, reloaded at a start and
/// expired as every operation is.
change_batch with_replays(api_state& st, std::int64_t now, const history_expiry& x,
                          change_batch batch) {
  auto window = st.ctx->cfg.operation_window_ms;
  for (auto it : expiring(st, x)) {
    auto& j = it->second;
    auto digest = spec_digest_of(st, *it);
    if (digest.empty() || (window > 0 && j.submitted_ms < now - window) ||
        st.operations.count(it->first))
      continue;
    // What a replay answers: who and what became of it, not its command.
    bus::job_info info;
    info.id = j.id, info.name = j.name, info.owner = j.owner, info.state = j.state;
    info.reason = j.reason, info.node = j.node, info.allocation = j.allocation;
    info.attempt = j.attempt, info.exit_code = j.exit_code, info.signal = j.signal;
    info.submitted_ms = j.submitted_ms, info.started_ms = j.started_ms;
    info.finished_ms = j.finished_ms, info.priority = j.priority;
    info.array = j.array, info.array_index = j.array_index;
    // As a job row's record: only the fields set, about 250 bytes.
    batch.push_back(operation_row{it->first, "submit", std::move(digest), bus::encode_record(info),
                                  j.submitted_ms});
  }
  return batch;
}

/// Forgets from memory the jobs the store's history_expiry `x` removed (the
/// same rule, applied to the same rows), keeps the replay records `batch`
/// committed with it, and tells the jobs' nodes. Returns how many.
std::size_t forget_finished(api_ptr self, const history_expiry& x, const change_batch& batch) {
  auto& st = self->state;
  // The jobs first (nothing changes while that may fail), then out of every
  // index, then out of the map: the indexes point at their entries' keys.
  auto expired = expiring(st, x);
  st.ended_order.erase(st.ended_order.begin(),
                       st.ended_order.lower_bound(std::pair{x.before_ms, x.before_seq}));
  bool replays = false;
  for (auto& change : batch)
    if (auto* o = std::get_if<operation_row>(&change))
      replays = st.operations.try_emplace(o->id, op_record::of(*o)).second || replays;
  if (replays)
    schedule_expiry(self);
  if (expired.empty())
    return 0;
  std::vector<const std::string*> ids;         // in the order they ended
  std::unordered_set<const std::string*> gone; // out of the sorted ids in one pass
  for (auto it : expired) {
    ids.push_back(&it->first);
    gone.insert(&it->first);
  }
  tell_nodes(self, ids);
  st.ids.erase(gone);
  st.ids_prefix = 0;
  st.names.reset();
  st.arrays.reset();
  for (auto it : expired) {
    auto& id = it->first;
    if (auto s = st.by_seq.find(it->second.seq); s != st.by_seq.end() && s->second == &*it)
      st.by_seq.erase(s);
    if (it->second.order)
      st.order.erase(*it->second.order);
    st.allocs.erase(id);
    st.spec_digest.erase(&id);
    st.jobs.erase(it);
  }
  return expired.size();
}

} // namespace

void schedule_history(api_ptr self, std::int64_t ended_ms) {
  auto& st = self->state;
  auto window = st.ctx->cfg.history_window_ms;
  if (st.history_scheduled || window <= 0)
    return;
  if (ended_ms == 0 && !st.ended_order.empty()) // the oldest finished job's end, if any
    ended_ms = st.ended_order.begin()->first;
  if (ended_ms == 0)
    return;
  auto due = ended_ms + window + history_slack_ms(*st.ctx) - now_ms(self, *st.ctx);
  st.history_scheduled = true;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 1)),
                     expire_atom::value, true);
}

void expire_history(api_ptr self) {
  auto& st = self->state;
  auto before = now_ms(self, *st.ctx) - st.ctx->cfg.history_window_ms;
  if (st.ended_order.empty() || st.ended_order.begin()->first >= before) { // none expired
    st.history_scheduled = false;
    schedule_history(self, 0);
    return;
  }
  auto batch = std::make_shared<const change_batch>(
      with_replays(st, now_ms(self, *st.ctx), history_expiry{before}, {history_expiry{before}}));
  commit_expiry(
      self, *batch, "finished jobs past their history window",
      [=] {
        auto& st = self->state;
        auto n = forget_finished(self, history_expiry{before}, *batch);
        spdlog::info("forgot {} finished jobs that ended more than {} ms ago", n,
                     st.ctx->cfg.history_window_ms);
        st.history_scheduled = false;
        schedule_history(self, 0);
      },
      [=] {
        self->delayed_send(self, std::chrono::milliseconds(history_slack_ms(*self->state.ctx)),
                           expire_atom::value, true);
      });
}

std::string history_hint(const context& ctx) {
  auto window = ctx.cfg.history_window_ms;
  auto most = ctx.cfg.history_jobs;
  if (window > 0 && most > 0)
    return fmt::format(" (finished jobs are kept for {}, at most {} of them)",
                       format_duration_ms(static_cast<std::uint64_t>(window)), most);
  if (window > 0)
    return fmt::format(" (finished jobs are kept for {})",
                       format_duration_ms(static_cast<std::uint64_t>(window)));
  if (most > 0)
    return fmt::format(" (at most {} finished jobs are kept)", most);
  return {};
}

void cap_history(api_ptr self, bool ended) {
  auto& st = self->state;
  auto keep = st.ctx->cfg.history_jobs;
  if (keep == 0 || st.history_capping) // jobs that end meanwhile: checked after the pass
    return;
  // Over by a 64th of the bound after an end (by any at a start): a pass. A
  // pass costs a walk over every job's id (ids.erase), so with many live jobs
  // and a small bound they are a 256th of the jobs held apart at least.
  auto over = ended ? std::max<std::uint64_t>({keep / 64, st.jobs.size() / 256, 1}) : 1;
  auto& ends = st.ended_order;
  if (ends.size() < keep + over)
    return;
  // The oldest beyond `keep` go, exactly those: (end, seq) pairs are unique,
  // so jobs that ended in the same millisecond go in submission order.
  auto first_kept = std::next(ends.begin(), static_cast<std::ptrdiff_t>(ends.size() - keep));
  // What earlier passes left is found by reading whole tables: every 16th
  // pass does (the window's passes do too, but with the bound the limit they
  // may never forget a job, so never commit).
  history_expiry x{first_kept->first, first_kept->second, ++st.cap_passes % 16 == 0};
  st.history_capping = true;
  auto batch =
      std::make_shared<const change_batch>(with_replays(st, now_ms(self, *st.ctx), x, {x}));
  commit_expiry(
      self, *batch, "finished jobs beyond [retention] history_jobs",
      [=] {
        auto& st = self->state;
        auto n = forget_finished(self, x, *batch);
        spdlog::info("forgot {} finished jobs: more than {} were kept", n, keep);
        st.history_capping = false;
        cap_history(self, true); // jobs that ended while it committed
      },
      [=] { self->state.history_capping = false; }); // the next end tries again
}

void note_ended(api_ptr self, const std::string& id) {
  auto& st = self->state;
  auto j = st.jobs.find(id);
  if (j == st.jobs.end() || j->second.finished_ms <= 0)
    return;
  // A job heard of only after a pass that its (end, seq) falls below (its end
  // was committed around that pass's) is the oldest here: the next pass takes
  // it from the store, if the store still has it, and then from memory.
  st.ended_order.emplace(j->second.finished_ms, j->second.seq);
  cap_history(self, true);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::clean_req& body) {
  // At most a century back: `now - older` stays far from overflow.
  constexpr std::uint64_t century_ms = 100ull * 365 * 24 * 3600 * 1000;
  auto before = now - static_cast<std::int64_t>(std::min(body.older_than_ms, century_ms));
  // A dry run: the jobs the same rule would forget, counted in memory.
  if (body.dry_run.value_or(false))
    return api_reply{bus::clean_rep{expiring(self->state, history_expiry{before}).size(), true}};
  auto rp = self->make_response_promise<api_reply>();
  auto what = body.older_than_ms ? fmt::format("finished more than {} ms ago", body.older_than_ms)
                                 : std::string("every finished job");
  // One commit: the rows, then the same jobs from memory (as expire_history).
  auto batch = std::make_shared<const change_batch>(
      with_replays(self->state, now, history_expiry{before},
                   {history_expiry{before}, audit_of(now, *who, req, "clean", what, "ok")}));
  commit_then(self, batch, rp, [self, before, batch] {
    auto n = forget_finished(self, history_expiry{before}, *batch);
    spdlog::info("cq clean: forgot {} finished jobs", n);
    return api_reply{bus::clean_rep{n}};
  });
  return rp;
}

} // namespace cq::coord::api_impl
