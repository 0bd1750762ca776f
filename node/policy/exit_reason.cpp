#include "node/policy/exit_reason.hpp"

namespace cq::node {

std::string exit_reason(const exit_facts& f) {
  std::string r;
  if (f.oom)
    r = "oom";
  else if (f.exit_code && *f.exit_code == 6 && f.yield_ordered)
    r = "checkpointed";
  else if (f.timed_out)
    r = "timeout";
  else if (f.stop_requested)
    r = "cancelled";
  if ((r.empty() || r == "cancelled") && !f.gpu_stop.empty())
    r = f.gpu_stop;
  if (r.empty() && f.lost)
    r = "lost";
  return r;
}

} // namespace cq::node
