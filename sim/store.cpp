#include "store.hpp"

#include <caf/all.hpp>

namespace cq::sim {

using namespace cq::actors;

namespace {

struct faulty_state {
  store_actor real;
  std::shared_ptr<store_plan> plan;
  /// Commits store_plan::hold keeps back, with the promise of their reply
  /// and what runs once they are durable.
  std::vector<std::tuple<std::shared_ptr<const change_batch>,
                         caf::typed_response_promise<commit_result>, durable_hook>>
      held;
  static inline const char* name = "sim.store";
};

using faulty_ptr = store_actor::stateful_pointer<faulty_state>;

/// `batch` to the real store; the plan's books and `rp`'s reply once it
/// answers.
void forward(faulty_ptr self, std::shared_ptr<const change_batch> batch,
             caf::typed_response_promise<commit_result> rp, durable_hook hook) {
  // The hook runs here, after the plan's books (a reply it writes is an
  // acknowledgement the checkers judge by them) and only when the process
  // "survives" the commit, as the real store runs it after its reply.
  self->request(self->state.real, caf::infinite, commit_atom::value, batch)
      .then(
          [=](const commit_result& r) mutable {
            auto& plan = *self->state.plan;
            if (r.error.empty()) {
              ++plan.commits;
              for (auto& c : *batch) {
                if (auto* j = std::get_if<job_row>(&c)) {
                  auto& id = j->info.id;
                  if (j->info.state == job_state::queued)
                    plan.committed_jobs.insert(id);
                  auto [i, fresh] = plan.job_states.try_emplace(id, j->info.state);
                  bool was_open = !fresh && !is_terminal(i->second);
                  i->second = j->info.state;
                  bool open = !is_terminal(j->info.state);
                  if (!open && j->info.finished_ms > 0)
                    plan.ended.emplace(std::pair{j->info.finished_ms, j->seq}, id);
                  plan.open_jobs += open;
                  plan.open_jobs -= was_open;
                  if (plan.on_job)
                    plan.on_job(j->info);
                } else if (auto* x = std::get_if<history_expiry>(&c)) {
                  // The store's rule: ended before before_ms, or at it with a
                  // lower seq (seqs start at 1: 0 means "before before_ms").
                  auto end = plan.ended.lower_bound({x->before_ms, x->before_seq});
                  for (auto e = plan.ended.begin(); e != end; ++e)
                    plan.forgotten.insert(e->second);
                  plan.ended.erase(plan.ended.begin(), end);
                } else if (auto* a = std::get_if<bus::allocation_info>(&c)) {
                  auto [prev, fresh] = plan.alloc_states.try_emplace(a->id, a->state);
                  bool from_unknown = !fresh && prev->second == alloc_state::unknown;
                  prev->second = a->state;
                  auto& live = plan.live_allocs[a->job];
                  if (a->state == alloc_state::finished) {
                    plan.finished_allocs.insert(a->id);
                    if (from_unknown && a->reason == bus::reason::lost)
                      plan.lost_while_down.insert(a->id);
                    live.erase(a->id);
                    if (live.empty())
                      plan.live_allocs.erase(a->job);
                  } else if (live.insert(a->id).second && live.size() > 1 && plan.on_twice) {
                    plan.on_twice(a->job, live);
                  }
                }
              }
            }
            if (r.error.empty() && plan.crash_after && plan.crash_after(*batch))
              return; // the process dies between the commit and its reply
            rp.deliver(r);
            if (r.error.empty())
              hook();
          },
          [=](caf::error& e) mutable { rp.deliver(commit_result{to_string(e)}); });
}

/// A commit as the plan has it: failed now, held back, or forwarded.
caf::result<commit_result> commit(faulty_ptr self, std::shared_ptr<const change_batch> batch,
                                  durable_hook hook) {
  auto& plan = *self->state.plan;
  if (plan.fail && plan.fail(*batch)) {
    ++plan.failed;
    return commit_result{"injected commit failure"};
  }
  auto rp = self->make_response_promise<commit_result>();
  if (plan.hold && plan.hold(*batch))
    self->state.held.emplace_back(std::move(batch), rp, std::move(hook));
  else
    forward(self, std::move(batch), rp, std::move(hook));
  return rp;
}

store_actor::behavior_type faulty_store(faulty_ptr self, store_actor real,
                                        std::shared_ptr<store_plan> plan) {
  self->state.real = real;
  self->state.plan = plan;
  self->link_to(real);
  return {
      [=](commit_atom, std::shared_ptr<const change_batch> batch) -> caf::result<commit_result> {
        return commit(self, std::move(batch), {});
      },
      [=](commit_atom, std::shared_ptr<const change_batch> batch, durable_hook hook)
          -> caf::result<commit_result> { return commit(self, std::move(batch), std::move(hook)); },
      [=](load_atom, std::uint64_t seq, const std::string& job) -> caf::result<job_payload> {
        return self->delegate(self->state.real, load_atom::value, seq, job);
      },
      [=](replay_atom, const std::string& id) -> caf::result<std::string> {
        return self->delegate(self->state.real, replay_atom::value, id);
      },
      [=](event_atom, const events_query& q) -> caf::result<bus::events_rep> {
        return self->delegate(self->state.real, event_atom::value, q);
      },
      [=](audit_atom, const audit_query& q) -> caf::result<bus::audit_rep> {
        return self->delegate(self->state.real, audit_atom::value, q);
      },
      [=](flush_atom) {
        auto held = std::move(self->state.held);
        self->state.held.clear();
        for (auto& [batch, rp, hook] : held)
          forward(self, std::move(batch), rp, std::move(hook));
      },
      [=](check_atom) {},
      [=](stop_atom, const std::string& why) {
        self->send(self->state.real, stop_atom::value, why);
      },
  };
}

} // namespace

store_actor spawn_faulty_store(caf::actor_system& sys, store_actor real,
                               std::shared_ptr<store_plan> plan) {
  return sys.spawn(faulty_store, std::move(real), std::move(plan));
}

} // namespace cq::sim
