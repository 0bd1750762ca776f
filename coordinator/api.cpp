// The api actor: authenticates and validates requests, answers reads from its
// read model, and hands changes to the job and node actors. Also recovery.
#include "auth/auth.hpp"
#include "coordinator.hpp"
#include "cq/bus/wire_size.hpp"
#include "internal.hpp"
#include "policy/order.hpp"
#include "policy/placement.hpp"
#include "policy/profile.hpp"
#include "policy/spec.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <map>
#include <set>
#include <unordered_map>

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<cq::coord::snapshot>)

namespace cq::coord {

using namespace cq::actors;

namespace {

using recover_atom = caf::atom_constant<caf::atom("recover")>;

struct node_entry {
  node_row row;
  caf::actor handle;
  bus::node_info info;
  std::vector<std::string> peers; ///< the latest connections that authenticated as this node
};

/// How many connections per node the reply routing remembers (a node's own
/// reconnects, and a second daemon the node actor refuses).
constexpr std::size_t peers_per_node = 4;

struct api_state {
  context_ptr ctx;
  std::unordered_map<std::string, identity> tokens;    ///< token hash -> identity
  std::unordered_map<std::string, invite_row> invites; ///< code hash -> unused invite
  std::unordered_map<std::string, bus::job_info> jobs; ///< read model of every job
  std::map<std::uint64_t, std::string> by_seq;         ///< job ids in submission order
  std::unordered_map<std::string, std::vector<bus::allocation_info>> allocs; ///< by job
  std::unordered_map<std::string, caf::actor> live;       ///< job actors of non-terminal jobs
  std::map<std::string, node_entry> nodes;                ///< by name
  std::unordered_map<std::string, std::string> peer_node; ///< connection -> node name
  std::uint64_t next_seq = 1;                             ///< seq of the next submitted job
  /// Serving order of every non-terminal job: (level, rank, seq) -> id. The
  /// api owns priority and rank (job actors hear of committed moves); running
  /// jobs keep their place for a requeue, positions count queued jobs only.
  std::map<std::tuple<std::uint8_t, std::int64_t, std::uint64_t>, std::string> order;
  std::unordered_map<std::string, std::tuple<std::uint8_t, std::int64_t, std::uint64_t>> order_key;
  std::array<std::int64_t, 3> max_rank{};      ///< per level
  std::array<std::uint64_t, 3> queued_count{}; ///< queued jobs per level
  /// Positions of queued jobs, computed for a listing and kept until the
  /// serving order or a job's state changes (a paged listing reads it once).
  std::unordered_map<std::string, std::uint64_t> positions;
  bool positions_valid = false;
  std::unordered_map<std::string, std::vector<std::string>> dependents; ///< job -> jobs after it
  std::map<std::string, profile_row> profiles;                          ///< by key
  static inline const char* name = "cq.api";
};

using policy::default_name;
using policy::has_nul;
using policy::rank_step;
using policy::valid_name;
using policy::validate_spec;

using order_key_t = std::tuple<std::uint8_t, std::int64_t, std::uint64_t>;

std::uint8_t level_index(const std::string& p) {
  auto l = policy::parse_level(p);
  return static_cast<std::uint8_t>(l ? *l : policy::level::medium);
}

/// Records job `id` at (level, rank, seq) in the serving order, or removes it
/// once terminal. `queued` says whether it counts for positions.
void place_in_order(api_state& st, const std::string& id, std::uint8_t level, std::int64_t rank,
                    std::uint64_t seq, bool terminal) {
  st.positions_valid = false;
  if (auto i = st.order_key.find(id); i != st.order_key.end()) {
    st.order.erase(i->second);
    st.order_key.erase(i);
  }
  if (terminal)
    return;
  order_key_t k{level, rank, seq};
  st.order[k] = id;
  st.order_key[id] = k;
  auto& m = st.max_rank[level];
  m = std::max(m, rank);
}

/// Counts queued jobs per level (for the position of a new job).
void count_queued(api_state& st, const std::string& before, const std::string& after,
                  std::uint8_t level_before, std::uint8_t level_after) {
  if (before != after || level_before != level_after)
    st.positions_valid = false;
  if (before == job_state::queued)
    --st.queued_count[level_before];
  if (after == job_state::queued)
    ++st.queued_count[level_after];
}

/// Splits `after` into dependencies still pending (registering the job as their
/// dependent) and the first one that ended without success. Called right
/// before a job actor is spawned, so no outcome can slip in between.
std::pair<std::set<std::string>, std::string> classify_deps(api_state& st, const bus::job_info& j) {
  std::set<std::string> waiting;
  std::string failed;
  for (auto& d : j.after) {
    auto it = st.jobs.find(d);
    auto ds = it != st.jobs.end() ? it->second.state : std::string(job_state::failed);
    if (ds == job_state::succeeded)
      continue;
    if (is_terminal(ds)) {
      if (failed.empty())
        failed = d;
    } else {
      waiting.insert(d);
      st.dependents[d].push_back(j.id);
    }
  }
  return {std::move(waiting), std::move(failed)};
}

bool is_queued(const api_state& st, const std::string& id) {
  auto j = st.jobs.find(id);
  return j != st.jobs.end() && j->second.state == job_state::queued;
}

/// 1-based position of `id` among the queued jobs of its level; 0 when it is
/// not queued (positions are for queued jobs).
std::uint64_t position_of(const api_state& st, const std::string& id) {
  auto i = st.order_key.find(id);
  if (i == st.order_key.end() || !is_queued(st, id))
    return 0;
  auto level = std::get<0>(i->second);
  std::uint64_t pos = 0;
  for (auto it = st.order.lower_bound(order_key_t{level, INT64_MIN, 0});
       it != st.order.end() && std::get<0>(it->first) == level; ++it) {
    if (!is_queued(st, it->second))
      continue;
    ++pos;
    if (it->second == id)
      return pos;
  }
  return 0;
}

using api_ptr = caf::stateful_actor<api_state>*;

bus::error_info err(errc c, std::string m) {
  return {c, std::move(m)};
}

/// Resolves a full job id or a unique prefix of at least 4 characters.
std::variant<std::string, bus::error_info> resolve_job(api_state& st, const std::string& ref) {
  if (st.jobs.count(ref))
    return ref;
  if (ref.size() < 4 || ref.size() > 64)
    return err(errc::not_found, fmt::format("job: no job '{}'", ref.substr(0, 64)));
  std::string found;
  for (auto& [id, _] : st.jobs)
    if (id.compare(0, ref.size(), ref) == 0) {
      if (!found.empty())
        return err(errc::invalid_argument, fmt::format("job: '{}' matches several jobs", ref));
      found = id;
    }
  if (found.empty())
    return err(errc::not_found, fmt::format("job: no job '{}'", ref));
  return found;
}

bus::node_info node_view(api_ptr self, const node_entry& n) {
  auto info = n.info;
  info.name = n.row.name;
  info.state = n.row.state;
  info.online =
      policy::heartbeat_fresh(info.last_heartbeat_ms, self->state.ctx->cfg.heartbeat_fresh_ms,
                              now_ms(self, *self->state.ctx));
  return info;
}

template <class OnOk>
void commit_then(api_ptr self, change_batch batch, caf::typed_response_promise<api_reply> rp,
                 OnOk on_ok) {
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .then(
          [=](const commit_result& r) mutable {
            if (!r.error.empty())
              rp.deliver(api_reply{err(errc::internal, "store: " + r.error)});
            else
              rp.deliver(on_ok());
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "store unavailable: " + to_string(e))});
          });
}

