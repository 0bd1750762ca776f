// Shared helpers of the coordinator's actors (each actor has its own file).
#include "internal.hpp"

#include <caf/all.hpp>

namespace cq::coord {

std::int64_t now_ms(caf::local_actor* self, const actors::context& ctx) {
  auto d = self->clock().now() - ctx.steady;
  return ctx.epoch_ms + std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::uint64_t effective_ram(const actors::context& ctx, const bus::job_info& job) {
  if (job.effective_ram_bytes)
    return job.effective_ram_bytes;
  return job.ram_bytes ? *job.ram_bytes : ctx.cfg.default_ram_bytes;
}

} // namespace cq::coord
