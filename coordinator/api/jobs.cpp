// The api's job handlers: ls, show, cancel, hold, move, profiles, logs
// (submit: submit.cpp).
#include "api/state.hpp"
#include "cq/bus/job_filter.hpp"
#include "job_steps.hpp"
#include "policy/placement.hpp"
#include "policy/transitions.hpp"

#include <fmt/ranges.h>

namespace cq::coord::api_impl {

/// What `cq profile ls` shows of a profile, and what a submit sized by it says.
bus::profile_info profile_info_of(const profile_row& p) {
  auto est = policy::estimate(p.peak_ram_bytes, p.wall_ms);
  bus::profile_info info{p.key, p.runs, est.ram_bytes, 0, 0, est.est_ms, p.updated_ms};
  for (auto v : p.peak_ram_bytes)
    info.peak_ram_bytes = std::max(info.peak_ram_bytes, v);
  for (auto v : p.peak_vram_bytes)
    info.peak_vram_bytes = std::max(info.peak_vram_bytes, v);
  return info;
}

/// SPEC section 9: validates a move, commits the job's new (level, rank), and
/// the renumbered ranks of its level when there was no gap left, in one
/// transaction with the audit row; then tells the job actors.
caf::result<api_reply> handle_move(api_ptr self, const identity& who, const api_request& req,
                                   const bus::move_req& m) {
  auto& st = self->state;
  auto refuse = [](errc c, std::string_view reason, std::string text) {
    return api_reply{bus::error_info{c, fmt::format("{}: {}", reason, text)}};
  };
  auto r = resolve_job(st, m.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto id = std::get<std::string>(r);
  auto& job = st.jobs[id];
  if (is_terminal(job.state))
    return api_reply{
        err(errc::invalid_state, fmt::format("job {} has already ended ({})", id, job.state))};
  auto& pl = m.placement;
  if (pl != "front" && pl != "back" && pl != "before" && pl != "after" && !pl.empty())
    return refuse(errc::invalid_argument, "conflicting_flags",
                  "placement must be front, back, before or after");
  bool needs_target = pl == "before" || pl == "after";
  if (needs_target != m.target.has_value())
    return refuse(errc::invalid_argument, "conflicting_flags",
                  needs_target ? "before/after need a target job"
                               : "only before/after take a target");
  if (pl.empty() && !m.priority)
    return refuse(errc::invalid_argument, "conflicting_flags",
                  "nothing to do: give a placement or a priority");
  if (m.priority && !policy::parse_level(*m.priority))
    return api_reply{err(errc::invalid_argument, "priority: must be high, medium or low")};
  if (job.state != job_state::queued)
    return refuse(
        errc::invalid_state, "not_queued",
        fmt::format("job {} is {}: only queued jobs have a place in the queue", id, job.state));
  std::string priority = m.priority.value_or(job.priority);
  auto level = level_index(priority);
  std::optional<std::string> target;
  if (needs_target) {
    auto tr = resolve_job(st, *m.target);
    if (std::holds_alternative<bus::error_info>(tr))
      return refuse(errc::not_found, "target_not_found",
                    fmt::format("no job '{}'", m.target->substr(0, 64)));
    target = std::get<std::string>(tr);
    if (*target == id)
      return refuse(errc::invalid_argument, "self_target", "a job cannot move relative to itself");
    auto& tj = st.jobs[*target];
    if (is_terminal(tj.state) || !tj.order)
      return refuse(errc::invalid_state, "target_terminal",
                    fmt::format("job {} has already ended ({})", *target, tj.state));
    if (tj.state != job_state::queued)
      return refuse(errc::invalid_state, "target_not_queued",
                    fmt::format("job {} is {}: only queued jobs have a place in the queue", *target,
                                tj.state));
    auto tlevel = std::get<0>(*tj.order);
    if (m.priority && level_index(*m.priority) != tlevel)
      return refuse(errc::invalid_argument, "level_mismatch",
                    fmt::format("job {} is {}, not {}", *target, tj.priority, *m.priority));
    priority = tj.priority;
    level = tlevel;
  }
  // The level's other jobs in serving order, running ones included (they keep
  // their place for a requeue): their entries where they are, not copies of
  // their ids (at 100,000 jobs a move copied 100,000 strings).
  std::vector<const job_node*> others;
  std::vector<std::int64_t> ranks;
  std::optional<std::size_t> target_index;
  for (auto it = st.order.lower_bound(order_key_t{level, INT64_MIN, 0});
       it != st.order.end() && std::get<0>(it->first) == level; ++it) {
    auto& jid = it->second->first;
    if (jid == id)
      continue;
    if (target && jid == *target)
      target_index = others.size();
    others.push_back(it->second);
    ranks.push_back(std::get<1>(it->first));
  }
  auto self_key = *job.order;
  policy::move_plan plan;
  if (pl.empty() && std::get<0>(self_key) == level) {
    plan.rank = std::get<1>(self_key); // --priority alone, already in that level: no change
  } else {
    auto kind = pl == "front"    ? policy::placement::front
                : pl == "before" ? policy::placement::before
                : pl == "after"  ? policy::placement::after
                                 : policy::placement::back;
    plan = policy::plan_move(ranks, kind, target_index, st.max_rank[level]);
  }
  auto now = now_ms(self, *st.ctx);
  change_batch batch;
  std::vector<std::tuple<std::string, std::int64_t, std::uint64_t>> moved; // id, rank, seq
  moved.reserve(plan.renumbered ? others.size() + 1 : 1);
  moved.emplace_back(id, plan.rank, std::get<2>(self_key));
  if (plan.renumbered)
    for (std::size_t i = 0; i < others.size(); ++i)
      moved.emplace_back(others[i]->first, (*plan.renumbered)[i],
                         std::get<2>(*others[i]->second.order));
  batch.reserve(moved.size() + 2); // each row once: they are large
  for (auto& [jid, rank, seq] : moved)
    batch.push_back(order_row{jid, seq, priority, rank});
  batch.push_back(audit_of(now, who, req, "move", id, fmt::format("{} {}", priority, plan.rank)));
  // The reply as it will be (the result an operation id keeps).
  auto reply_info = job;
  reply_info.priority = priority;
  if (!operation_id_of(req).empty()) {
    // Its position once the move is applied: counted on a copy of the order.
    auto order = st.order;
    for (auto& [jid, rank, seq] : moved) {
      auto& node = *st.jobs.find(jid);
      if (node.second.order)
        order.erase(*node.second.order);
      order[order_key_t{level, rank, seq}] = &node;
    }
    std::uint64_t pos = 0;
    for (auto it = order.lower_bound(order_key_t{level, INT64_MIN, 0});
         it != order.end() && std::get<0>(it->first) == level; ++it)
      if (it->second->second.state == job_state::queued) {
        ++pos;
        if (it->second->first == id)
          break;
      }
    reply_info.position = pos;
    add_operation(batch, now, req, "move", bus::move_rep{reply_info});
  }
  auto rp = self->make_response_promise<api_reply>();
  self->request(st.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .then(
          [=](const commit_result& cr) mutable {
            if (!cr.error.empty()) {
              rp.deliver(api_reply{err(errc::internal, "store: " + cr.error)});
              return;
            }
            auto& st = self->state;
            auto old_level = std::get<0>(*st.jobs.at(id).order);
            for (auto& [jid, rank, seq] : moved) {
              place_in_order(st, jid, level, rank, seq, false);
              auto& j = st.jobs[jid];
              j.priority = priority;
              if (auto a = st.live.find(jid); a != st.live.end())
                self->send(a->second, move_atom::value, priority, rank);
              else
                rekey_parked(self, jid); // unless the scheduler placed it meanwhile
            }
            if (plan.renumbered)
              st.max_rank[level] = std::max(
                  plan.rank, plan.renumbered->empty() ? plan.rank : plan.renumbered->back());
            count_queued(st, job_state::queued, job_state::queued, old_level, level);
            bus::job_info info = st.jobs[id];
            info.position = position_of(st, id);
            rp.deliver(api_reply{bus::move_rep{info}});
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "store unavailable: " + to_string(e))});
          });
  return rp;
}

