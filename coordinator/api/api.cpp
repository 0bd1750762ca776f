// The api actor: authenticates each request and dispatches it by type to
// its handler (jobs.cpp, nodes.cpp); it keeps the read model that listings
// are served from and hears of every committed change from the job and node
// actors. Recovery is in recovery.cpp.
#include "api/state.hpp"

namespace cq::coord {

namespace api_impl {

caf::result<api_reply> handle(api_ptr self, const identity* who, const api_request& req) {
  auto now = now_ms(self, *self->state.ctx);
  return std::visit(
      [&](auto& body) -> caf::result<api_reply> { return on(self, who, req, now, body); },
      const_cast<bus::coordinator_request&>(req.body));
}

/// The api is linked to every job and node actor it spawns: it ends with them
/// (crash-only, ADR 0003), and they with it.
api_actor::behavior_type api_behavior(api_ptr self, context_ptr ctx) {
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
        mark_board(self);
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
        mark_board(self);
      },
      [=](board_atom) {
        auto& st = self->state;
        st.board_scheduled = false;
        if (st.ctx->write_board)
          st.ctx->write_board(board_json(self));
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
      // From the scheduler: ask job `id` to yield at its lease boundary.
      [=](yield_atom, const std::string& id, const std::string& why) {
        if (auto a = self->state.live.find(id); a != self->state.live.end())
          self->request(a->second, caf::infinite, yield_atom::value, why)
              .then([=](const api_reply& r) {
                if (auto* e = std::get_if<bus::error_info>(&r.body))
                  spdlog::info("job {} not asked to yield: {}", id, e->message);
              });
      },
      // A job committed events: readers waiting for them hear now.
      [=](event_atom, const std::string& job, std::uint64_t seq) {
        auto& last = self->state.last_event[job];
        last = std::max(last, seq);
        wake_readers(self, job);
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
  ctx->api = sys.spawn(api_behavior, ctx);
  caf::anon_send(ctx->api, recover_atom::value, std::move(snap));
  return ctx;
}

} // namespace cq::coord
