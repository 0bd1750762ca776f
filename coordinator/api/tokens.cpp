// The api's identity handlers: tokens (Owner) and the audit log (Owner,
// Operator). Who may call them is the permission table's (api.cpp).
#include "api/state.hpp"

namespace cq::coord::api_impl {

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_add_req& body) {
  auto& st = self->state;
  if (!valid_name(body.name))
    return api_reply{
        err(errc::invalid_argument, "name: use 1-64 letters, digits, '.', '-' or '_'")};
  auto r = parse_role(body.role);
  if (!r || *r == role::node)
    return api_reply{err(errc::invalid_argument,
                         "role: must be owner, operator or submitter (nodes join with "
                         "cq node invite)")};
  for (auto& [hash, id] : st.tokens)
    if (id.name == body.name)
      return api_reply{err(errc::already_exists,
                           fmt::format("name: {} already has a valid {} token (revoke it first)",
                                       body.name, to_string(id.who)))};
  for (auto& [name, n] : st.nodes)
    if (name == body.name)
      return api_reply{
          err(errc::already_exists, fmt::format("name: {} is a node's identity", body.name))};
  auto token = st.ctx->new_token();
  token_row row{hash_secret(token), body.name, std::string(to_string(*r)), now, 0};
  auto rp = self->make_response_promise<api_reply>();
  commit_then(self, {row, audit_of(now, *who, req, "token_add", body.name, row.role)}, rp, [=] {
    self->state.tokens[row.hash] = identity{row.identity, *parse_role(row.role), row.created_ms};
    return api_reply{bus::token_add_rep{{row.identity, row.role, row.created_ms, 0}, token}};
  });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_ls_req& body) {
  bus::token_ls_rep out;
  for (auto& [hash, id] : self->state.tokens)
    out.tokens.push_back({id.name, std::string(to_string(id.who)), id.created_ms, 0});
  std::sort(out.tokens.begin(), out.tokens.end(),
            [](auto& a, auto& b) { return std::tie(a.name, a.role) < std::tie(b.name, b.role); });
  return api_reply{std::move(out)};
}

caf::result<api_reply> on(api_ptr, const identity* who, const api_request&, std::int64_t,
                          bus::whoami_req&) {
  return api_reply{bus::whoami_rep{who->name, std::string(to_string(who->who))}};
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::token_revoke_req& body) {
  auto& st = self->state;
  change_batch batch;
  std::vector<std::string> hashes;
  std::optional<bus::token_info> info;
  for (auto& [hash, id] : st.tokens)
    if (id.name == body.name) {
      if (id.who == role::node)
        return api_reply{err(errc::invalid_argument,
                             fmt::format("name: {} is a node; cq node invite {} --replace "
                                         "revokes a node's token",
                                         body.name, body.name))};
      hashes.push_back(hash);
      batch.push_back(token_row{hash, id.name, std::string(to_string(id.who)), id.created_ms, now});
      info = bus::token_info{id.name, std::string(to_string(id.who)), id.created_ms, now};
    }
  if (!info)
    return api_reply{err(errc::not_found,
                         fmt::format("name: no valid token named '{}'", body.name.substr(0, 64)))};
  if (who->name == body.name && info->role == "owner") {
    std::size_t owners = 0;
    for (auto& [hash, id] : st.tokens)
      owners += id.who == role::owner && id.name != body.name;
    if (owners == 0)
      return api_reply{err(errc::invalid_state,
                           "name: that is the last owner's token; add another owner first")};
  }
  batch.push_back(audit_of(now, *who, req, "token_revoke", body.name, "revoked"));
  auto rp = self->make_response_promise<api_reply>();
  commit_then(self, std::move(batch), rp, [=] {
    for (auto& h : hashes)
      self->state.tokens.erase(h);
    return api_reply{bus::token_ls_rep{{*info}}};
  });
  return rp;
}

caf::result<api_reply> on(api_ptr self, const identity* who, const api_request& req,
                          std::int64_t now, bus::audit_req& body) {
  auto limit = std::min(body.limit.value_or(bus::audit_page), bus::audit_page);
  if (limit == 0)
    return api_reply{err(errc::invalid_argument, "limit: at least 1")};
  for (auto* f : {&body.who, &body.op_name, &body.target})
    if (*f && ((*f)->size() > 256 || has_nul(**f)))
      return api_reply{err(errc::invalid_argument, "filter: at most 256 bytes, no NUL")};
  if (body.since_ms && *body.since_ms < 0)
    return api_reply{err(errc::invalid_argument, "since_ms: must not be negative")};
  audit_query q{body.cursor.value_or(0),
                body.since_ms.value_or(0),
                body.who,
                body.op_name,
                body.target,
                limit};
  auto rp = self->make_response_promise<api_reply>();
  self->request(self->state.ctx->store, caf::infinite, audit_atom::value, q)
      .then([=](bus::audit_rep& r) mutable { rp.deliver(api_reply{std::move(r)}); },
            [=](caf::error& e) mutable {
              rp.deliver(api_reply{err(errc::internal, "store: " + to_string(e))});
            });
  return rp;
}

} // namespace cq::coord::api_impl
