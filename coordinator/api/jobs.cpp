// The api's job handlers: submit, ls, show, cancel, move, profiles, logs.
#include "api/state.hpp"
#include "job_steps.hpp"
#include "policy/placement.hpp"
#include "policy/transitions.hpp"

#include <fmt/ranges.h>
#include <sodium.h>

#include <array>

namespace cq::coord::api_impl {

namespace {

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

/// submit's refusal (policy::never_runnable) over the api's view of the
/// nodes: for each approved node why it could never run `j`; empty if one
/// could (or nothing is known yet).
std::vector<std::string> never_runnable_here(const api_state& st, const bus::job_info& j) {
  std::vector<policy::node_view> views;
  views.reserve(st.nodes.size());
  for (auto& [name, n] : st.nodes) {
    auto v = policy::capacity_of(n.info);
    v.name = name;
    v.approved = n.info.state == "approved";
    views.push_back(std::move(v));
  }
  policy::job_view job;
  static_cast<job_resources&>(job) = job_impl::resources_of(*st.ctx, j);
  job.id = j.id;
  return policy::never_runnable(views, job);
}

/// The most characters of a job's name (policy/spec.cpp checks the same).
constexpr std::size_t bus_name_max = 64;

/// An array task's id: a UUID derived from the array's id and the index, so
/// that a replayed submit finds the same tasks.
std::string array_task_id(const std::string& array, std::uint64_t index) {
  auto text = fmt::format("{}/{}", array, index);
  std::array<unsigned char, 16> h{};
  crypto_generichash(h.data(), h.size(), reinterpret_cast<const unsigned char*>(text.data()),
                     text.size(), nullptr, 0);
  h[6] = static_cast<unsigned char>((h[6] & 0x0f) | 0x40); // version 4
  h[8] = static_cast<unsigned char>((h[8] & 0x3f) | 0x80); // variant 1
  std::string hex;
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      hex += '-';
    hex += fmt::format("{:02x}", h[i]);
  }
  return hex;
}

/// The tasks of the array `ref` names (its id, or a unique prefix of at
/// least min_id_prefix characters), in submission order; empty if none.
std::vector<std::string> array_tasks_of(const api_state& st, const std::string& ref) {
  std::string array;
  if (ref.size() < min_id_prefix)
    return {};
  for (const auto& [id, j] : st.jobs)
    if (!j.array.empty() && j.array.compare(0, ref.size(), ref) == 0) {
      if (!array.empty() && array != j.array)
        return {}; // two arrays: ambiguous, resolve_job's error stands
      array = j.array;
    }
  std::vector<std::string> out;
  if (array.empty())
    return out;
  for (const auto& [seq, id] : st.by_seq)
    if (auto j = st.jobs.find(id); j != st.jobs.end() && j->second.array == array)
      out.push_back(id);
  return out;
}

/// An array submit's own rules: a client id (the array's), 1..array_tasks
/// distinct indexes, a limit within the array's size.
std::optional<bus::error_info> validate_array(const bus::submit_req& b) {
  if (!b.array_indexes) {
    if (b.array_limit)
      return err(errc::invalid_argument, "array_limit: only an array has a limit");
    return std::nullopt;
  }
  auto& ix = *b.array_indexes;
  if (!b.job_id)
    return err(errc::invalid_argument, "job_id: an array needs one (it is the array's id)");
  if (ix.empty() || ix.size() > bus::limits::array_tasks)
    return err(errc::invalid_argument, fmt::format("array_indexes: 1 to {} tasks, not {}",
                                                   bus::limits::array_tasks, ix.size()));
  constexpr std::uint64_t max_index = 1'000'000'000;
  std::vector<std::uint64_t> sorted(ix.begin(), ix.end());
  std::sort(sorted.begin(), sorted.end());
  if (sorted.back() > max_index)
    return err(
        errc::invalid_argument,
        fmt::format("array_indexes: {} is over the largest index, {}", sorted.back(), max_index));
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return err(errc::invalid_argument, "array_indexes: an index is given twice");
  if (b.array_limit && (*b.array_limit == 0 || *b.array_limit > bus::limits::array_tasks))
    return err(errc::invalid_argument, fmt::format("array_limit: 1 to {}, not {}",
                                                   bus::limits::array_tasks, *b.array_limit));
  if (b.array_argvs) {
    if (b.array_argvs->size() != ix.size())
      return err(errc::invalid_argument, fmt::format("array_argvs: {} commands for {} tasks",
                                                     b.array_argvs->size(), ix.size()));
    // Each task's command, by the spec's own rules for argv.
    for (std::size_t i = 0; i < b.array_argvs->size(); ++i) {
      bus::job_spec probe;
      probe.argv = (*b.array_argvs)[i];
      probe.cwd = "/";
      if (auto e = validate_spec(probe))
        return err(errc::invalid_argument, fmt::format("array_argvs[{}]: {}", i, e->message));
    }
  }
  return std::nullopt;
}

} // namespace

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
  if (is_terminal(job.state) || !st.live.count(id))
    return api_reply{err(errc::invalid_state, fmt::format("job {} is already {}", id, job.state))};
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
    if (is_terminal(tj.state) || !st.order_key.count(*target))
      return refuse(errc::invalid_state, "target_terminal",
                    fmt::format("job {} is already {}", *target, tj.state));
    if (tj.state != job_state::queued)
      return refuse(errc::invalid_state, "target_not_queued",
                    fmt::format("job {} is {}: only queued jobs have a place in the queue", *target,
                                tj.state));
    auto tlevel = std::get<0>(st.order_key.at(*target));
    if (m.priority && level_index(*m.priority) != tlevel)
      return refuse(errc::invalid_argument, "level_mismatch",
                    fmt::format("job {} is {}, not {}", *target, tj.priority, *m.priority));
    priority = tj.priority;
    level = tlevel;
  }
  // The level's other jobs in serving order, running ones included (they keep
  // their place for a requeue).
  std::vector<std::string> ids;
  std::vector<std::int64_t> ranks;
  std::optional<std::size_t> target_index;
  for (auto it = st.order.lower_bound(order_key_t{level, INT64_MIN, 0});
       it != st.order.end() && std::get<0>(it->first) == level; ++it) {
    if (it->second == id)
      continue;
    if (target && it->second == *target)
      target_index = ids.size();
    ids.push_back(it->second);
    ranks.push_back(std::get<1>(it->first));
  }
  auto self_key = st.order_key.at(id);
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
  moved.emplace_back(id, plan.rank, std::get<2>(self_key));
  if (plan.renumbered)
    for (std::size_t i = 0; i < ids.size(); ++i)
      moved.emplace_back(ids[i], (*plan.renumbered)[i], std::get<2>(st.order_key.at(ids[i])));
  for (auto& [jid, rank, seq] : moved)
    batch.push_back(order_row{jid, priority, rank});
  batch.push_back(audit_of(now, who, req, "move", id, fmt::format("{} {}", priority, plan.rank)));
  // The reply as it will be (the result an operation id keeps).
  auto reply_info = job;
  reply_info.priority = priority;
  if (!operation_id_of(req).empty()) {
    // Its position once the move is applied: counted on a copy of the order.
    auto order = st.order;
    auto keys = st.order_key;
    for (auto& [jid, rank, seq] : moved) {
      if (auto k = keys.find(jid); k != keys.end())
        order.erase(k->second);
      order[order_key_t{level, rank, seq}] = jid;
    }
    std::uint64_t pos = 0;
    for (auto it = order.lower_bound(order_key_t{level, INT64_MIN, 0});
         it != order.end() && std::get<0>(it->first) == level; ++it)
      if (is_queued(st, it->second)) {
        ++pos;
        if (it->second == id)
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
            auto old_level = std::get<0>(st.order_key.at(id));
            for (auto& [jid, rank, seq] : moved) {
              place_in_order(st, jid, level, rank, seq, false);
              auto& j = st.jobs[jid];
              j.priority = priority;
              if (auto a = st.live.find(jid); a != st.live.end())
                self->send(a->second, move_atom::value, priority, rank);
            }
            if (plan.renumbered)
              st.max_rank[level] = std::max(
                  plan.rank, plan.renumbered->empty() ? plan.rank : plan.renumbered->back());
            count_queued(st, job_state::queued, job_state::queued, old_level, level);
            auto info = st.jobs[id];
            info.position = position_of(st, id);
            rp.deliver(api_reply{bus::move_rep{info}});
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "store unavailable: " + to_string(e))});
          });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::submit_req& body) {
  auto& st = self->state;
  if (auto e = validate_spec(body.spec))
    return api_reply{*e};
  if (auto e = validate_array(body))
    return api_reply{*e};
  // SPEC section 9: a client job id makes the submit idempotent.
  std::string spec_digest;
  if (st.ctx->cfg.defects.ignore_client_job_ids ||
      (st.ctx->cfg.defects.forget_replays && body.job_id && st.jobs.count(*body.job_id)))
    body.job_id.reset();
  // The jobs this submit makes: one, or an array's tasks (ids derived from
  // the array's id, so that a replay finds them).
  std::vector<std::optional<std::uint64_t>> tasks{std::nullopt};
  if (body.array_indexes)
    tasks.assign(body.array_indexes->begin(), body.array_indexes->end());
  auto id_of = [&](const std::optional<std::uint64_t>& index) {
    if (!body.job_id)
      return st.ctx->new_id();
    return index ? array_task_id(*body.job_id, *index) : *body.job_id;
  };
  if (body.job_id) {
    auto& id = *body.job_id;
    if (!is_uuid(id, true))
      return api_reply{
          err(errc::invalid_argument, "job_id: must be a lowercase UUID (8-4-4-4-12 hex digits)")};
    spec_digest = req.args;
    auto first = id_of(tasks.front());
    if (auto j = st.jobs.find(first); j != st.jobs.end()) {
      auto d = st.spec_digest.find(first);
      if (d == st.spec_digest.end() || d->second != spec_digest)
        return api_reply{
            err(errc::job_conflict, fmt::format("job_id: job {} exists with another spec", id))};
      auto info = j->second;
      info.position = position_of(st, first);
      bus::submit_rep rep{info};
      if (body.array_indexes)
        rep.array_size = tasks.size();
      auto rp = self->make_response_promise<api_reply>();
      commit_then(self, {audit_of(now, *who, req, "submit", id, "replayed")}, rp,
                  [rep] { return api_reply{rep}; });
      return rp;
    }
    if (st.submits_in_flight.count(id))
      return api_reply{
          err(errc::unavailable, fmt::format("job_id: job {} is being submitted; retry", id))};
  }
  if (body.spec.node && !st.nodes.count(*body.spec.node))
    return api_reply{
        err(errc::not_found, fmt::format("node: no node named '{}'", *body.spec.node))};
  // Dependencies must exist; they may be in any state.
  std::vector<std::string> deps;
  for (auto& ref : body.spec.after.value_or(bus::string_list{})) {
    auto r = resolve_job(st, ref);
    if (auto* e = std::get_if<bus::error_info>(&r)) {
      // An array's id (or a unique prefix of it): after every one of its tasks.
      if (auto tasks = array_tasks_of(st, ref); !tasks.empty()) {
        for (auto& t : tasks)
          if (std::find(deps.begin(), deps.end(), t) == deps.end())
            deps.push_back(t);
        continue;
      }
      return api_reply{err(e->code, "after: " + e->message)};
    }
    auto& dep = std::get<std::string>(r);
    if (std::find(deps.begin(), deps.end(), dep) == deps.end())
      deps.push_back(dep);
  }
  job_row row;
  auto& j = row.info;
  j.id = id_of(tasks.front());
  row.spec_digest = spec_digest;
  j.name = default_name(body.spec);
  j.owner = who->name;
  policy::set_state(j, job_state::queued);
  j.argv = body.spec.argv;
  j.cwd = body.spec.cwd;
  j.ram_bytes = body.spec.ram_bytes;
  j.pinned_node = body.spec.node;
  j.submitted_ms = now;
  row.env = body.spec.env;
  j.priority = body.spec.priority.value_or("medium");
  j.gpus = body.spec.gpus.value_or(body.spec.vram_bytes ? 1 : 0); // = effective().gpus
  j.vram_bytes = body.spec.vram_bytes;
  j.cpus = body.spec.cpus.value_or(0);
  j.est_ms = body.spec.est_ms;
  j.timeout_ms = body.spec.timeout_ms;
  j.after = deps;
  j.profile = body.spec.profile.value_or(policy::default_profile_key(j.argv));
  j.ram_floor_bytes = body.spec.ram_floor_bytes.value_or(0);
  j.ram_start_min_bytes = body.spec.ram_start_min_bytes.value_or(0);
  j.preempt = body.spec.preempt.value_or("never");
  j.lease_ms = body.spec.lease_ms.value_or(static_cast<std::uint64_t>(st.ctx->cfg.lease_ms));
  j.lost_after_ms =
      body.spec.lost_after_ms.value_or(static_cast<std::uint64_t>(st.ctx->cfg.lost_after_ms));
  j.no_requeue = body.spec.no_requeue.value_or(false);
  j.retry_oom = body.spec.retry_oom.value_or(0);
  policy::profile_estimate est;
  std::optional<bus::profile_info> sizing;
  if (!body.spec.ram_bytes)
    sizing = bus::profile_info{j.profile};
  if (auto p = st.profiles.find(j.profile); p != st.profiles.end()) {
    est = policy::estimate(p->second.peak_ram_bytes, p->second.wall_ms);
    if (sizing)
      sizing = profile_info_of(p->second);
  }
  auto eff = policy::effective(body.spec, est, st.ctx->cfg.default_ram_bytes,
                               static_cast<std::uint64_t>(st.ctx->cfg.default_est_ms));
  j.effective_ram_bytes = eff.ram_bytes;
  j.effective_est_ms = eff.est_ms;
  if (!body.hold_for_node.value_or(false))
    if (auto why = never_runnable_here(st, j); !why.empty())
      return api_reply{err(errc::invalid_argument,
                           fmt::format("no node can ever run this job: {} (--hold-for-node queues "
                                       "it anyway, for a node yet to join or to grow)",
                                       fmt::join(why, "; ")))};
  auto level = level_index(j.priority);
  // One row per task, each the last of its level, in index order.
  std::vector<job_row> rows;
  rows.reserve(tasks.size());
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    auto& index = tasks[t];
    auto& r = rows.emplace_back(row);
    r.seq = st.next_seq++;
    if (body.array_argvs) {
      // A task of its own command (--from FILE), sized by its own profile.
      auto& argv = (*body.array_argvs)[t];
      r.info.argv = argv;
      r.info.profile = body.spec.profile.value_or(policy::default_profile_key(argv));
      policy::profile_estimate task_est;
      if (auto p = st.profiles.find(r.info.profile); p != st.profiles.end())
        task_est = policy::estimate(p->second.peak_ram_bytes, p->second.wall_ms);
      auto task_eff = policy::effective(body.spec, task_est, st.ctx->cfg.default_ram_bytes,
                                        static_cast<std::uint64_t>(st.ctx->cfg.default_est_ms));
      r.info.effective_ram_bytes = task_eff.ram_bytes;
      r.info.effective_est_ms = task_eff.est_ms;
    }
    r.rank = st.max_rank[level] + rank_step;
    st.max_rank[level] = r.rank;
    if (index) {
      auto suffix = fmt::format("-{}", *index);
      r.info.id = id_of(index);
      r.info.name = j.name.substr(0, bus_name_max - suffix.size()) + suffix;
      r.info.array = *body.job_id;
      r.info.array_index = index;
      r.info.array_limit = body.array_limit.value_or(0);
      r.env["CQ_ARRAY_ID"] = *body.job_id;
      r.env["CQ_ARRAY_INDEX"] = std::to_string(*index);
    }
  }
  auto rp = self->make_response_promise<api_reply>();
  if (st.ctx->cfg.defects.ack_submit_before_commit) {
    auto info = rows.front().info;
    info.position = st.queued_count[level] + 1;
    rp.deliver(api_reply{bus::submit_rep{info}});
  }
  auto in_flight = body.job_id.value_or("");
  if (!in_flight.empty())
    st.submits_in_flight.insert(in_flight);
  change_batch batch;
  batch.reserve(2 * rows.size() + 1);
  for (auto& r : rows) {
    batch.push_back(r);
    batch.push_back(
        event_row{r.info.id, r.seq, 1, "submitted", now, fmt::format("by {}", who->name)});
  }
  batch.push_back(audit_of(now, *who, req, "submit", body.array_indexes ? in_flight : j.id,
                           body.array_indexes ? fmt::format("queued {} tasks", rows.size())
                                              : std::string("queued")));
  bool is_array = body.array_indexes.has_value();
  commit_then(self, std::move(batch), rp, [=, rows = std::move(rows)]() mutable {
    auto& st = self->state;
    if (!in_flight.empty())
      st.submits_in_flight.erase(in_flight);
    auto lvl = level_index(rows.front().info.priority);
    auto first = rows.front().info;
    for (auto& row : rows) {
      if (!row.spec_digest.empty())
        st.spec_digest[row.info.id] = row.spec_digest;
      st.jobs[row.info.id] = row.info;
      st.by_seq[row.seq] = row.info.id;
      st.last_event[row.info.id] = 1; // submitted
      st.seq_of[row.info.id] = row.seq;
      place_in_order(st, row.info.id, lvl, row.rank, row.seq, false);
      ++st.queued_count[lvl];
      auto [waiting, failed_dep] = classify_deps(st, row.info);
      auto id = row.info.id;
      // The job actor keeps neither argv nor env (the store does).
      st.live[id] = spawn_job(self->system(), st.ctx, std::move(row), std::nullopt, node_actor{},
                              waiting, failed_dep, false, 1);
      self->link_to(st.live[id]);
    }
    // The first new job's place: the last ones of its level are the new ones.
    first.position = st.queued_count[lvl] - (is_array ? tasks.size() - 1 : 0);
    bus::submit_rep rep{first, sizing};
    if (is_array)
      rep.array_size = tasks.size();
    return api_reply{rep};
  });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::ls_req& body) {
  auto& st = self->state;
  // One page: from the cursor on, at most `limit` jobs and at most
  // limits::page_bytes of them (SPEC section 10: listings are paged).
  bus::ls_rep out;
  if (!st.positions_valid) {
    st.positions.clear();
    std::array<std::uint64_t, 3> count{};
    for (auto& [k, id] : st.order)
      if (is_queued(st, id))
        st.positions[id] = ++count[std::get<0>(k)];
    st.positions_valid = true;
  }
  auto& pos = st.positions;
  auto limit = body.limit.value_or(UINT64_MAX);
  // Every job is in by_seq; the non-terminal ones are in the order.
  std::uint64_t total = body.all ? st.by_seq.size() : st.order.size();
  std::size_t bytes = 64; // envelope and the reply's other fields
  auto from = body.cursor ? st.by_seq.upper_bound(*body.cursor) : st.by_seq.begin();
  for (auto it = from; it != st.by_seq.end(); ++it) {
    auto& j = st.jobs[it->second];
    if (!body.all && is_terminal(j.state))
      continue;
    auto size = bus::wire_size_bound(j);
    if (out.jobs.size() >= limit || (!out.jobs.empty() && bytes + size > bus::limits::page_bytes)) {
      out.next_cursor = std::prev(it)->first;
      break;
    }
    bytes += size;
    out.jobs.push_back(j);
    if (auto p = pos.find(it->second); p != pos.end())
      out.jobs.back().position = p->second;
    else
      out.jobs.back().position = 0;
  }
  out.total = total;
  return api_reply{std::move(out)};
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
  if (out.job.state != job_state::queued)
    return api_reply{std::move(out)};
  if (out.job.on_hold) {
    out.waiting.push_back(
        fmt::format("kept from starting by cq hold; cq release {} lets it start", id.substr(0, 8)));
    return api_reply{std::move(out)};
  }
  for (auto& d : out.job.after)
    if (st.jobs[d].state != job_state::succeeded)
      out.waiting.push_back(fmt::format("waits for job {} ({}) to succeed", d, st.jobs[d].state));
  if (!out.waiting.empty())
    return api_reply{std::move(out)};
  auto rp = self->make_response_promise<api_reply>();
  // One deadline per request, the waiting client's: the scheduler always
  // answers, and if it is gone the request fails at once.
  self->request(st.ctx->scheduler, caf::infinite, explain_atom::value, id)
      .then(
          [=](const bus::string_list& why) mutable {
            out.waiting = why;
            if (why.empty())
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
live_job(api_state& st, const std::string& ref, std::string_view hint = {}) {
  auto r = resolve_job(st, ref);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return *e;
  auto& id = std::get<std::string>(r);
  auto i = st.live.find(id);
  if (i == st.live.end())
    return err(errc::invalid_state,
               fmt::format("job {} is already {}{}", id, st.jobs[id].state, hint));
  return std::pair{id, i->second};
}

/// Who asked, for the job actor's commit (audit, operation id).
call_stamp stamp_of(const identity& who, const api_request& req) {
  return {who.name, std::string(to_string(who.who)), req.args, operation_id_of(req)};
}

} // namespace

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::cancel_req& body) {
  auto& st = self->state;
  auto live = live_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&live))
    return api_reply{*e};
  auto& [id, actor] = std::get<0>(live);
  if (st.ctx->cfg.defects.ignore_cancel) // deliberate defect (cq-sim's cancel_lost)
    return api_reply{bus::cancel_rep{st.jobs[id]}};
  auto rp = self->make_response_promise();
  rp.delegate(actor, cancel_atom::value, stamp_of(*who, req));
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::job_hold_req& body) {
  auto live = live_job(self->state, body.job, "; cq hold keeps a queued job from starting");
  if (auto* e = std::get_if<bus::error_info>(&live))
    return api_reply{*e};
  auto rp = self->make_response_promise();
  rp.delegate(std::get<0>(live).second, park_atom::value, !body.release, stamp_of(*who, req));
  return rp;
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
  std::string node;
  for (auto& a : st.allocs[id])
    if (a.id == alloc)
      node = a.node;
  if (node.empty())
    return api_reply{
        err(errc::not_found, fmt::format("allocation: job has no allocation '{}'", alloc))};
  auto n = st.nodes.find(node);
  if (n == st.nodes.end() || !n->second.handle)
    return api_reply{err(errc::unavailable, fmt::format("node {} is unknown", node))};
  auto max = body.max_bytes == 0
                 ? std::uint64_t{64 << 10}
                 : std::min<std::uint64_t>(body.max_bytes, bus::limits::log_chunk_bytes);
  auto rp = self->make_response_promise<api_reply>();
  // The node actor answers within its own deadline (order_timeout).
  self->request(n->second.handle, caf::infinite, bus::read_log_order{alloc, body.offset, max})
      .then(
          [=](const order_reply& lr) mutable {
            if (!lr.chunk) {
              rp.deliver(api_reply{lr.error});
              return;
            }
            auto& j = self->state.jobs[id];
            // Terminal only once the allocation read is the job's last one.
            bool terminal = is_terminal(j.state) && j.allocation == alloc;
            rp.deliver(api_reply{bus::logs_rep{alloc, lr.chunk->data, lr.chunk->next_offset,
                                               lr.chunk->eof, terminal}});
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(
                errc::unavailable, fmt::format("node {} did not answer: {}", node, to_string(e)))});
          });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::preempt_req& body) {
  auto& st = self->state;
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto& id = std::get<std::string>(r);
  auto i = st.live.find(id);
  if (i == st.live.end())
    return api_reply{
        err(errc::invalid_state, fmt::format("job {} is already {}", id, st.jobs[id].state))};
  // The job actor commits the yield request with its audit row.
  auto rp = self->make_response_promise();
  rp.delegate(i->second, yield_atom::value, fmt::format("cq preempt by {}", who->name),
              call_stamp{who->name, std::string(to_string(who->who)), req.args, ""});
  return rp;
}

} // namespace cq::coord::api_impl