/// Carries an order to a node and, once the node confirms, commits the audit
/// row and replies with the node's current view.
template <class Order>
caf::result<api_reply> order_then_audit(api_ptr self, const identity& who, caf::actor node,
                                        Order order, std::string op, std::string target) {
  auto rp = self->make_response_promise<api_reply>();
  // The node actor answers every order within its own deadline (order_timeout).
  self->request(node, caf::infinite, std::move(order))
      .then(
          [=](const order_reply& r) mutable {
            if (!r.ok) {
              rp.deliver(api_reply{r.error});
              return;
            }
            auto now = now_ms(self, *self->state.ctx);
            auto name = target.substr(0, target.find('/'));
            commit_then(
                self, {audit_row{now, who.name, std::string(to_string(who.who)), op, target, "ok"}},
                rp, [=] {
                  auto& st = self->state;
                  bus::node_info info;
                  if (auto n = st.nodes.find(name); n != st.nodes.end())
                    info = node_view(self, n->second);
                  return api_reply{bus::node_rep{info}};
                });
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{
                err(errc::unavailable, fmt::format("node did not answer: {}", to_string(e)))});
          });
  return rp;
}

/// Remembers that connection `peer` authenticated as node `n`, so that answers
/// to orders from it reach the node actor (which checks the order went there).
void note_peer(api_state& st, node_entry& n, const std::string& peer) {
  if (std::find(n.peers.begin(), n.peers.end(), peer) != n.peers.end())
    return;
  n.peers.push_back(peer);
  st.peer_node[peer] = n.row.name;
  if (n.peers.size() > peers_per_node) {
    st.peer_node.erase(n.peers.front());
    n.peers.erase(n.peers.begin());
  }
}

