// One active one-job diagnostic grant (SPEC section 6; the compute-queue
// seed's "one-job diagnostic on a disabled node"). The grant is durable in
// the grants table; its actor carries it to the scheduler, which lets the
// disabled node take that job alone, and ends once the job's actor committed
// the grant's end: consumed in the same transaction as the job's placement
// (only once its RAM constraints fit), or revoked with the job's cancel.
#include "internal.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace cq::coord {

namespace {

struct grant_state {
  actors::context_ptr ctx;
  bus::grant_info grant;
  static inline const char* name = "cq.grant";
};

actors::grant_actor::behavior_type
grant_behavior(actors::grant_actor::stateful_pointer<grant_state> self, actors::context_ptr ctx,
               bus::grant_info g) {
  self->state.ctx = ctx;
  self->state.grant = g;
  self->send(ctx->scheduler, actors::grant_atom::value, g.node, g.job, true);
  return {
      [=](actors::grant_atom, const bus::grant_info& end) {
        auto& st = self->state;
        spdlog::info("diagnostic grant of job {} on node {}: {}", end.job, end.node, end.state);
        self->send(st.ctx->scheduler, actors::grant_atom::value, st.grant.node, st.grant.job,
                   false);
        self->quit();
      },
  };
}

} // namespace

actors::grant_actor spawn_grant(caf::actor_system& sys, actors::context_ptr ctx,
                                bus::grant_info grant) {
  return sys.spawn(grant_behavior, std::move(ctx), std::move(grant));
}

} // namespace cq::coord
