// The api's event handlers: reading job event streams (waiting readers, a
// long poll), waking readers when a job commits events, and recording the
// holds nodes report as events of the jobs whose allocations they hold.
#include "api/state.hpp"

namespace cq::coord::api_impl {

void poll_waiter(api_ptr self, std::uint64_t id, bool last) {
  auto& st = self->state;
  auto w = st.waiters.find(id);
  if (w == st.waiters.end())
    return;
  auto news = st.event_news;
  // Answers the waiter and forgets it (a later answer of a query still in
  // flight finds it gone).
  auto answer = [=](api_reply r) {
    auto& st = self->state;
    if (auto w = st.waiters.find(id); w != st.waiters.end()) {
      w->second.rp.deliver(std::move(r));
      st.waiters.erase(w);
      mark_board(self); // the snapshot counts the readers held
    }
  };
  self->request(st.ctx->store, caf::infinite, event_atom::value, w->second.query)
      .then(
          [=](bus::events_rep& rep) {
            if (!rep.events.empty() || last)
              answer(api_reply{std::move(rep)});
            else if (self->state.event_news != news) // an event was committed while we read
              poll_waiter(self, id, false);
          },
          [=](caf::error& e) { answer(api_reply{err(errc::internal, "store: " + to_string(e))}); });
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::events_req& body) {
  auto& st = self->state;
  if (body.jobs.size() > bus::events_max_jobs)
    return api_reply{
        err(errc::invalid_argument, fmt::format("jobs: at most {}", bus::events_max_jobs))};
  events_query q;
  for (auto& ref : body.jobs) {
    auto r = resolve_job(st, ref);
    if (auto* e = std::get_if<bus::error_info>(&r))
      return api_reply{*e};
    q.jobs.push_back(std::get<std::string>(r));
    q.job_seqs.push_back(st.jobs.at(q.jobs.back()).seq);
  }
  q.cursor = body.cursor.value_or(0);
  q.since = body.since.value_or(0);
  q.limit = std::min(body.limit.value_or(bus::events_page), bus::events_page);
  if (q.limit == 0)
    return api_reply{err(errc::invalid_argument, "limit: must be at least 1")};
  auto wait = std::min(body.wait_ms.value_or(0), bus::events_wait_max_ms);
  // Held readers are bounded (each event is matched against them all): past
  // the bound a reader is answered at once, and simply asks again.
  constexpr std::size_t max_waiting = 1000;
  if (st.waiters.size() >= max_waiting)
    wait = 0;
  // Every read is a waiter: without wait_ms it is answered by its first query;
  // with it, held until an event for it is committed or wait_ms passes.
  auto rp = self->make_response_promise<api_reply>();
  auto id = st.next_waiter++;
  st.waiters.emplace(id, event_waiter{std::move(q), rp});
  mark_board(self);
  if (wait)
    self->delayed_send(self, std::chrono::milliseconds(wait), timeout_atom::value, id);
  poll_waiter(self, id, wait == 0);
  return rp;
}

void wake_readers(api_ptr self, const std::string& job) {
  auto& st = self->state;
  ++st.event_news;
  std::vector<std::uint64_t> due;
  for (auto& [id, w] : st.waiters)
    if (w.query.jobs.empty() ||
        std::find(w.query.jobs.begin(), w.query.jobs.end(), job) != w.query.jobs.end())
      due.push_back(id);
  for (auto id : due)
    poll_waiter(self, id, false);
}

namespace {

/// Commits event (kind, detail) of a terminal job, whose actor is gone: the
/// api is its only writer then. The commit suspends the api's other messages,
/// so two such events of one job never take the same seq.
void write_terminal_event(api_ptr self, const std::string& job, const std::string& kind,
                          const std::string& detail) {
  auto& st = self->state;
  // Forgotten meanwhile (a history pass or `cq clean` while the hold's
  // events were read): its stream is gone with it. cq-sim seed 1095 with
  // --history-jobs 10 stopped the api here (ADR 0071).
  auto it = st.jobs.find(job);
  if (it == st.jobs.end()) {
    spdlog::info("job {}: {} event not stored: the job was forgotten", job, kind);
    return;
  }
  auto& entry = it->second;
  auto seq = entry.last_event + 1;
  change_batch b{event_row{job, entry.seq, seq, kind, now_ms(self, *st.ctx), detail}};
  self->request(st.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(b)))
      .await(
          [=](const commit_result& r) {
            if (!r.error.empty()) {
              spdlog::warn("job {}: {} event not stored: {}", job, kind, r.error);
              return;
            }
            note_event(self->state, job, seq);
            wake_readers(self, job);
          },
          [=](caf::error& e) {
            spdlog::warn("job {}: {} event not stored: {}", job, kind, to_string(e));
          });
}

/// Records (kind, detail) in `job`'s stream: through its job actor while it
/// lives (the only writer then), else here.
void write_event(api_ptr self, const std::string& job, const std::string& kind,
                 const std::string& detail) {
  auto a = actor_of(self, job);
  if (!a) {
    write_terminal_event(self, job, kind, detail);
    return;
  }
  self->request(a, caf::infinite, event_atom::value, kind, detail)
      .then([](bool) {},
            // It ended meanwhile (its terminal row is on its way to us): write it here.
            [=](caf::error&) { write_terminal_event(self, job, kind, detail); });
}

} // namespace

void record_hold(api_ptr self, const std::string& node, const bus::hold_info& h, bool held) {
  auto& st = self->state;
  std::string job;
  for (auto& [j, history] : st.allocs)
    for (auto& a : history)
      if (a.id == h.allocation)
        job = j;
  if (job.empty() || !st.jobs.count(job))
    return; // not an allocation of a job this coordinator knows
  std::string kind = held ? "held" : "released";
  auto tag = fmt::format("hold {} ", h.id);
  auto detail = held ? fmt::format("{}on {}{}{}: {}", tag, node, h.lane.empty() ? "" : " lane ",
                                   h.lane, h.reason)
                     : fmt::format("{}on {} released", tag, node);
  // Once per hold and kind, across coordinator restarts (a restarted
  // coordinator hears every current hold again): the job's stream says.
  events_query q{{job}, {st.jobs.at(job).seq}, 0, 0, bus::events_page};
  self->request(st.ctx->store, caf::infinite, event_atom::value, q)
      .then(
          [=](const bus::events_rep& rep) {
            for (auto& e : rep.events)
              if (e.kind == kind && e.detail.rfind(tag, 0) == 0)
                return;
            write_event(self, job, kind, detail);
          },
          [=](caf::error& e) {
            spdlog::warn("job {}: {} event not recorded: {}", job, kind, to_string(e));
          });
}

} // namespace cq::coord::api_impl