/// A page of jobs in submission order (ls_req without rows); with `array`
/// (an array's id), only its tasks.
bus::ls_rep ls_jobs(api_state& st, const bus::ls_req& body, const bus::listing_filter& filter,
                    const std::string& array = {}) {
  bus::ls_rep out;
  if (!st.positions_valid) {
    std::array<std::uint64_t, 3> count{};
    for (auto& [k, node] : st.order) {
      auto& j = node->second;
      j.listed_position = j.state == job_state::queued ? ++count[std::get<0>(k)] : 0;
    }
    st.positions_valid = true;
  }
  auto limit = body.limit.value_or(UINT64_MAX);
  // Every job is in by_seq; the non-terminal ones are in the order.
  std::uint64_t total = body.all ? st.by_seq.size() : st.order.size();
  auto kept = [&](const job_entry& j) {
    return (body.all || !is_terminal(j.state)) && (!filter.any || filter(j));
  };
  if (filter.any && array.empty()) // filtered: counted (one walk, as the page's)
    total = static_cast<std::uint64_t>(std::count_if(
        st.by_seq.begin(), st.by_seq.end(), [&](auto& kv) { return kept(kv.second->second); }));
  std::size_t bytes = 64; // envelope and the reply's other fields
  // Adds job `j` to the page; false when the page is full (before `j`).
  auto take = [&](const job_entry& j) {
    auto size = bus::wire_size_bound(j);
    if (out.jobs.size() >= limit || (!out.jobs.empty() && bytes + size > bus::limits::page_bytes))
      return false;
    bytes += size;
    out.jobs.push_back(j);
    // Only queued jobs have a position (a terminal one's listed_position is stale).
    out.jobs.back().position = j.state == job_state::queued ? j.listed_position : 0;
    return true;
  };
  // The page from `from` on, `node_of` an iterator's job node; the cursor
  // is the seq of the job before the first one left out.
  auto page = [&](auto from, auto end, auto node_of) {
    for (auto it = from; it != end; ++it) {
      if (!kept(node_of(it)->second))
        continue;
      if (!take(node_of(it)->second)) {
        out.next_cursor = node_of(std::prev(it))->second.seq;
        break;
      }
    }
  };
  if (!array.empty()) {
    // An array's tasks, from the array index (in submission order): counted,
    // then the page from the cursor on.
    auto& tasks = st.arrays.tasks(st.by_seq, array);
    total = static_cast<std::uint64_t>(
        std::count_if(tasks.begin(), tasks.end(), [&](auto* n) { return kept(n->second); }));
    auto from = body.cursor
                    ? std::upper_bound(tasks.begin(), tasks.end(), *body.cursor,
                                       [](std::uint64_t c, auto* n) { return c < n->second.seq; })
                    : tasks.begin();
    page(from, tasks.end(), [](auto it) { return *it; });
  } else {
    auto from = body.cursor ? st.by_seq.upper_bound(*body.cursor) : st.by_seq.begin();
    page(from, st.by_seq.end(), [](auto it) { return it->second; });
  }
  out.total = total;
  out.id_prefix = page_prefix(st, out.jobs.size(), [&](auto&& each) {
    for (const auto& j : out.jobs) {
      each(j.id, false);
      if (!j.array.empty())
        each(j.array, true);
    }
  });
  return out;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::ls_req& body) {
  auto& st = self->state;
  // One page: from the cursor on, at most `limit` jobs and at most
  // limits::page_bytes of them (SPEC section 10: listings are paged).
  bus::ls_rep out;
  if (body.array && body.rows.value_or(false))
    return api_reply{err(errc::invalid_argument, "array: a listing of rows does not take it")};
  // A page of nothing would name no cursor to go on from (and a client
  // asking again would loop): leave `limit` out for no limit.
  if (body.limit && *body.limit == 0)
    return api_reply{err(errc::invalid_argument, "limit: must be at least 1 (absent: no limit)")};
  auto filter = bus::listing_filter_of(body, who->name);
  if (!filter)
    return api_reply{filter.error()};
  if (body.rows.value_or(false)) {
    out = ls_rows(self, body, *filter);
  } else if (body.array) {
    // The array a person named (cq show, cq cancel, cq wait): its tasks, so
    // that `cq` need not read every job to find them.
    auto array = array_named(st, *body.array);
    if (!array)
      return api_reply{array.error()};
    if (array->empty()) {
      out.total = 0;
      return api_reply{std::move(out)};
    }
    out = ls_jobs(st, body, *filter, *array);
  } else {
    out = ls_jobs(st, body, *filter);
  }
  if (!body.reasons || *body.reasons == 0 || body.cursor)
    return api_reply{std::move(out)};
  // The scheduler's reasons for the first queued jobs in serving order that
  // wait for nothing a person or a dependency holds (their rows say that).
  auto n = std::min(*body.reasons, bus::ls_reasons_max);
  auto ids = explainable_queued(st, n);
  out.reasons.emplace();
  if (ids.empty())
    return api_reply{std::move(out)};
  auto rp = self->make_response_promise<api_reply>();
  explain_queued(self, std::move(ids), [rp, out = std::move(out)](auto reasons) mutable {
    out.reasons = std::move(reasons); // without them, the listing stands
    rp.deliver(api_reply{std::move(out)});
  });
  return rp;
}

