#include "node/policy/exit_reason.hpp"

namespace cq::node {

bus::reason exit_reason(const exit_facts& f) {
  using bus::reason;
  auto r = reason::none;
  if (f.oom)
    r = reason::oom;
  else if (f.exit_code && *f.exit_code == 6 && f.yield_ordered)
    r = reason::checkpointed;
  else if (f.timed_out)
    r = reason::timeout;
  else if (f.stop_requested)
    r = reason::cancelled;
  if ((r == reason::none || r == reason::cancelled) && f.gpu_stop != reason::none)
    r = f.gpu_stop;
  if (r == reason::none && f.lost)
    r = reason::lost;
  return r;
}

} // namespace cq::node
