// The api's submit handler: one job, or an array's tasks in one commit
// (ADR 0027).
#include "api/state.hpp"
#include "cq/bus/array_row.hpp"
#include "cq/bus/codec.hpp"
#include "job_steps.hpp"
#include "observe.hpp"
#include "policy/placement.hpp"
#include "policy/transitions.hpp"

#include <fmt/ranges.h>
#include <sodium.h>

#include <array>
#include <unordered_set>

namespace cq::coord::api_impl {

namespace {

/// submit's refusal (policy::never_runnable) over the api's view of the
/// nodes: for each approved node why it could never run `j`; empty if one
/// could (or nothing is known yet).
std::vector<std::string> never_runnable_here(const api_state& st, const bus::job_info& j) {
  std::vector<const std::pair<const std::string, node_entry>*> nodes;
  nodes.reserve(st.nodes.size());
  for (auto& kv : st.nodes)
    nodes.push_back(&kv);
  policy::job_view job;
  static_cast<job_resources&>(job) = job_impl::resources_of(*st.ctx, j);
  job.id = j.id;
  // A node's view is made only when it is asked about (most jobs are
  // answered by the first approved node).
  return policy::never_runnable(
      nodes.size(),
      [&](std::size_t i) {
        auto& [name, n] = *nodes[i];
        auto v = policy::capacity_of(n.info);
        v.name = name;
        v.approved = n.info.state == "approved";
        return v;
      },
      job);
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

/// The tasks of the array `ref` names (bus::array_named: its id, a prefix
/// of it or its name), in submission order; empty if none.
bus::result<std::vector<std::string>> array_tasks_of(api_state& st, const std::string& ref) {
  auto array = array_named(st, ref);
  if (!array)
    return array.error();
  std::vector<std::string> out;
  if (array->empty())
    return out;
  auto& tasks = st.arrays.tasks(st.by_seq, *array);
  out.reserve(tasks.size());
  for (const job_node* node : tasks)
    out.push_back(node->first);
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
  if (b.spec.pty.value_or(false))
    return err(errc::invalid_argument, "pty: one terminal is one job; an array cannot have one");
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

/// A submit's batch is durable: its jobs join the read model, each the last
/// of its level, and wait without an actor (parked.cpp); `rep` is the reply.
api_reply committed(api_ptr self, const change_batch& batch, std::uint8_t level,
                    const bus::submit_rep& rep) {
  auto& st = self->state;
  std::size_t count = 0;
  for (auto& change : batch) {
    auto* row = std::get_if<job_row>(&change);
    if (!row)
      continue;
    auto& id = row->info.id;
    auto [at, fresh] = st.jobs.try_emplace(id);
    auto& node = *at;
    node.second = row->info;
    keep_spec_digest(st, node, row->spec_digest);
    node.second.seq = row->seq;
    node.second.last_event = 1; // submitted
    if (fresh) {
      st.ids.add(&node.first);
      st.names.add(&node);
      st.arrays.add(&node);
    }
    st.ids_prefix = 0;
    st.by_seq[row->seq] = &node;
    place_in_order(st, node, level, row->rank, row->seq, false);
    ++st.queued_count[level];
    park(self, id);
    ++count;
  }
  observe::submitted(*st.ctx, count);
  mark_board(self);
  return api_reply{rep};
}

} // namespace

bus::result<std::string> array_named(api_state& st, const std::string& ref) {
  return bus::array_named(
      ref, [&](auto f) { st.arrays.each_candidate(st.by_seq, ref, [&](const auto& j) { f(j); }); });
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
    // A replay answers with `info` (its first task's, for an array) and an
    // audit row that says it was one; nothing is made again.
    auto replay = [&](bus::job_info info) -> caf::result<api_reply> {
      bus::submit_rep rep{std::move(info)};
      if (body.array_indexes)
        rep.array_size = tasks.size();
      auto rp = self->make_response_promise<api_reply>();
      commit_then(self, {audit_of(now, *who, req, "submit", id, "replayed")}, rp,
                  [rep] { return api_reply{rep}; });
      return rp;
    };
    if (auto j = st.jobs.find(first); j != st.jobs.end()) {
      if (spec_digest_of(st, *j) != spec_digest)
        return api_reply{
            err(errc::job_conflict, fmt::format("job_id: job {} exists with another spec", id))};
      bus::job_info info = j->second;
      info.position = position_of(st, first);
      return replay(std::move(info));
    }
    // Finished and forgotten within the operations window: its replay
    // record answers (ADR 0073).
    if (auto o = st.operations.find(first);
        o != st.operations.end() && o->second.kind == "submit") {
      if (o->second.digest != spec_digest)
        return api_reply{
            err(errc::job_conflict, fmt::format("job_id: job {} existed with another spec", id))};
      auto info = bus::decode_record<bus::job_info>(o->second.result);
      if (!info)
        return api_reply{err(errc::internal, fmt::format("job_id: job {}'s replay record is "
                                                         "unreadable: {}",
                                                         id, info.error().message))};
      return replay(std::move(*info));
    }
    if (st.submits_in_flight.count(id))
      return api_reply{
          err(errc::unavailable, fmt::format("job_id: job {} is being submitted; retry", id))};
    // An earlier submit with this id made a task this one would make again
    // (its first index differs, or its first task left the history window):
    // no id is ever stored twice (the store does not check, ADR 0046).
    if (body.array_indexes)
      for (auto& index : tasks)
        if (auto task = id_of(index); st.jobs.count(task) || st.operations.count(task))
          return api_reply{
              err(errc::job_conflict,
                  fmt::format("job_id: task {} of array {} exists from another submit with this id",
                              *index, id))};
  }
  // A node of that name may join later: --hold-for-node queues for it, as
  // for any need no node meets yet; without it, the submit could never run.
  if (body.spec.node && !st.nodes.count(*body.spec.node) && !body.hold_for_node.value_or(false))
    return api_reply{err(errc::invalid_argument,
                         fmt::format("node: no node named '{}' (--hold-for-node queues the job "
                                     "for a node of that name yet to join)",
                                     *body.spec.node))};
  // Dependencies must exist; they may be in any state.
  // Each once, in the order given (an array's tasks are many: a set, not a
  // search of the list so far for each).
  std::vector<std::string> deps;
  std::unordered_set<std::string> seen;
  auto add_dep = [&](const std::string& dep) {
    if (seen.insert(dep).second)
      deps.push_back(dep);
  };
  for (auto& ref : body.spec.after.value_or(bus::string_list{})) {
    auto r = resolve_job(st, ref);
    if (auto* e = std::get_if<bus::error_info>(&r)) {
      // An array (its id, a unique prefix of it or its name): after every
      // one of its tasks.
      auto tasks = array_tasks_of(st, ref);
      if (!tasks)
        return api_reply{err(tasks.error().code, "after: " + tasks.error().message)};
      if (!tasks->empty()) {
        for (auto& t : *tasks)
          add_dep(t);
        continue;
      }
      return api_reply{err(e->code, "after: " + e->message)};
    }
    add_dep(std::get<std::string>(r));
  }
  job_row row;
  row.info = policy::job_of(body.spec);
  auto& j = row.info;
  j.id = id_of(tasks.front());
  row.spec_digest = spec_digest;
  j.owner = who->name;
  policy::set_state(j, job_state::queued);
  j.on_hold = body.on_hold.value_or(false); // cq submit --hold: until cq release
  j.submitted_ms = now;
  row.env = std::make_shared<const bus::env_map>(std::move(body.spec.env));
  j.after = deps;
  j.profile = body.spec.profile.value_or(policy::default_profile_key(j.argv));
  j.lease_ms = body.spec.lease_ms.value_or(static_cast<std::uint64_t>(st.ctx->cfg.lease_ms));
  j.lost_after_ms =
      body.spec.lost_after_ms.value_or(static_cast<std::uint64_t>(st.ctx->cfg.lost_after_ms));
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
  j.est_default = eff.est_default;
  if (!body.hold_for_node.value_or(false))
    if (auto why = never_runnable_here(st, j); !why.empty())
      return api_reply{err(errc::invalid_argument,
                           fmt::format("no node can ever run this job: {} (--hold-for-node queues "
                                       "it anyway, for a node yet to join or to grow)",
                                       fmt::join(why, "; ")))};
  auto level = level_index(j.priority);
  // The batch: one row per task, each the last of its level, in index order,
  // with its "submitted" event; then the audit row. The rows are built in
  // place (a task's environment is copied once) and, once committed, read
  // back from the same batch for the read model and the job actors.
  auto batch = std::make_shared<change_batch>();
  batch->reserve(2 * tasks.size() + 1);
  auto submitted = fmt::format("by {}{}", who->name, j.on_hold ? ", on hold" : "");
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    auto& index = tasks[t];
    auto& r = std::get<job_row>(batch->emplace_back(row));
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
      r.info.est_default = task_eff.est_default;
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
    }
    auto seq = r.seq;
    auto id = r.info.id; // r is not used past the next emplace_back
    batch->push_back(event_row{std::move(id), seq, 1, "submitted", now, submitted});
  }
  auto rp = self->make_response_promise<api_reply>();
  if (st.ctx->cfg.defects.ack_submit_before_commit) {
    auto info = std::get<job_row>(batch->front()).info;
    info.position = st.queued_count[level] + 1;
    rp.deliver(api_reply{bus::submit_rep{info}});
  }
  auto in_flight = body.job_id.value_or("");
  if (!in_flight.empty())
    st.submits_in_flight.insert(in_flight);
  batch->push_back(audit_of(now, *who, req, "submit", body.array_indexes ? in_flight : j.id,
                            body.array_indexes ? fmt::format("queued {} tasks", tasks.size())
                                               : std::string("queued")));
  bool is_array = body.array_indexes.has_value();
  auto count = tasks.size();
  // The reply, made now: the first new job's place counts the jobs queued
  // and those of submits not yet committed at its level.
  bus::submit_rep rep{std::get<job_row>(batch->front()).info, sizing};
  rep.job.position = st.queued_count[level] + st.queued_pending[level] + 1;
  if (is_array)
    rep.array_size = count;
  // A dependency that already failed: the job's actor fails it at once
  // (dependency_failed), and the submitter is told now, not by surprise.
  if (auto failed = classify_deps(st, rep.job, false).second; !failed.empty())
    rep.failed_after = failed.job, rep.failed_after_state = failed.state;
  st.queued_pending[level] += count;
  // Through the bridge, the store writes it once the commit is durable,
  // without waiting for this actor's next turn (docs/adr/0067).
  durable_hook hook;
  if (auto ahead = req.ahead; ahead && !st.ctx->cfg.defects.ack_submit_before_commit) {
    auto bytes = bus::encode_reply(req.id, rep);
    if (bytes.size() <= bus::limits::frame_bytes)
      hook.run = std::make_shared<const std::function<void()>>(
          [ahead, bytes = std::move(bytes)] { ahead->send(bytes); });
  }
  auto ahead = hook.run ? req.ahead : nullptr;
  // Committed or not, the client job id is free again: a failed commit
  // stored nothing, and the client's retry submits it anew.
  auto settled = [=](bool ok) {
    self->state.queued_pending[level] -= count;
    if (!in_flight.empty())
      self->state.submits_in_flight.erase(in_flight);
    if (ok && ahead)
      ahead->written = true;
  };
  self->request(st.ctx->store, caf::infinite, commit_atom::value,
                std::shared_ptr<const change_batch>(batch), std::move(hook))
      .then(
          [=](const commit_result& r) mutable {
            settled(r.error.empty());
            if (!r.error.empty())
              rp.deliver(api_reply{err(errc::internal, "store: " + r.error)});
            else
              rp.deliver(committed(self, *batch, level, rep));
          },
          [=](caf::error& e) mutable {
            settled(false);
            rp.deliver(api_reply{err(errc::internal, "store unavailable: " + to_string(e))});
          });
  return rp;
}

} // namespace cq::coord::api_impl
