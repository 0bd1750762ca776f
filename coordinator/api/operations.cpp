// Idempotent operations (SPEC section 9): what the api keeps of each id
// carried out (op_record), and their expiry after the operations window.
#include "api/state.hpp"

namespace cq::coord::api_impl {

/// Keeps the record of operation `op_id` (of `kind`, its arguments' digest
/// `digest`), carried out with reply `r`, then delivers `r`. Its handler
/// stored the reply with its effect; a success that changed nothing (a hold
/// of a held job) stored none, so the store is asked: only a reply it does
/// not hold is kept in memory. Until then a retry hears "still being carried
/// out".
void keep_operation(api_ptr self, std::string op_id, std::string kind, std::string digest,
                    api_reply r, caf::typed_response_promise<api_reply> rp) {
  auto keep = [=](std::string result) mutable {
    auto& st = self->state;
    st.ops_in_flight.erase(op_id);
    st.operations[op_id] = op_record{kind, digest, std::move(result), now_ms(self, *st.ctx)};
    schedule_expiry(self);
    rp.deliver(std::move(r));
  };
  self->request(self->state.ctx->store, caf::infinite, replay_atom::value, op_id)
      .then([=](std::string&) mutable { keep({}); },
            [=](caf::error&) mutable {
              keep(std::visit(
                  [](auto& rep) {
                    if constexpr (std::is_same_v<std::decay_t<decltype(rep)>, bus::error_info>)
                      return std::string(); // refusals never get here
                    else
                      return bus::encode_body(rep);
                  },
                  r.body));
            });
}

namespace {
/// Expiries are grouped: one pass per 24th of the window (at least 1 s).
std::int64_t expiry_slack_ms(const context& ctx) {
  return std::max<std::int64_t>(ctx.cfg.operation_window_ms / 24, 1000);
}
} // namespace

void schedule_expiry(api_ptr self) {
  auto& st = self->state;
  auto window = st.ctx->cfg.operation_window_ms;
  if (st.expiry_scheduled || st.operations.empty() || window <= 0)
    return;
  auto oldest = std::min_element(st.operations.begin(), st.operations.end(), [](auto& a, auto& b) {
                  return a.second.at_ms < b.second.at_ms;
                })->second.at_ms;
  auto due = oldest + window + expiry_slack_ms(*st.ctx) - now_ms(self, *st.ctx);
  st.expiry_scheduled = true;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(due, 1)),
                     expire_atom::value);
}

void expire_operations(api_ptr self) {
  auto& st = self->state;
  st.expiry_scheduled = false;
  auto before = now_ms(self, *st.ctx) - st.ctx->cfg.operation_window_ms;
  bool any = std::any_of(st.operations.begin(), st.operations.end(),
                         [&](auto& o) { return o.second.at_ms < before; });
  if (!any) {
    schedule_expiry(self);
    return;
  }
  st.expiry_scheduled = true; // until the deletion is durable
  commit_expiry(
      self, {operation_expiry{before}}, "expired operation ids",
      [=] {
        auto& st = self->state;
        std::erase_if(st.operations, [&](auto& o) { return o.second.at_ms < before; });
        st.expiry_scheduled = false;
        schedule_expiry(self);
      },
      [=] { // a slack later
        self->delayed_send(self, std::chrono::milliseconds(expiry_slack_ms(*self->state.ctx)),
                           expire_atom::value);
      });
}

} // namespace cq::coord::api_impl
