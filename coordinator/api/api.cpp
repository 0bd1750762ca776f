// The api actor: authenticates each request and dispatches it by type to
// its handler (jobs.cpp, nodes.cpp); it keeps the read model that listings
// are served from and hears of every committed change from the job and node
// actors. Recovery is in recovery.cpp.
#include "api/history.hpp"
#include "observe.hpp"

namespace cq::coord {

namespace api_impl {

namespace {

/// Whom failed authentications are counted against: the peer's address, or
/// on loopback (where every client shares one) its connection.
std::string limit_key(const api_request& req) {
  return req.addr.empty() || req.addr == "127.0.0.1" || req.addr == "::1" ? "conn " + req.peer
                                                                          : "addr " + req.addr;
}

template <class T>
constexpr bool has_operation_id = requires(T t) {
  t.operation_id;
};

/// What a refusal's audit row names: the job, node or hold of the request.
template <class T>
std::string target_of(const T& body) {
  if constexpr (requires { body.job; })
    return body.job.substr(0, 64);
  else if constexpr (requires { body.hold; })
    return body.hold.substr(0, 128);
  else if constexpr (requires { body.name; })
    return body.name.substr(0, 64);
  else
    return {};
}

/// Digest of the request's arguments (without its operation id): the audit
/// row's `args`, an operation's argument digest, a client job id's spec.
template <class T>
std::string args_digest(const T& body) {
  if constexpr (has_operation_id<T>) {
    auto copy = body;
    copy.operation_id.reset();
    return digest_of(bus::encode_body(copy));
  } else if constexpr (std::is_same_v<T, bus::submit_req>) {
    return digest_of(bus::encode_body(body.spec));
  } else {
    return digest_of(bus::encode_body(body));
  }
}

/// Commits the audit row of a refused mutating call, then delivers `e`.
void audit_refusal(api_ptr self, const identity* who, const api_request& req, std::string_view op,
                   std::string target, bus::error_info e,
                   caf::typed_response_promise<api_reply> rp) {
  auto now = now_ms(self, *self->state.ctx);
  audit_row row{now,
                who ? who->name : std::string(),
                who ? std::string(to_string(who->who)) : std::string("none"),
                std::string(op),
                std::move(target),
                std::string(to_string(e.code)),
                req.args};
  commit_then(self, {row}, rp, [e] { return api_reply{e}; });
}

caf::result<api_reply> refuse_audited(api_ptr self, const identity* who, const api_request& req,
                                      std::string_view op, std::string target, bus::error_info e) {
  auto rp = self->make_response_promise<api_reply>();
  audit_refusal(self, who, req, op, std::move(target), std::move(e), rp);
  return rp;
}

const bus::error_info* error_of(const caf::result<api_reply>& r) {
  if (r.flag != caf::rt_value || r.value.empty() || !r.value.match_element<api_reply>(0))
    return nullptr;
  return std::get_if<bus::error_info>(&r.value.get_as<api_reply>(0).body);
}

/// The reply type of each request that takes an operation id.
template <class T>
struct reply_of {
  using type = bus::node_rep; // release and the node_* operations
};
template <>
struct reply_of<bus::cancel_req> {
  using type = bus::cancel_rep;
};
template <>
struct reply_of<bus::job_hold_req> {
  using type = bus::job_hold_rep;
};
template <>
struct reply_of<bus::move_req> {
  using type = bus::move_rep;
};
template <>
struct reply_of<bus::node_diagnostic_req> {
  using type = bus::grant_rep;
};

/// The stored result `result` of operation `id`, as the reply its kind gives.
template <class T>
api_reply replay_of(const std::string& id, const std::string& result) {
  using rep_t = typename reply_of<T>::type;
  auto r = bus::decode_body_bytes<rep_t>(result);
  if (!r)
    return api_reply{err(errc::internal,
                         "operation " + id + ": stored result unreadable: " + r.error().message)};
  return api_reply{std::move(*r)};
}

} // namespace

/// Authorizes a request against the permission table (auth/permissions.cpp),
/// the one place roles are enforced: nullopt when `who` may make it.
template <class T>
std::optional<bus::error_info> authorize(api_state& st, const identity* who, const T& body) {
  const permission* p = permission_of(T::op);
  if (!p)
    return err(errc::internal, fmt::format("no permission row for op {}", T::op));
  if (p->anonymous)
    return std::nullopt;
  if (!who)
    return err(errc::unauthenticated, "missing token (cq login, or the token file)");
  auto r = p->by_role[static_cast<std::size_t>(who->who)];
  if (r == reach::none)
    return err(errc::permission_denied,
               fmt::format("role {} may not call {}", to_string(who->who), T::op));
  if (r == reach::own && !st.ctx->cfg.defects.ignore_ownership) {
    if constexpr (requires { body.job; }) {
      auto id = resolve_job(st, body.job);
      if (auto* e = std::get_if<bus::error_info>(&id))
        return *e;
      auto& owner = st.jobs[std::get<std::string>(id)].owner;
      if (owner != who->name)
        return err(errc::permission_denied,
                   fmt::format("job {} belongs to {}: role {} may {} only its own jobs",
                               std::get<std::string>(id), owner, to_string(who->who), T::op));
    } else {
      return err(errc::internal, fmt::format("op {} names no job to own", T::op));
    }
  }
  return std::nullopt;
}

caf::result<api_reply> handle(api_ptr self, const identity* who, api_request& req) {
  auto now = now_ms(self, *self->state.ctx);
  return std::visit(
      [&](auto& body) -> caf::result<api_reply> {
        using T = std::decay_t<decltype(body)>;
        auto& st = self->state;
        observe::request(*st.ctx, T::op);
        const permission* p = permission_of(T::op);
        bool mutating = p && p->mutating;
        if (mutating)
          req.args = args_digest(body);
        if (auto e = authorize(st, who, body))
          return mutating ? refuse_audited(self, who, req, T::op, target_of(body), *e)
                          : api_reply{*e};
        // A node's token is good only from the CURVE key its daemon joined
        // with: a token copied to another machine is refused, and audited.
        if (who && who->who == role::node)
          if (auto n = st.nodes.find(who->name); n != st.nodes.end() &&
                                                 !n->second.row.curve_key.empty() &&
                                                 n->second.row.curve_key != req.key) {
            // Counted as a failed authentication: a daemon retrying with a
            // copied token is soon refused unchecked (and unaudited).
            st.auth_limits[limit_key(req)].fail(now);
            return refuse_audited(
                self, who, req, T::op, who->name,
                err(errc::permission_denied,
                    fmt::format("node {} joined with another CURVE key: its token is refused "
                                "from this connection",
                                who->name)));
          }
        if constexpr (has_operation_id<T>) {
          if (body.operation_id) {
            auto& id = *body.operation_id;
            if (!is_uuid(id))
              return refuse_audited(
                  self, who, req, T::op, target_of(body),
                  err(errc::invalid_argument, "operation_id: must be a UUID (8-4-4-4-12 hex)"));
            if (auto o = st.operations.find(id); o != st.operations.end()) {
              if (o->second.kind != T::op || o->second.digest != req.args)
                return refuse_audited(
                    self, who, req, T::op, target_of(body),
                    err(errc::operation_conflict,
                        fmt::format("operation_id: {} was used for another {} call{}", id,
                                    o->second.kind,
                                    o->second.kind == T::op ? " (other arguments)" : "")));
              // A replay applies nothing; its audit row says it was one. Its
              // reply is read from the store, unless memory holds it (op_record).
              auto rp = self->make_response_promise<api_reply>();
              auto audit =
                  audit_of(now, *who, req, std::string(T::op), target_of(body), "replayed");
              if (!o->second.result.empty()) {
                commit_then(self, {std::move(audit)}, rp,
                            [rep = replay_of<T>(id, o->second.result)] { return rep; });
                return rp;
              }
              self->request(st.ctx->store, caf::infinite, replay_atom::value, id)
                  .then(
                      [=](std::string& result) mutable {
                        commit_then(self, {std::move(audit)}, rp,
                                    [rep = replay_of<T>(id, result)] { return rep; });
                      },
                      [=](caf::error& e) mutable {
                        // Its window passed meanwhile: a retry runs it anew.
                        rp.deliver(api_reply{err(
                            errc::unavailable,
                            fmt::format("operation {}: its stored result could not be read ({}); "
                                        "retry",
                                        id, to_string(e)))});
                      });
              return rp;
            }
            if (st.ops_in_flight.count(id))
              return api_reply{
                  err(errc::unavailable, fmt::format("operation {} is still being carried out; "
                                                     "retry for its result",
                                                     id))};
          }
        }
        if (!mutating || std::is_same_v<T, bus::submit_req> ||
            std::is_same_v<T, bus::node_join_req>) {
          // Joins with a wrong code count as failed authentications.
          bool anonymous = p && p->anonymous;
          if (anonymous)
            if (auto l = st.auth_limits.find(limit_key(req));
                l != st.auth_limits.end() && !l->second.allow(now))
              return api_reply{err(errc::unauthenticated,
                                   fmt::format("too many failed authentications from this peer; "
                                               "retry in {} s",
                                               l->second.wait_s(now)))};
          auto r = on(self, who, req, now, body);
          // A refusal the handler gave at once is audited here.
          if (mutating)
            if (auto* e = error_of(r)) {
              if (anonymous && e->code == errc::unauthenticated)
                st.auth_limits[limit_key(req)].fail(now);
              return refuse_audited(self, who, req, T::op, target_of(body), *e);
            }
          return r;
        }
        // The other mutating calls run through exec_atom so that their outcome,
        // which may come later (a node's answer, a job actor's commit), is seen
        // here: a refusal is audited, an operation's result kept.
        std::string op_id;
        if constexpr (has_operation_id<T>)
          op_id = body.operation_id.value_or("");
        if (!op_id.empty())
          st.ops_in_flight.insert(op_id);
        auto rp = self->make_response_promise<api_reply>();
        auto target = target_of(body);
        auto ident = who ? std::optional<identity>(*who) : std::nullopt;
        self->request(caf::actor_cast<api_actor>(self), caf::infinite, exec_atom::value, req)
            .then(
                [=](api_reply& r) mutable {
                  auto& st = self->state;
                  if (auto* e = std::get_if<bus::error_info>(&r.body)) {
                    st.ops_in_flight.erase(op_id);
                    audit_refusal(self, ident ? &*ident : nullptr, req, T::op, target, *e, rp);
                    return;
                  }
                  if (!op_id.empty())
                    return keep_operation(self, op_id, std::string(T::op), req.args, std::move(r),
                                          rp);
                  rp.deliver(std::move(r));
                },
                [=](caf::error& e) mutable {
                  self->state.ops_in_flight.erase(op_id);
                  rp.deliver(api_reply{err(errc::internal, "api: " + to_string(e))});
                });
        return rp;
      },
      req.body);
}

/// The api is linked to every job and node actor it spawns: it ends with them
/// (crash-only, ADR 0003), and they with it.
api_actor::behavior_type api_behavior(api_ptr self, context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  return {
      [=](const api_request& req) -> caf::result<api_reply> {
        auto& st = self->state;
        auto& mreq = const_cast<api_request&>(req); // ours alone: the bridge sent it once
        const identity* who = nullptr;
        if (req.token.empty())
          return handle(self, who, mreq);
        // Failed logins are limited per peer (its address; on loopback its
        // connection): past the burst, that peer's every token is refused
        // unchecked until its allowance refills, so guessing runs at the
        // refill rate; other peers are not slowed (nothing here waits).
        auto now = now_ms(self, *st.ctx);
        auto key = limit_key(req);
        auto limited = st.auth_limits.find(key);
        if (limited != st.auth_limits.end() && !limited->second.allow(now))
          return api_reply{err(errc::unauthenticated,
                               fmt::format("too many failed authentications from this peer; "
                                           "retry in {} s",
                                           limited->second.wait_s(now)))};
        if (auto i = st.tokens.find(hash_secret(req.token)); i != st.tokens.end())
          who = &i->second;
        if (who)
          return handle(self, who, mreq);
        if (st.auth_limits.size() >= auth_limit_peers)
          std::erase_if(st.auth_limits, [&](auto& kv) { return kv.second.full(now); });
        st.auth_limits[key].fail(now);
        bus::error_info e = err(errc::unauthenticated, "unknown or revoked token");
        // Audited like any refusal (bounded by the limit above).
        return std::visit(
            [&](auto& body) -> caf::result<api_reply> {
              using T = std::decay_t<decltype(body)>;
              if (auto* p = permission_of(T::op); p && p->mutating)
                return refuse_audited(self, nullptr, req, T::op, target_of(body), e);
              return api_reply{e};
            },
            mreq.body);
      },
      [=](exec_atom, const api_request& req) -> caf::result<api_reply> {
        auto& st = self->state;
        const identity* who = nullptr;
        if (auto i = st.tokens.find(hash_secret(req.token)); i != st.tokens.end())
          who = &i->second;
        if (!who)
          return api_reply{err(errc::unauthenticated, "token revoked meanwhile")};
        auto now = now_ms(self, *st.ctx);
        return std::visit(
            [&](auto& body) -> caf::result<api_reply> { return on(self, who, req, now, body); },
            const_cast<bus::coordinator_request&>(req.body));
      },
      [=](job_atom, const job_row& row) {
        auto& st = self->state;
        mark_board(self);
        auto& j = row.info;
        auto& cur = st.jobs[j.id];
        // The job actor holds no argv (the store does) and the serving order is
        // ours: keep both from the read model.
        auto argv = std::move(cur.argv);
        auto priority = cur.priority;
        auto before = cur.state;
        observe::transition(*st.ctx, before, j);
        cur = j;
        cur.argv = std::move(argv);
        cur.priority = priority;
        auto lvl = level_index(priority);
        count_queued(st, before, j.state, lvl, lvl);
        if (!is_terminal(j.state))
          return;
        note_finished(st, j.id);
        schedule_history(self, j.finished_ms); // the oldest, when no pass is armed
        place_in_order(st, j.id, lvl, 0, 0, true);
        st.live.erase(j.id);
        // A job that ended holding an active grant (it failed before it ever
        // heard of the grant, at recovery): the grant ends with it.
        for (auto& [node, g] : st.grants)
          if (g.job == j.id && g.state == "active") {
            auto end = g;
            end.state = "revoked";
            end.ended_ms = now_ms(self, *st.ctx);
            self->request(st.ctx->store, caf::infinite, commit_atom::value,
                          std::make_shared<const change_batch>(change_batch{end}))
                .then([=](const commit_result& r) {
                  if (r.error.empty())
                    self->send(caf::actor_cast<api_actor>(self), grant_atom::value, end);
                });
          }
        // Dependents learn the outcome (a failure cascades through them).
        if (auto d = st.dependents.find(j.id); d != st.dependents.end()) {
          for (auto& dep : d->second)
            if (auto a = st.live.find(dep); a != st.live.end())
              self->send(a->second, dep_atom::value, j.id, j.state);
            else if (j.state == job_state::succeeded)
              enqueue_parked(self, dep); // when it was the last one pending
            else
              actor_of(self, dep); // fails it (dependency_failed)
          st.dependents.erase(d);
        }
        note_ended(self, j.id); // last: it may forget the job (history.cpp)
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
            observe::allocation(*self->state.ctx, x.state, a);
            x = a;
            return;
          }
        observe::allocation(*self->state.ctx, std::nullopt, a);
        v.push_back(a);
      },
      [=](info_atom, const bus::node_info& n) {
        if (auto i = self->state.nodes.find(n.name); i != self->state.nodes.end())
          i->second.info = n;
        mark_board(self);
      },
      [=](expire_atom) { expire_operations(self); },
      [=](expire_atom, bool) { expire_history(self); },
      [=](board_atom) { write_board(self); },
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
      // From the scheduler: ask job `id` to yield at its lease boundary.
      [=](yield_atom, const std::string& id, const std::string& why) {
        if (auto a = self->state.live.find(id); a != self->state.live.end())
          self->request(a->second, caf::infinite, yield_atom::value, why, call_stamp{})
              .then([=](const api_reply& r) {
                if (auto* e = std::get_if<bus::error_info>(&r.body))
                  spdlog::info("job {} not asked to yield: {}", id, e->message);
              });
      },
      // From the scheduler: a queued job without an actor is placed; its
      // actor is spawned to take the placement (parked.cpp).
      [=](place_atom, const std::string& id, const std::string& node, node_actor handle,
          const bus::string_list& lanes, std::uint64_t floor) {
        if (auto a = actor_of(self, id))
          self->send(a, place_atom::value, node, handle, lanes, floor);
        else // it ended meanwhile: the scheduler frees what it set aside
          self->send(self->state.ctx->scheduler, release_atom::value, id);
      },
      // From the scheduler: an event of a queued job without an actor.
      [=](event_atom, const std::string& id, const std::string& kind, const std::string& detail) {
        if (!is_queued(self->state, id))
          return;
        if (auto a = actor_of(self, id))
          self->request(a, caf::infinite, event_atom::value, kind, detail)
              .then([](bool) {},
                    [=](caf::error& e) {
                      spdlog::warn("job {}: {} event not stored: {}", id, kind, to_string(e));
                    });
      },
      // A job committed events: readers waiting for them hear now.
      [=](event_atom, const std::string& job, std::uint64_t seq) {
        note_event(self->state, job, seq);
        wake_readers(self, job);
      },
      // A job actor committed its grant's end (consumed by its start, or
      // revoked by its cancel): the grant's actor ends.
      [=](grant_atom, const bus::grant_info& g) {
        auto& st = self->state;
        st.grants[g.node] = g;
        if (auto a = st.grant_actors.find(g.node); a != st.grant_actors.end()) {
          self->send(a->second, grant_atom::value, g);
          st.grant_actors.erase(a);
        }
      },
      [=](hold_atom, const std::string& node, const bus::hold_info& h, bool held) {
        record_hold(self, node, h, held);
      },
      // INTERNAL: waiter `id`'s wait_ms ran out.
      [=](timeout_atom, std::uint64_t id) { poll_waiter(self, id, true); },
      [=](recover_atom, std::shared_ptr<snapshot> snap) {
        recover(self, std::move(snap));
        mark_board(self);
      },
  };
}

std::variant<std::string, bus::error_info> resolve_job(api_state& st, const std::string& ref) {
  if (st.jobs.count(ref))
    return ref;
  if (ref.empty() || ref.size() > 256)
    return err(errc::not_found, fmt::format("job: no job '{}'", ref.substr(0, 64)));
  std::vector<std::string> by_prefix, by_name, live_named;
  if (ref.size() >= min_id_prefix) {
    auto& ids = st.ids.sorted();
    for (auto it = std::lower_bound(ids.begin(), ids.end(), ref, by_id{});
         it != ids.end() && (*it)->starts_with(ref); ++it)
      by_prefix.push_back(**it);
  }
  st.names.each_named(st.jobs, ref, [&](const job_node& n) {
    by_name.push_back(n.first);
    if (!is_terminal(n.second.state))
      live_named.push_back(n.first);
  });
  if (by_prefix.size() == 1 && by_name.empty())
    return by_prefix.front();
  if (by_prefix.empty() && by_name.size() == 1)
    return by_name.front();
  if (by_prefix.empty() && live_named.size() == 1)
    return live_named.front();
  // A name none of whose jobs is live (a job run again, by cq retry or a
  // daily submit): the newest of them.
  if (by_prefix.empty() && live_named.empty() && !by_name.empty())
    return *std::max_element(by_name.begin(), by_name.end(), [&](const auto& x, const auto& y) {
      return st.jobs[x].seq < st.jobs[y].seq;
    });
  auto candidates = by_prefix;
  for (const auto& id : by_name)
    if (std::find(candidates.begin(), candidates.end(), id) == candidates.end())
      candidates.push_back(id);
  if (candidates.empty()) {
    if (ref.size() < min_id_prefix)
      return err(errc::not_found,
                 fmt::format("job: '{}' is too short for an id (give at least {} characters) and "
                             "no job is named so",
                             ref, min_id_prefix));
    return err(errc::not_found,
               fmt::format("job: no job '{}'{}", ref.substr(0, 64), history_hint(*st.ctx)));
  }
  // Oldest first, as submitted.
  std::sort(candidates.begin(), candidates.end(),
            [&](const auto& x, const auto& y) { return st.jobs[x].seq < st.jobs[y].seq; });
  constexpr std::size_t shown = 6;
  auto cut = std::max<std::size_t>(8, std::min<std::size_t>(ref.size() + 4, 64));
  std::string list;
  for (std::size_t i = 0; i < candidates.size() && i < shown; ++i) {
    const auto& j = st.jobs[candidates[i]];
    auto shown_id = j.id.substr(0, cut);
    if (shown_id.size() < j.id.size() && shown_id.ends_with('-'))
      shown_id.pop_back(); // 78798f4d, not 78798f4d-
    list += fmt::format("{}{} ({}{})", i ? ", " : "", shown_id, j.name.empty() ? "" : j.name + ", ",
                        j.state);
  }
  if (candidates.size() > shown)
    list += fmt::format(" and {} more", candidates.size() - shown);
  return err(errc::invalid_argument,
             fmt::format("job: '{}' matches {} jobs: {}; give more of the id", ref.substr(0, 64),
                         candidates.size(), list));
}

} // namespace api_impl

