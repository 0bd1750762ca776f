// The store actor: the only one that touches SQLite. Commits batches of
// change records with group commit (docs/adr/0006), reads what is not kept in
// memory (a job's command and environment), and watches that the database
// file under it is still the one it opened.
//
// Invariants:
//  1. A commit_result without error is sent only after the batch is durable.
//  2. A batch that fails alone is answered with its error; a group that fails
//     is retried batch by batch, so one bad batch never fails the others.
//  3. Once the database file is gone or replaced (store::check_file), no
//     commit is acknowledged again: ctx.fatal is called and every commit is
//     answered with an error (damage is loud, SPEC section 10).
//  4. A commit's durable_hook runs only once its batch is durable, after the
//     batch's commit_result was sent (docs/adr/0067: a submit's reply written
//     from this thread).
//  5. Once any actor called ctx.fatal (a commit failed where nobody could be
//     told, so the coordinator is stopping: ADR 0003), no commit is
//     acknowledged again either. An actor whose change failed may go on for
//     the moments before the process ends; what it decides then rests on
//     state the store does not have (cq-sim seed 701438: a loss whose commit
//     failed, then the exit of the stop the loss had sent committed as the
//     job's own failure).
#include "internal.hpp"
#include "observe.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace cq::coord {

using namespace cq::actors;

namespace {

/// How often the store checks its file when nothing is committed.
constexpr auto file_check_interval = std::chrono::seconds(1);

struct store_state {
  std::shared_ptr<store> db;                     ///< the SQLite store; only this actor touches it
  std::function<void(const std::string&)> fatal; ///< called once when the file is damaged
  std::shared_ptr<metrics::registry> metrics;    ///< each commit's duration; null: none
  /// A batch received since the last flush, the promise it waits on, and
  /// what to run once it is durable.
  struct waiting {
    std::shared_ptr<const change_batch> batch;
    caf::typed_response_promise<commit_result> rp;
    durable_hook hook;
  };
  std::vector<waiting> pending;
  bool flush_scheduled = false; ///< a flush_atom is in our own mailbox
  std::string damaged;          ///< why the file can no longer be trusted ("" = fine)
  static inline const char* name = "cq.store";
};

using store_ptr = store_actor::stateful_pointer<store_state>;

/// Invariant 3. True while the database file is the one we opened.
bool file_ok(store_ptr self) {
  auto& st = self->state;
  if (!st.damaged.empty())
    return false;
  if (auto why = st.db->check_file()) {
    st.damaged = *why;
    spdlog::critical("{}", *why);
    if (st.fatal)
      st.fatal(*why);
    return false;
  }
  return true;
}

/// Queues `batch` for the next flush (invariant 1).
caf::result<commit_result> enqueue(store_ptr self, std::shared_ptr<const change_batch> batch,
                                   durable_hook hook) {
  auto rp = self->make_response_promise<commit_result>();
  self->state.pending.push_back({std::move(batch), rp, std::move(hook)});
  // A message to ourselves lands behind everything already in the mailbox:
  // every commit that arrived meanwhile joins this transaction.
  if (!self->state.flush_scheduled) {
    self->state.flush_scheduled = true;
    self->send(self, flush_atom::value);
  }
  return rp;
}

store_actor::behavior_type store_behavior(store_ptr self, std::shared_ptr<store> db,
                                          std::function<void(const std::string&)> fatal, bool watch,
                                          std::shared_ptr<metrics::registry> m) {
  self->state.db = std::move(db);
  self->state.fatal = std::move(fatal);
  self->state.metrics = std::move(m);
  if (watch)
    self->delayed_send(self, file_check_interval, check_atom::value);
  return {
      [=](commit_atom, std::shared_ptr<const change_batch> batch) -> caf::result<commit_result> {
        return enqueue(self, std::move(batch), {});
      },
      [=](commit_atom, std::shared_ptr<const change_batch> batch,
          durable_hook hook) -> caf::result<commit_result> {
        return enqueue(self, std::move(batch), std::move(hook));
      },
      [=](flush_atom) {
        auto& st = self->state;
        st.flush_scheduled = false;
        auto pending = std::move(st.pending);
        st.pending.clear();
        if (!file_ok(self)) {
          for (auto& w : pending)
            w.rp.deliver(commit_result{st.damaged});
          return;
        }
        std::vector<const change_batch*> all;
        all.reserve(pending.size());
        for (auto& w : pending)
          all.push_back(w.batch.get());
        auto began = self->clock().now(); // the actor clock: virtual time in tests
        auto err = st.db->apply(all);
        observe::commit(st.metrics.get(),
                        std::chrono::duration<double>(self->clock().now() - began).count());
        if (!err) {
          for (auto& w : pending)
            w.rp.deliver(commit_result{});
          // Invariant 4. After the commit_results: whoever a result wakes has
          // it in its mailbox before anyone a hook answers can ask again.
          for (auto& w : pending)
            w.hook();
          return;
        }
        // One bad batch must not fail the others: retry each on its own.
        spdlog::warn("group commit of {} batches failed ({}); retrying one by one", pending.size(),
                     *err);
        for (auto& w : pending) {
          auto e = st.db->apply(*w.batch);
          w.rp.deliver(commit_result{e ? *e : std::string()});
          if (!e)
            w.hook();
        }
      },
      [=](load_atom, std::uint64_t seq, const std::string& job) -> caf::result<job_payload> {
        auto p = self->state.db->load_payload(seq, job);
        if (!p)
          return caf::make_error(caf::sec::runtime_error, p.error().message);
        return job_payload{std::move(p->argv), std::move(p->env)};
      },
      [=](replay_atom, const std::string& id) -> caf::result<std::string> {
        auto r = self->state.db->operation_result(id);
        if (!r)
          return caf::make_error(caf::sec::runtime_error, r.error().message);
        return std::move(*r);
      },
      [=](event_atom, const events_query& q) -> caf::result<bus::events_rep> {
        auto r = self->state.db->events(q.job_seqs, q.cursor, q.since, q.limit);
        if (!r)
          return caf::make_error(caf::sec::runtime_error, r.error().message);
        return std::move(*r);
      },
      [=](audit_atom, const audit_query& q) -> caf::result<bus::audit_rep> {
        auto r = self->state.db->audit(q);
        if (!r)
          return caf::make_error(caf::sec::runtime_error, r.error().message);
        return std::move(*r);
      },
      [=](check_atom) {
        if (file_ok(self))
          self->delayed_send(self, file_check_interval, check_atom::value);
      },
      [=](stop_atom, const std::string& why) { // invariant 5
        if (self->state.damaged.empty())
          self->state.damaged = "the coordinator is stopping: " + why;
      },
  };
}

} // namespace

store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<store> db, bool detached,
                        std::function<void(const std::string&)> fatal,
                        std::shared_ptr<metrics::registry> m) {
  // The periodic file check runs only in production (detached): a self-re-arming
  // timer would keep a deterministic test scheduler from ever becoming idle.
  return detached ? sys.spawn<caf::detached>(store_behavior, std::move(db), std::move(fatal), true,
                                             std::move(m))
                  : sys.spawn(store_behavior, std::move(db), std::move(fatal), false, std::move(m));
}

} // namespace cq::coord