void explain_queued(api_ptr self, std::vector<std::string> ids,
                    std::function<void(std::optional<std::vector<bus::job_reasons>>)> done) {
  // One request for every job, answered from one view of the cluster; the
  // callback (which holds a whole listing page) is moved, never copied.
  auto shared_done = std::make_shared<decltype(done)>(std::move(done));
  auto shared_ids = std::make_shared<const std::vector<std::string>>(std::move(ids));
  self->request(self->state.ctx->scheduler, caf::infinite, explain_atom::value, *shared_ids)
      .then(
          [shared_done, shared_ids](std::vector<bus::string_list>& why) {
            std::vector<bus::job_reasons> reasons;
            reasons.reserve(shared_ids->size());
            for (std::size_t i = 0; i < shared_ids->size() && i < why.size(); ++i)
              reasons.push_back(bus::job_reasons{(*shared_ids)[i], std::move(why[i])});
            (*shared_done)(std::move(reasons));
          },
          [shared_done](caf::error&) { (*shared_done)(std::nullopt); });
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::show_req& body) {
  auto& st = self->state;
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto id = std::get<std::string>(r);
  bus::show_rep out{st.jobs[id], {}, {}, std::nullopt};
  auto& history = st.allocs[id];
  auto skip =
      history.size() > bus::show_max_allocations ? history.size() - bus::show_max_allocations : 0;
  out.allocations.assign(history.begin() + static_cast<std::ptrdiff_t>(skip), history.end());
  if (skip)
    out.allocations_omitted = skip;
  out.job.position = position_of(st, id);
  if (body.env.value_or(false)) {
    // The environment may hold secrets: a submitter sees only its own jobs'.
    if (who && who->who == role::submitter && out.job.owner != who->name &&
        !st.ctx->cfg.defects.ignore_ownership)
      return api_reply{err(errc::permission_denied,
                           fmt::format("job {} belongs to {}: role submitter may read the "
                                       "environment of its own jobs only",
                                       id, out.job.owner))};
    auto rp = self->make_response_promise<api_reply>();
    self->request(st.ctx->store, caf::infinite, load_atom::value, st.jobs[id].seq, id)
        .then(
            [=](job_payload& p) mutable {
              out.env = std::move(p.env);
              rp.deliver(api_reply{out});
            },
            [=](caf::error& e) mutable {
              rp.deliver(api_reply{err(errc::internal, "store: " + to_string(e))});
            });
    return rp;
  }
  if (out.job.state != job_state::queued)
    return api_reply{std::move(out)};
  if (out.job.on_hold) {
    out.waiting.push_back(
        fmt::format("kept from starting by cq hold; cq release {} lets it start", id.substr(0, 8)));
    return api_reply{std::move(out)};
  }
  for (auto& d : out.job.after)
    if (auto dj = st.jobs.find(d); dj != st.jobs.end() && dj->second.state != job_state::succeeded)
      out.waiting.push_back(fmt::format("waits for job {} ({}) to succeed", d, dj->second.state));
  if (!out.waiting.empty())
    return api_reply{std::move(out)};
  auto rp = self->make_response_promise<api_reply>();
  // One deadline per request, the waiting client's: the scheduler always
  // answers, and if it is gone the request fails at once.
  self->request(st.ctx->scheduler, caf::infinite, explain_atom::value, bus::string_list{id})
      .then(
          [=](const std::vector<bus::string_list>& whys) mutable {
            if (!whys.empty())
              out.waiting = whys.front();
            if (out.waiting.empty())
              out.waiting.push_back("fits now; starts on the next placement pass");
            rp.deliver(api_reply{out});
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "scheduler unavailable: " + to_string(e))});
          });
  return rp;
}