/// SPEC section 9: validates a move, commits the job's new (level, rank), and
/// the renumbered ranks of its level when there was no gap left, in one
/// transaction with the audit row; then tells the job actors.
caf::result<api_reply> handle_move(api_ptr self, const identity& who, const bus::move_req& m) {
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
  batch.push_back(audit_row{now, who.name, std::string(to_string(who.who)), "move", id,
                            fmt::format("{} {}", priority, plan.rank)});
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

caf::result<api_reply> handle(api_ptr self, const identity* who, const api_request& req) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  auto need = [&](role r) -> std::optional<bus::error_info> {
    if (!who)
      return err(errc::unauthenticated, "missing or unknown token");
    if (who->who != r && who->who != role::owner)
      return err(errc::permission_denied,
                 fmt::format("role {} may not call this", to_string(who->who)));
    if (r == role::node && who->who != role::node)
      return err(errc::permission_denied, "only nodes speak the node protocol");
    return std::nullopt;
  };
  auto need_owner = [&]() -> std::optional<bus::error_info> {
    if (!who)
      return err(errc::unauthenticated, "missing or unknown token");
    if (who->who != role::owner)
      return err(errc::permission_denied,
                 fmt::format("role {} may not call this", to_string(who->who)));
    return std::nullopt;
  };
  return std::visit(
      [&](auto& body) -> caf::result<api_reply> {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, bus::submit_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          if (auto e = validate_spec(body.spec))
            return api_reply{*e};
          if (body.spec.node && !st.nodes.count(*body.spec.node))
            return api_reply{
                err(errc::not_found, fmt::format("node: no node named '{}'", *body.spec.node))};
          // Dependencies must exist; they may be in any state.
          std::vector<std::string> deps;
          for (auto& ref : body.spec.after.value_or(bus::string_list{})) {
            auto r = resolve_job(st, ref);
            if (auto* e = std::get_if<bus::error_info>(&r))
              return api_reply{err(e->code, "after: " + e->message)};
            auto& dep = std::get<std::string>(r);
            if (std::find(deps.begin(), deps.end(), dep) == deps.end())
              deps.push_back(dep);
          }
          job_row row;
          auto& j = row.info;
          j.id = st.ctx->new_id();
          row.seq = st.next_seq++;
          j.name = default_name(body.spec);
          j.owner = who->name;
          j.state = job_state::queued;
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
          policy::profile_estimate est;
          if (auto p = st.profiles.find(j.profile); p != st.profiles.end())
            est = policy::estimate(p->second.peak_ram_bytes, p->second.wall_ms);
          auto eff = policy::effective(body.spec, est, st.ctx->cfg.default_ram_bytes,
                                       static_cast<std::uint64_t>(st.ctx->cfg.default_est_ms));
          j.effective_ram_bytes = eff.ram_bytes;
          j.effective_est_ms = eff.est_ms;
          auto level = level_index(j.priority);
          row.rank = st.max_rank[level] + rank_step;
          st.max_rank[level] = row.rank;
          auto rp = self->make_response_promise<api_reply>();
          if (st.ctx->cfg.defects.ack_submit_before_commit) {
            auto info = row.info;
            info.position = st.queued_count[level] + 1;
            rp.deliver(api_reply{bus::submit_rep{info}});
          }
          commit_then(self, {row, audit_row{now, who->name, "owner", "submit", j.id, "queued"}}, rp,
                      [=]() mutable {
                        auto& st = self->state;
                        st.jobs[row.info.id] = row.info;
                        st.by_seq[row.seq] = row.info.id;
                        auto lvl = level_index(row.info.priority);
                        place_in_order(st, row.info.id, lvl, row.rank, row.seq, false);
                        ++st.queued_count[lvl];
                        auto [waiting, failed_dep] = classify_deps(st, row.info);
                        auto info = row.info;
                        // The job actor keeps neither argv nor env (the store does).
                        st.live[info.id] = spawn_job(self->system(), st.ctx, std::move(row),
                                                     std::nullopt, nullptr, waiting, failed_dep);
                        self->link_to(st.live[info.id]);
                        // A new job is the last of its level: no scan needed.
                        info.position = st.queued_count[lvl];
                        return api_reply{bus::submit_rep{info}};
                      });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::ls_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
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
            if (out.jobs.size() >= limit ||
                (!out.jobs.empty() && bytes + size > bus::limits::page_bytes)) {
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
        } else if constexpr (std::is_same_v<T, bus::show_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          auto r = resolve_job(st, body.job);
          if (auto* e = std::get_if<bus::error_info>(&r))
            return api_reply{*e};
          auto id = std::get<std::string>(r);
          bus::show_rep out{st.jobs[id], {}, {}, std::nullopt};
          auto& history = st.allocs[id];
          auto skip = history.size() > bus::show_max_allocations
                          ? history.size() - bus::show_max_allocations
                          : 0;
          out.allocations.assign(history.begin() + static_cast<std::ptrdiff_t>(skip),
                                 history.end());
          if (skip)
            out.allocations_omitted = skip;
          out.job.position = position_of(st, id);
          if (out.job.state != job_state::queued)
            return api_reply{std::move(out)};
          for (auto& d : out.job.after)
            if (st.jobs[d].state != job_state::succeeded)
              out.waiting.push_back(
                  fmt::format("waits for job {} ({}) to succeed", d, st.jobs[d].state));
          if (!out.waiting.empty())
            return api_reply{std::move(out)};
          auto rp = self->make_response_promise<api_reply>();
          self->request(st.ctx->scheduler, std::chrono::seconds(5), explain_atom::value, id)
              .then(
                  [=](const bus::string_list& why) mutable {
                    out.waiting = why;
                    if (why.empty())
                      out.waiting.push_back("fits now; starts on the next placement pass");
                    rp.deliver(api_reply{out});
                  },
                  [=](caf::error&) mutable { rp.deliver(api_reply{out}); });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::cancel_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          auto r = resolve_job(st, body.job);
          if (auto* e = std::get_if<bus::error_info>(&r))
            return api_reply{*e};
          auto& id = std::get<std::string>(r);
          auto i = st.live.find(id);
          if (i == st.live.end())
            return api_reply{err(errc::invalid_state,
                                 fmt::format("job {} is already {}", id, st.jobs[id].state))};
          auto rp = self->make_response_promise();
          rp.delegate(i->second, cancel_atom::value, who->name);
          return rp;
        } else if constexpr (std::is_same_v<T, bus::move_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          return handle_move(self, *who, body);
        } else if constexpr (std::is_same_v<T, bus::release_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          if (body.hold.empty() || body.hold.size() > 128)
            return api_reply{err(errc::invalid_argument, "hold: give the exact hold id")};
          std::string node;
          for (auto& [name, n] : st.nodes)
            for (auto& h : n.info.holds)
              if (h.id == body.hold)
                node = name;
          if (node.empty())
            return api_reply{err(errc::not_found,
                                 fmt::format("hold: no current hold '{}' (released already, or a "
                                             "stale id: refresh with cq node ls)",
                                             body.hold.substr(0, 64)))};
          return order_then_audit(self, *who, st.nodes[node].handle, bus::release_order{body.hold},
                                  "release", node + "/" + body.hold);
        } else if constexpr (std::is_same_v<T, bus::node_clear_fault_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          if (body.reason.empty() || body.reason.size() > 1000 || has_nul(body.reason))
            return api_reply{
                err(errc::invalid_argument, "reason: say why the fault is cleared (1-1000 bytes)")};
          auto n = st.nodes.find(body.name);
          if (n == st.nodes.end())
            return api_reply{err(errc::not_found,
                                 fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
          if (!n->second.info.fault)
            return api_reply{
                err(errc::invalid_state, fmt::format("node {} has no latched fault", body.name))};
          return order_then_audit(self, *who, n->second.handle,
                                  bus::clear_fault_order{body.reason, who->name},
                                  "node_clear_fault", body.name);
        } else if constexpr (std::is_same_v<T, bus::profile_ls_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          bus::profile_ls_rep out;
          for (auto& [key, p] : st.profiles) {
            auto est = policy::estimate(p.peak_ram_bytes, p.wall_ms);
            bus::profile_info info{key, p.runs, est.ram_bytes, 0, 0, est.est_ms, p.updated_ms};
            for (auto v : p.peak_ram_bytes)
              info.peak_ram_bytes = std::max(info.peak_ram_bytes, v);
            for (auto v : p.peak_vram_bytes)
              info.peak_vram_bytes = std::max(info.peak_vram_bytes, v);
            out.profiles.push_back(std::move(info));
          }
          return api_reply{std::move(out)};
        } else if constexpr (std::is_same_v<T, bus::logs_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          auto r = resolve_job(st, body.job);
          if (auto* e = std::get_if<bus::error_info>(&r))
            return api_reply{*e};
          auto id = std::get<std::string>(r);
          auto alloc = body.allocation ? *body.allocation : st.jobs[id].allocation;
          if (alloc.empty())
            return api_reply{
                bus::logs_rep{"", "", body.offset, true, is_terminal(st.jobs[id].state)}};
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
          self->request(n->second.handle, caf::infinite,
                        bus::read_log_order{alloc, body.offset, max})
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
                    rp.deliver(
                        api_reply{err(errc::unavailable, fmt::format("node {} did not answer: {}",
                                                                     node, to_string(e)))});
                  });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::node_invite_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          if (!valid_name(body.name))
            return api_reply{
                err(errc::invalid_argument, "name: use 1-64 letters, digits, '.', '-' or '_'")};
          bool replace = body.replace.value_or(false);
          auto existing = st.nodes.find(body.name);
          // SPEC section 10: one identity is one daemon. A second invite for a
          // name that joined would let a second daemon in behind it.
          if (existing != st.nodes.end() && !replace)
            return api_reply{err(
                errc::already_exists,
                fmt::format("name: node {} already joined ({}, {}); to move it to a new daemon, "
                            "invite it with --replace (its token is revoked at once and it needs "
                            "approval again)",
                            body.name, existing->second.row.state,
                            node_view(self, existing->second).online ? "online" : "offline"))};
          auto code = st.ctx->new_invite_code();
          invite_row inv{hash_secret(code), body.name, now + st.ctx->cfg.invite_ttl_ms, false};
          change_batch batch{inv};
          std::vector<std::string> revoked;
          std::optional<node_row> reset;
          if (existing != st.nodes.end()) {
            for (auto& [hash, id] : st.tokens)
              if (id.who == role::node && id.name == body.name) {
                revoked.push_back(hash);
                batch.push_back(token_row{hash, id.name, "node", id.created_ms, now});
              }
            reset = existing->second.row;
            reset->state = "pending";
            batch.push_back(*reset);
          }
          batch.push_back(audit_row{now, who->name, "owner",
                                    replace ? "node_replace" : "node_invite", body.name, "ok"});
          auto rp = self->make_response_promise<api_reply>();
          commit_then(self, std::move(batch), rp, [=] {
            auto& st = self->state;
            st.invites[inv.hash] = inv;
            for (auto& h : revoked)
              st.tokens.erase(h);
            if (reset) {
              auto& n = st.nodes[reset->name];
              n.row = *reset;
              self->send(n.handle, approve_atom::value, false);
              self->send(n.handle, peer_atom::value);
              spdlog::warn("node {}: replaced by the Owner; its old token is revoked", reset->name);
            }
            return api_reply{bus::node_invite_rep{code, inv.expires_ms}};
          });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::node_join_req>) {
          if (!valid_name(body.name))
            return api_reply{err(errc::invalid_argument, "name: not a valid node name")};
          auto h = hash_secret(body.code);
          auto i = st.invites.find(h);
          if (i == st.invites.end() || i->second.used || i->second.node != body.name ||
              i->second.expires_ms < now)
            return api_reply{
                err(errc::unauthenticated,
                    "invite code is unknown, already used, expired or for another node")};
          auto inv = i->second;
          inv.used = true;
          auto token = st.ctx->new_token();
          token_row tok{hash_secret(token), body.name, "node", now, 0};
          // A node that joins again (after an invite with --replace) starts
          // pending, and every other token of its name is revoked: the joiner
          // never inherits an approval or shares the identity.
          node_row nrow{body.name, "pending", now};
          change_batch batch{inv, tok};
          std::vector<std::string> revoked;
          if (auto n = st.nodes.find(body.name); n != st.nodes.end()) {
            nrow = n->second.row;
            nrow.state = "pending";
            for (auto& [hash, id] : st.tokens)
              if (id.who == role::node && id.name == body.name) {
                revoked.push_back(hash);
                batch.push_back(token_row{hash, id.name, "node", id.created_ms, now});
              }
          }
          batch.push_back(nrow);
          batch.push_back(audit_row{now, body.name, "node", "node_join", body.name, "ok"});
          auto rp = self->make_response_promise<api_reply>();
          commit_then(self, std::move(batch), rp, [=] {
            auto& st = self->state;
            st.invites.erase(inv.hash);
            for (auto& h : revoked)
              st.tokens.erase(h);
            st.tokens[tok.hash] = identity{tok.identity, role::node, tok.created_ms};
            auto& n = st.nodes[nrow.name];
            n.row = nrow;
            if (!n.handle) {
              n.info.name = nrow.name;
              n.handle = spawn_node(self->system(), st.ctx, nrow);
              self->link_to(n.handle);
            } else {
              self->send(n.handle, approve_atom::value, false);
              self->send(n.handle, peer_atom::value);
            }
            return api_reply{bus::node_join_rep{token}};
          });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::node_approve_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          auto n = st.nodes.find(body.name);
          if (n == st.nodes.end())
            return api_reply{err(errc::not_found,
                                 fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
          auto row = n->second.row;
          row.state = "approved";
          auto rp = self->make_response_promise<api_reply>();
          commit_then(self,
                      {row, audit_row{now, who->name, "owner", "node_approve", row.name, "ok"}}, rp,
                      [=] {
                        auto& n = self->state.nodes[row.name];
                        n.row = row;
                        self->send(n.handle, approve_atom::value, true);
                        return api_reply{bus::node_rep{node_view(self, n)}};
                      });
          return rp;
        } else if constexpr (std::is_same_v<T, bus::node_ls_req>) {
          if (auto e = need_owner())
            return api_reply{*e};
          bus::node_ls_rep out;
          for (auto& [name, n] : st.nodes)
            out.nodes.push_back(node_view(self, n));
          return api_reply{std::move(out)};
        } else if constexpr (std::is_same_v<T, bus::heartbeat_req>) {
          if (auto e = need(role::node))
            return api_reply{*e};
          // Bounded so that a node's view (node ls, the board) stays small.
          if (body.allocations.size() > bus::limits::argv_items)
            return api_reply{err(errc::invalid_argument, "allocations: too many")};
          if (body.lanes && body.lanes->size() > 64)
            return api_reply{err(errc::invalid_argument, "lanes: at most 64")};
          if (body.holds && body.holds->size() > 256)
            return api_reply{err(errc::invalid_argument, "holds: at most 256")};
          if (body.outside_gpu_processes && body.outside_gpu_processes->size() > 256)
            return api_reply{err(errc::invalid_argument, "outside_gpu_processes: at most 256")};
          if (body.busy_probes && body.busy_probes->size() > 64)
            return api_reply{err(errc::invalid_argument, "busy_probes: at most 64")};
          auto n = st.nodes.find(who->name);
          if (n == st.nodes.end())
            return api_reply{err(errc::not_found, "node is not registered")};
          note_peer(st, n->second, req.peer);
          auto rp = self->make_response_promise();
          rp.delegate(n->second.handle, beat_atom::value, req.peer, body);
          return rp;
        } else if constexpr (std::is_same_v<T, bus::report_req>) {
          if (auto e = need(role::node))
            return api_reply{*e};
          if (body.kind != "started" && body.kind != "exited")
            return api_reply{err(errc::invalid_argument, "kind: must be started or exited")};
          if (body.detail && body.detail->size() > 64 * 1024)
            return api_reply{err(errc::invalid_argument, "detail: at most 64 KiB")};
          auto n = st.nodes.find(who->name);
          if (n == st.nodes.end())
            return api_reply{err(errc::not_found, "node is not registered")};
          note_peer(st, n->second, req.peer);
          if (st.ctx->cfg.defects.drop_exit_reports && body.kind == "exited")
            return api_reply{bus::report_rep{body.seq}};
          auto rp = self->make_response_promise();
          rp.delegate(n->second.handle, report_atom::value, req.peer, body);
          return rp;
        } else {
          return api_reply{err(errc::unknown_op, "unknown op")};
        }
      },
      const_cast<bus::coordinator_request&>(req.body));
}

/// The api is linked to every job and node actor it spawns: it ends with them
/// (crash-only, ADR 0003), and they with it.
caf::behavior api_actor(api_ptr self, context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  return {
      [=](const api_request& req) -> caf::result<api_reply> {
        auto& st = self->state;
        const identity* who = nullptr;
        if (!req.token.empty())
          if (auto i = st.tokens.find(hash_secret(req.token)); i != st.tokens.end())
            who = &i->second;
        if (!req.token.empty() && !who)
          return api_reply{err(errc::unauthenticated, "unknown token")};
        return handle(self, who, req);
      },
      [=](job_atom, const job_row& row) {
        auto& st = self->state;
        auto& j = row.info;
        auto& cur = st.jobs[j.id];
        // The job actor holds no argv (the store does) and the serving order is
        // ours: keep both from the read model.
        auto argv = std::move(cur.argv);
        auto priority = cur.priority;
        auto before = cur.state;
        cur = j;
        cur.argv = std::move(argv);
        cur.priority = priority;
        auto lvl = level_index(priority);
        count_queued(st, before, j.state, lvl, lvl);
        if (!is_terminal(j.state))
          return;
        place_in_order(st, j.id, lvl, 0, 0, true);
        st.live.erase(j.id);
        // Dependents learn the outcome (a failure cascades through them).
        if (auto d = st.dependents.find(j.id); d != st.dependents.end()) {
          for (auto& dep : d->second)
            if (auto a = st.live.find(dep); a != st.live.end())
              self->send(a->second, dep_atom::value, j.id, j.state);
          st.dependents.erase(d);
        }
      },
      [=](measure_atom, const measurement& m) {
        auto& st = self->state;
        if (m.profile.empty() || (!m.peak_ram_bytes && m.wall_ms == 0))
          return;
        auto& p = st.profiles[m.profile];
        p.key = m.profile;
        ++p.runs;
        auto push = [](std::vector<std::uint64_t>& v, std::uint64_t x) {
          v.push_back(x);
          if (v.size() > profile_samples)
            v.erase(v.begin());
        };
        if (m.peak_ram_bytes)
          push(p.peak_ram_bytes, *m.peak_ram_bytes);
        if (m.peak_vram_bytes)
          push(p.peak_vram_bytes, *m.peak_vram_bytes);
        push(p.wall_ms, m.wall_ms);
        p.updated_ms = now_ms(self, *st.ctx);
        // Profiles are derived data: losing one sample to a crash costs nothing,
        // so the update is not on any caller's acknowledgement path.
        self->request(st.ctx->store, caf::infinite, commit_atom::value,
                      std::make_shared<const change_batch>(change_batch{p}))
            .then([](const commit_result& r) {
              if (!r.error.empty())
                spdlog::warn("profile update not stored: {}", r.error);
            });
      },
      [=](alloc_atom, const bus::allocation_info& a) {
        auto& v = self->state.allocs[a.job];
        for (auto& x : v)
          if (x.id == a.id) {
            x = a;
            return;
          }
        v.push_back(a);
      },
      [=](info_atom, const bus::node_info& n) {
        if (auto i = self->state.nodes.find(n.name); i != self->state.nodes.end())
          i->second.info = n;
      },
      // An answer to an order, from the gateway (through the bridge, in the
      // order the connection sent it): for the node that connection
      // authenticated as. Unknown connections are ignored.
      [=](const node_reply& r) {
        auto& st = self->state;
        auto i = st.peer_node.find(r.peer);
        if (i == st.peer_node.end())
          return;
        if (auto n = st.nodes.find(i->second); n != st.nodes.end() && n->second.handle)
          self->send(n->second.handle, reply_atom::value, r);
      },
      // INTERNAL: ask job `id`'s running allocation to yield (cq preempt, leases).
      [=](yield_atom, const std::string& id) {
        if (auto a = self->state.live.find(id); a != self->state.live.end())
          self->send(a->second, yield_atom::value);
      },
      [=](recover_atom, std::shared_ptr<snapshot> snap) {
        auto& st = self->state;
        for (auto& t : snap->tokens)
          if (auto r = parse_role(t.role); r && t.revoked_ms == 0)
            st.tokens[t.hash] = identity{t.identity, *r, t.created_ms};
        for (auto& i : snap->invites)
          st.invites[i.hash] = i;
        for (auto& p : snap->profiles)
          st.profiles[p.key] = p;
        for (auto& n : snap->nodes) {
          auto& e = st.nodes[n.name];
          e.row = n;
          e.info.name = n.name;
          e.info.state = n.state;
          e.handle = spawn_node(self->system(), st.ctx, n);
          self->link_to(e.handle);
        }
        std::unordered_map<std::string, bus::allocation_info> live_alloc;
        for (auto& a : snap->allocations) {
          st.allocs[a.job].push_back(a);
          if (a.state != "finished")
            live_alloc[a.job] = a;
        }
        std::size_t live = 0;
        auto& defects = st.ctx->cfg.defects;
        if (defects.forget_queued_on_recovery)
          std::erase_if(snap->jobs,
                        [](const job_row& r) { return r.info.state == job_state::queued; });
        if (defects.requeue_live_on_recovery)
          for (auto& row : snap->jobs)
            if (live_alloc.erase(row.info.id))
              row.info.state = job_state::queued;
        for (auto& row : snap->jobs) {
          st.jobs[row.info.id] = row.info;
          st.by_seq[row.seq] = row.info.id;
          st.next_seq = std::max(st.next_seq, row.seq + 1);
          auto lvl = level_index(row.info.priority);
          place_in_order(st, row.info.id, lvl, row.rank, row.seq, is_terminal(row.info.state));
          count_queued(st, "", row.info.state, lvl, lvl);
        }
        for (auto& row : snap->jobs) {
          if (is_terminal(row.info.state))
            continue;
          auto [waiting, failed_dep] = classify_deps(st, row.info);
          std::optional<bus::allocation_info> a;
          caf::actor node;
          if (auto i = live_alloc.find(row.info.id); i != live_alloc.end()) {
            a = i->second;
            if (auto n = st.nodes.find(a->node); n != st.nodes.end())
              node = n->second.handle;
          }
          if (a && !node) {
            spdlog::error("job {}: allocation {} is on unknown node {}", row.info.id, a->id,
                          a->node);
            a.reset();
          }
          auto r = row;
          // The resume flag is not stored: it is the last finished attempt's outcome.
          bool resume = false;
          auto& history = st.allocs[r.info.id];
          for (auto h = history.rbegin(); h != history.rend(); ++h)
            if (h->state == "finished") {
              resume = h->reason == "checkpointed";
              break;
            }
          auto id = r.info.id;
          st.live[id] =
              spawn_job(self->system(), st.ctx, std::move(r), a, node, waiting, failed_dep, resume);
          self->link_to(st.live[id]);
          ++live;
        }
        spdlog::info("recovered {} jobs ({} live), {} nodes", snap->jobs.size(), live,
                     snap->nodes.size());
      },
  };
}

} // namespace

std::string init_owner(store& db, const std::string& name, const std::string& token,
                       std::int64_t now_ms) {
  if (db.has_owner())
    throw std::runtime_error("an owner already exists in this state directory");
  if (!valid_name(name))
    throw std::runtime_error("owner name: use 1-64 letters, digits, '.', '-' or '_'");
  if (auto e = db.apply({token_row{hash_secret(token), name, "owner", now_ms, 0},
                         audit_row{now_ms, name, "owner", "init_owner", name, "ok"}}))
    throw std::runtime_error(*e);
  return token;
}

context_ptr spawn_coordinator(caf::actor_system& sys, std::shared_ptr<store> db, context c,
                              spawn_options opts) {
  auto ctx = std::make_shared<context>(std::move(c));
  auto snap = std::make_shared<snapshot>(db->load());
  // SPEC section 10: damage is loud. A coordinator never serves a state it
  // could only read in part.
  if (!snap->damaged.empty()) {
    std::string list;
    for (std::size_t i = 0; i < snap->damaged.size() && i < 10; ++i)
      list += fmt::format("\n  {}", snap->damaged[i]);
    throw std::runtime_error(fmt::format(
        "the state database has {} damaged row(s); not starting:{}{}\n(cq-coordinator --check "
        "lists them all)",
        snap->damaged.size(), list, snap->damaged.size() > 10 ? "\n  ..." : ""));
  }
  ctx->store = spawn_store(sys, db, opts.detached_store, ctx->fatal);
  if (opts.wrap_store)
    ctx->store = opts.wrap_store(sys, ctx->store);
  ctx->scheduler = spawn_scheduler(sys, ctx);
  ctx->api = sys.spawn(api_actor, ctx);
  caf::anon_send(ctx->api, recover_atom::value, std::move(snap));
  return ctx;
}

} // namespace cq::coord