using namespace api_impl;

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

std::string add_token(store& db, const std::string& name, const std::string& role_name,
                      const std::string& token, std::int64_t now_ms) {
  if (!valid_name(name))
    throw std::runtime_error("name: use 1-64 letters, digits, '.', '-' or '_'");
  auto r = parse_role(role_name);
  if (!r || *r == role::node)
    throw std::runtime_error("role: must be owner, operator or submitter (nodes join with cq "
                             "node invite)");
  auto snap = db.load();
  for (auto& t : snap.tokens)
    if (t.identity == name && t.revoked_ms == 0)
      throw std::runtime_error(fmt::format(
          "name: {} already has a valid {} token (cq token revoke {} first)", name, t.role, name));
  for (auto& n : snap.nodes)
    if (n.name == name)
      throw std::runtime_error(fmt::format("name: {} is a node's identity", name));
  if (auto e = db.apply({token_row{hash_secret(token), name, std::string(to_string(*r)), now_ms, 0},
                         audit_row{now_ms, "cq-coordinator", "host", "token_add", name,
                                   std::string(to_string(*r)), ""}}))
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
  ctx->store = spawn_store(sys, db, opts.detached_store, ctx->fatal, ctx->metrics);
  // Crash-only (ADR 0003): once an actor calls fatal, the store commits
  // nothing more (store_actor.cpp, invariant 5). Told directly, not through a
  // wrapper: a commit that actor sends later reaches the store after it.
  ctx->fatal = [outer = ctx->fatal, store = ctx->store](const std::string& why) {
    caf::anon_send(store, stop_atom::value, why);
    if (outer)
      outer(why);
  };
  if (opts.wrap_store)
    ctx->store = opts.wrap_store(sys, ctx->store);
  ctx->scheduler = spawn_scheduler(sys, ctx);
  ctx->api = sys.spawn(api_behavior, ctx);
  caf::anon_send(ctx->api, recover_atom::value, std::move(snap));
  return ctx;
}

} // namespace cq::coord
