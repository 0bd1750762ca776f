// The api's node handlers: holds, faults, invites, joins, approvals, listings,
// heartbeats and reports (the node protocol).
#include "api/state.hpp"
#include "cq/bus/curve.hpp"
#include "policy/transitions.hpp"

namespace cq::coord::api_impl {

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::release_req& body) {
  auto& st = self->state;
  if (body.hold.empty() || body.hold.size() > 128)
    return api_reply{err(errc::invalid_argument, "hold: give the exact hold id")};
  std::string node;
  for (auto& [name, n] : st.nodes)
    for (auto& h : n.info.holds)
      if (h.id == body.hold)
        node = name;
  if (node.empty())
    return api_reply{
        err(errc::not_found, fmt::format("hold: no current hold '{}' (released already, or a "
                                         "stale id: refresh with cq node ls)",
                                         body.hold.substr(0, 64)))};
  return order_then_audit(self, *who, req, st.nodes[node].handle, bus::release_order{body.hold},
                          "release", node + "/" + body.hold);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_clear_fault_req& body) {
  auto& st = self->state;
  if (body.reason.empty() || body.reason.size() > 1000 || has_nul(body.reason))
    return api_reply{
        err(errc::invalid_argument, "reason: say why the fault is cleared (1-1000 bytes)")};
  auto n = st.nodes.find(body.name);
  if (n == st.nodes.end())
    return api_reply{
        err(errc::not_found, fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
  if (!n->second.info.fault)
    return api_reply{
        err(errc::invalid_state, fmt::format("node {} has no latched fault", body.name))};
  return order_then_audit(self, *who, req, n->second.handle,
                          bus::clear_fault_order{body.reason, who->name}, "node_clear_fault",
                          body.name);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_invite_req& body) {
  auto& st = self->state;
  if (!valid_name(body.name))
    return api_reply{
        err(errc::invalid_argument, "name: use 1-64 letters, digits, '.', '-' or '_'")};
  bool replace = body.replace.value_or(false);
  auto existing = st.nodes.find(body.name);
  // SPEC section 10: one identity is one daemon. A second invite for a
  // name that joined would let a second daemon in behind it.
  if (existing != st.nodes.end() && !replace)
    return api_reply{
        err(errc::already_exists,
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
  batch.push_back(audit_of(now, *who, req, "node_invite", body.name, replace ? "replaced" : "ok"));
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
    auto& cfg = self->state.ctx->cfg;
    return api_reply{bus::node_invite_rep{
        bus::format_invite({code, cfg.server_key, cfg.invite_endpoint}), inv.expires_ms}};
  });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_join_req& body) {
  auto& st = self->state;
  if (!valid_name(body.name))
    return api_reply{err(errc::invalid_argument, "name: not a valid node name")};
  // The whole code (cq node invite prints one that carries the endpoint and
  // the server key too) or its secret alone.
  auto parsed = bus::parse_invite(body.code);
  auto h = hash_secret(parsed ? parsed->secret : body.code);
  auto i = st.invites.find(h);
  if (i == st.invites.end() || i->second.used || i->second.node != body.name ||
      i->second.expires_ms < now)
    return api_reply{err(errc::unauthenticated,
                         "invite code is unknown, already used, expired or for another node")};
  auto inv = i->second;
  inv.used = true;
  auto token = st.ctx->new_token();
  token_row tok{hash_secret(token), body.name, "node", now, 0};
  // A node that joins again (after an invite with --replace) starts
  // pending, and every other token of its name is revoked: the joiner
  // never inherits an approval or shares the identity.
  node_row nrow{body.name, "", now};
  policy::set_state(nrow, "pending");
  nrow.curve_key = req.key;
  change_batch batch{inv, tok};
  std::vector<std::string> revoked;
  if (auto n = st.nodes.find(body.name); n != st.nodes.end()) {
    nrow = n->second.row;
    policy::set_state(nrow, "pending");
    nrow.curve_key = req.key;
    for (auto& [hash, id] : st.tokens)
      if (id.who == role::node && id.name == body.name) {
        revoked.push_back(hash);
        batch.push_back(token_row{hash, id.name, "node", id.created_ms, now});
      }
  }
  batch.push_back(nrow);
  batch.push_back(audit_row{now, body.name, "node", "node_join", body.name, "ok", req.args});
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
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_approve_req& body) {
  auto& st = self->state;
  auto n = st.nodes.find(body.name);
  if (n == st.nodes.end())
    return api_reply{
        err(errc::not_found, fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
  auto row = n->second.row;
  policy::set_state(row, "approved");
  auto view = node_view(self, n->second);
  view.state = row.state;
  change_batch batch{row, audit_of(now, *who, req, "node_approve", row.name, "ok")};
  add_operation(batch, now, req, "node_approve", bus::node_rep{view});
  auto rp = self->make_response_promise<api_reply>();
  commit_then(self, std::move(batch), rp, [=] {
    auto& n = self->state.nodes[row.name];
    n.row = row;
    self->send(n.handle, approve_atom::value, true);
    return api_reply{bus::node_rep{view}};
  });
  return rp;
}

/// Enables or disables a node (SPEC section 6: Owner, Operator). A disabled
/// node finishes what runs and gets no new work; the node actor tells the
/// scheduler.
caf::result<api_reply> set_enabled(api_ptr self, const identity& who, const api_request& req,
                                   std::int64_t now, const std::string& name, bool enabled,
                                   std::optional<std::string> reason) {
  auto& st = self->state;
  std::string_view op = enabled ? "node_enable" : "node_disable";
  auto n = st.nodes.find(name);
  if (n == st.nodes.end())
    return api_reply{
        err(errc::not_found, fmt::format("name: no node named '{}'", name.substr(0, 64)))};
  if (reason && (reason->size() > 1000 || has_nul(*reason)))
    return api_reply{err(errc::invalid_argument, "reason: at most 1000 bytes, no NUL")};
  auto row = n->second.row;
  // Disabled again without a reason: the reason given before stands (a
  // second `cq node disable` erased "by opal: disk check").
  if (enabled || row.enabled || reason)
    row.disabled_reason =
        enabled ? std::string()
                : fmt::format("by {}{}{}", who.name, reason ? ": " : "", reason.value_or(""));
  row.enabled = enabled;
  auto view = node_view(self, n->second);
  view.enabled = row.enabled;
  view.disabled_reason = row.disabled_reason;
  change_batch batch{
      row, audit_of(now, who, req, std::string(op), name, enabled ? "enabled" : "disabled")};
  add_operation(batch, now, req, op, bus::node_rep{view});
  auto rp = self->make_response_promise<api_reply>();
  commit_then(self, std::move(batch), rp, [=] {
    auto& n = self->state.nodes[row.name];
    n.row = row;
    n.info.enabled = row.enabled;
    n.info.disabled_reason = row.disabled_reason;
    self->send(n.handle, enable_atom::value, row.enabled, row.disabled_reason);
    mark_board(self);
    return api_reply{bus::node_rep{view}};
  });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_enable_req& body) {
  return set_enabled(self, *who, req, now, body.name, true, std::nullopt);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_disable_req& body) {
  return set_enabled(self, *who, req, now, body.name, false, body.reason);
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_ls_req& body) {
  auto& st = self->state;
  bus::node_ls_rep out;
  for (auto& [name, n] : st.nodes)
    out.nodes.push_back(node_view(self, n));
  return api_reply{std::move(out)};
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::heartbeat_req& body) {
  auto& st = self->state;
  // Bounded so that a node's view (node ls, the board) stays small.
  if (body.allocations.size() > bus::limits::argv_items)
    return api_reply{err(errc::invalid_argument, "allocations: too many")};
  if (body.lanes && body.lanes->size() > 64)
    return api_reply{err(errc::invalid_argument, "lanes: at most 64")};
  // A lane is known by its name (start orders, holds, a pass's lane sets):
  // a name twice would make two lanes one. A node's own configuration
  // refuses that; a frame that does is refused here, changing nothing.
  if (body.lanes)
    for (std::size_t i = 0; i < body.lanes->size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if ((*body.lanes)[i].name == (*body.lanes)[j].name)
          return api_reply{err(errc::invalid_argument,
                               fmt::format("lanes: lane {} has the name of lane {}", i, j))};
  if (body.holds && body.holds->size() > 256)
    return api_reply{err(errc::invalid_argument, "holds: at most 256")};
  if (body.outside_gpu_processes && body.outside_gpu_processes->size() > 256)
    return api_reply{err(errc::invalid_argument, "outside_gpu_processes: at most 256")};
  if (body.busy_probes && body.busy_probes->size() > 64)
    return api_reply{err(errc::invalid_argument, "busy_probes: at most 64")};
  if (body.run_as && body.run_as->size() > 1000)
    return api_reply{err(errc::invalid_argument, "run_as: at most 1000 identities")};
  auto n = st.nodes.find(who->name);
  if (n == st.nodes.end())
    return api_reply{err(errc::not_found, "node is not registered")};
  note_peer(st, n->second, req.peer);
  auto rp = self->make_response_promise();
  rp.delegate(n->second.handle, beat_atom::value, req.peer, body);
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::report_req& body) {
  auto& st = self->state;
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
  if (st.ctx->cfg.defects.refuse_late_exit_reports && body.kind == "exited") // cq-sim's not_idle
    if (auto j = st.jobs.find(body.job); j != st.jobs.end() && is_terminal(j->second.state))
      return api_reply{err(errc::unavailable, "allocation not known yet")};
  auto rp = self->make_response_promise();
  rp.delegate(n->second.handle, report_atom::value, req.peer, body);
  return rp;
}

} // namespace cq::coord::api_impl

namespace cq::coord::api_impl {

// The one-job diagnostic grant (the compute-queue seed): the node's rules
// here, the job's in its actor, which commits the grant with the job.
caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_diagnostic_req& body) {
  auto& st = self->state;
  auto n = st.nodes.find(body.name);
  if (n == st.nodes.end())
    return api_reply{
        err(errc::not_found, fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
  if (body.reason.empty() || body.reason.size() > 1000 || has_nul(body.reason))
    return api_reply{
        err(errc::invalid_argument, "reason: say why this one run is allowed (1-1000 bytes)")};
  auto r = resolve_job(st, body.job);
  if (auto* e = std::get_if<bus::error_info>(&r))
    return api_reply{*e};
  auto id = std::get<std::string>(r);
  auto& node = n->second;
  if (node.row.enabled)
    return api_reply{err(errc::invalid_state,
                         fmt::format("node {} is enabled: a diagnostic grant is for a disabled "
                                     "node (cq node disable {} first)",
                                     body.name, body.name))};
  if (auto g = st.grants.find(body.name); g != st.grants.end() && g->second.state == "active")
    return api_reply{
        err(errc::invalid_state, fmt::format("node {} already has an active grant, for job {}",
                                             body.name, g->second.job))};
  // Every allocation the node holds, committed ones included that its
  // heartbeat does not list yet (a rare Owner call: the scan is fine).
  std::size_t held = node_view(self, node).running;
  for (auto& [job, history] : st.allocs)
    for (auto& a : history)
      held += a.node == body.name && a.state != alloc_state::finished;
  if (held > 0)
    return api_reply{err(errc::invalid_state,
                         fmt::format("node {} has allocations: a diagnostic grant needs a node "
                                     "with none",
                                     body.name))};
  if (!st.allocs[id].empty())
    return api_reply{
        err(errc::invalid_state, fmt::format("job {} was placed before: a grant is for a job never "
                                             "started",
                                             id))};
  auto actor = actor_of(self, id);
  if (!actor)
    return api_reply{err(errc::invalid_state,
                         fmt::format("job {} has already ended ({})", id, st.jobs[id].state))};
  bus::grant_info g{body.name, id, body.reason, who->name, now, "active", 0};
  auto rp = self->make_response_promise<api_reply>();
  self->request(
          actor, caf::infinite, grant_atom::value, g,
          call_stamp{who->name, std::string(to_string(who->who)), req.args, operation_id_of(req)})
      .then(
          [=](api_reply& rep) mutable {
            if (auto* gr = std::get_if<bus::grant_rep>(&rep.body); gr && gr->grant) {
              auto& st = self->state;
              st.grants[gr->grant->node] = *gr->grant;
              auto a = spawn_grant(self->system(), st.ctx, *gr->grant);
              self->link_to(a);
              st.grant_actors[gr->grant->node] = a;
              spdlog::warn("node {}: diagnostic grant for job {} by {}: {}", gr->grant->node,
                           gr->grant->job, gr->grant->who, gr->grant->reason);
            }
            rp.deliver(std::move(rep));
          },
          [=](caf::error& e) mutable {
            rp.deliver(api_reply{err(errc::internal, "job unavailable: " + to_string(e))});
          });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::node_diagnostic_show_req& body) {
  auto& st = self->state;
  if (!st.nodes.count(body.name))
    return api_reply{
        err(errc::not_found, fmt::format("name: no node named '{}'", body.name.substr(0, 64)))};
  bus::grant_rep out;
  if (auto g = st.grants.find(body.name); g != st.grants.end())
    out.grant = g->second;
  return api_reply{out};
}

} // namespace cq::coord::api_impl