namespace {

/// The live job `ref` names and its actor, or why there is none (`hint`
/// follows the refusal of a job that already ended).
std::variant<std::pair<std::string, job_actor>, bus::error_info>
live_job(api_ptr self, const std::string& ref, std::string_view hint = {}) {
  auto& st = self->state;
  auto r = resolve_job(st, ref);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return *e;
  auto& id = std::get<std::string>(r);
  auto actor = actor_of(self, id);
  if (!actor)
    return err(errc::invalid_state,
               fmt::format("job {} has already ended ({}){}", id, st.jobs[id].state, hint));
  return std::pair{id, actor};
}

/// Who asked, for the job actor's commit (audit, operation id).
call_stamp stamp_of(const identity& who, const api_request& req) {
  return {who.name, std::string(to_string(who.who)), req.args, operation_id_of(req)};
}

/// Asks job `id`'s actor and answers with what it answers. An actor that
/// ended before it read the request (an earlier request in the same batch
/// ended the job: `cq cancel X X`, an array and one of its tasks) gets the
/// refusal a job that already ended gets, not an internal error.
template <class... Ts>
caf::result<api_reply> ask_live_job(api_ptr self, const std::string& id, const job_actor& actor,
                                    Ts&&... xs) {
  auto rp = self->make_response_promise<api_reply>();
  self->request(actor, caf::infinite, std::forward<Ts>(xs)...)
      .then(
          [self, rp, id](api_reply& r) mutable {
            // The job actor's row has no argv (the store keeps it); the
            // reply's job is whole, as cq show's (cq cancel --json said []).
            auto whole = [&](bus::job_info& j) {
              if (auto k = self->state.jobs.find(id); j.argv.empty() && k != self->state.jobs.end())
                j.argv = k->second.argv;
            };
            if (auto* c = std::get_if<bus::cancel_rep>(&r.body))
              whole(c->job);
            else if (auto* h = std::get_if<bus::job_hold_rep>(&r.body))
              whole(h->job);
            rp.deliver(std::move(r));
          },
          [self, rp, id](caf::error& e) mutable {
            auto& st = self->state;
            if (!actor_of(self, id) || e == caf::sec::request_receiver_down) {
              auto j = st.jobs.find(id);
              auto state = j != st.jobs.end() ? std::string(to_string(j->second.state))
                                              : std::string("gone");
              rp.deliver(api_reply{err(errc::invalid_state,
                                       fmt::format("job {} has already ended ({})", id, state))});
              return;
            }
            rp.deliver(api_reply{err(errc::internal, "job actor: " + to_string(e))});
          });
  return rp;
}

} // namespace

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::cancel_req& body) {
  auto& st = self->state;
  auto live = live_job(self, body.job);
  if (auto* e = std::get_if<bus::error_info>(&live))
    return api_reply{*e};
  auto& [id, actor] = std::get<0>(live);
  if (st.ctx->cfg.defects.ignore_cancel) // deliberate defect (cq-sim's cancel_lost)
    return api_reply{bus::cancel_rep{st.jobs[id]}};
  return ask_live_job(self, id, actor, cancel_atom::value, stamp_of(*who, req));
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::job_hold_req& body) {
  auto live = live_job(self, body.job,
                       body.release ? "; cq release lets a held job start"
                                    : "; cq hold keeps a queued job from starting");
  if (auto* e = std::get_if<bus::error_info>(&live))
    return api_reply{*e};
  auto& [id, actor] = std::get<0>(live);
  return ask_live_job(self, id, actor, park_atom::value, !body.release, stamp_of(*who, req));
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::move_req& body) {
  return handle_move(self, *who, req, body);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::profile_ls_req& body) {
  auto& st = self->state;
  bus::profile_ls_rep out;
  for (auto& [key, p] : st.profiles)
    out.profiles.push_back(profile_info_of(p));
  return api_reply{std::move(out)};
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::profile_rm_req& body) {
  auto& st = self->state;
  auto p = st.profiles.find(body.key);
  if (p == st.profiles.end())
    return api_reply{err(errc::not_found, fmt::format("key: no profile '{}' (cq profile ls lists "
                                                      "them)",
                                                      body.key.substr(0, 200)))};
  bus::profile_ls_rep out{{profile_info_of(p->second)}};
  // A row with no runs is a removal (store.cpp); jobs already queued keep
  // the cap they were given.
  profile_row gone;
  gone.key = body.key;
  st.profiles.erase(p);
  auto rp = self->make_response_promise<api_reply>();
  commit_then(self, {gone, audit_of(now, *who, req, "profile_rm", body.key, "removed")}, rp,
              [out] { return api_reply{out}; });
  return rp;
}

namespace {

/// The node that holds allocation `alloc` of job `id`, for an order about
/// it (read_log, write_terminal), with the node's name; or why there is none.
std::variant<std::pair<node_actor, std::string>, bus::error_info>
node_holding(api_state& st, const std::string& id, const std::string& alloc) {
  std::string node;
  for (auto& a : st.allocs[id])
    if (a.id == alloc)
      node = a.node;
  if (node.empty())
    return err(errc::not_found, fmt::format("allocation: job has no allocation '{}'", alloc));
  auto n = st.nodes.find(node);
  if (n == st.nodes.end() || !n->second.handle)
    return err(errc::unavailable, fmt::format("node {} is unknown", node));
  return std::pair{n->second.handle, node};
}

/// The reply when the node an order went to did not answer it.
api_reply node_silent(const std::string& node, const caf::error& e) {
  return api_reply{
      err(errc::unavailable, fmt::format("node {} did not answer: {}", node, to_string(e)))};
}

} // namespace

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::logs_req& body) {
  auto& st = self->state;
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto id = std::get<std::string>(r);
  auto alloc = body.allocation ? *body.allocation : st.jobs[id].allocation;
  if (alloc.empty())
    return api_reply{bus::logs_rep{"", "", body.offset, true, is_terminal(st.jobs[id].state)}};
  auto held = node_holding(st, id, alloc);
  if (auto* e = std::get_if<bus::error_info>(&held))
    return api_reply{*e};
  auto [handle, node] = std::get<0>(held);
  auto max = body.max_bytes == 0
                 ? std::uint64_t{64 << 10}
                 : std::min<std::uint64_t>(body.max_bytes, bus::limits::log_chunk_bytes);
  auto rp = self->make_response_promise<api_reply>();
  // The node actor answers within its own deadline (order_timeout).
  self->request(handle, caf::infinite, bus::read_log_order{alloc, body.offset, max})
      .then(
          [=](const order_reply& lr) mutable {
            auto& j = self->state.jobs[id];
            if (!lr.chunk) {
              // The start order is on its way, or the node is still making the
              // allocation's directory: the job's current allocation has
              // written nothing yet. A follower asks again; only an allocation
              // that should exist and does not is an error.
              if (lr.error.code == errc::not_found && j.allocation == alloc &&
                  !is_terminal(j.state)) {
                rp.deliver(api_reply{bus::logs_rep{alloc, "", body.offset, true, false}});
                return;
              }
              rp.deliver(api_reply{lr.error});
              return;
            }
            // Terminal only once the allocation read is the job's last one.
            bool terminal = is_terminal(j.state) && j.allocation == alloc;
            rp.deliver(api_reply{bus::logs_rep{alloc, lr.chunk->data, lr.chunk->next_offset,
                                               lr.chunk->eof, terminal}});
          },
          [=](caf::error& e) mutable { rp.deliver(node_silent(node, e)); });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity*, const api_request&, std::int64_t,
                          bus::terminal_req& body) {
  auto& st = self->state;
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto id = std::get<std::string>(r);
  auto& j = st.jobs[id];
  if (!j.pty)
    return api_reply{err(errc::invalid_argument,
                         fmt::format("job {} has no terminal (cq run --pty makes one)", id))};
  if (body.data.size() > bus::limits::terminal_input_bytes)
    return api_reply{err(errc::invalid_argument,
                         fmt::format("data: at most {} bytes at once (got {})",
                                     bus::limits::terminal_input_bytes, body.data.size()))};
  constexpr std::uint64_t max_side = 10000; // rows, columns
  if ((body.rows && (*body.rows == 0 || *body.rows > max_side)) ||
      (body.cols && (*body.cols == 0 || *body.cols > max_side)) ||
      body.rows.has_value() != body.cols.has_value())
    return api_reply{
        err(errc::invalid_argument, fmt::format("rows, cols: give both, each 1 to {}", max_side))};
  if (is_terminal(j.state))
    return api_reply{err(errc::invalid_state, fmt::format("job {} is {}: its terminal is closed",
                                                          id, to_string(j.state)))};
  if (j.allocation.empty())
    return api_reply{err(errc::unavailable, fmt::format("job {} has not started yet", id))};
  auto held = node_holding(st, id, j.allocation);
  if (auto* e = std::get_if<bus::error_info>(&held))
    return api_reply{*e};
  auto [handle, node] = std::get<0>(held);
  auto rp = self->make_response_promise<api_reply>();
  self->request(handle, caf::infinite,
                bus::terminal_order{j.allocation, body.data, body.rows, body.cols})
      .then(
          [=](const order_reply& lr) mutable {
            if (!lr.ok) {
              rp.deliver(api_reply{lr.error});
              return;
            }
            rp.deliver(api_reply{bus::terminal_rep{id}});
          },
          [=](caf::error& e) mutable { rp.deliver(node_silent(node, e)); });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::preempt_req& body) {
  auto& st = self->state;
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto& id = std::get<std::string>(r);
  auto actor = actor_of(self, id);
  if (!actor)
    return api_reply{err(errc::invalid_state,
                         fmt::format("job {} has already ended ({})", id, st.jobs[id].state))};
  // The job actor commits the yield request with its audit row.
  auto rp = self->make_response_promise();
  rp.delegate(actor, yield_atom::value, fmt::format("cq preempt by {}", who->name),
              call_stamp{who->name, std::string(to_string(who->who)), req.args, ""});
  return rp;
}

} // namespace cq::coord::api_impl
