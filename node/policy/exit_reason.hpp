#pragma once
// The reason an allocation's exit is reported with (protocol.hpp, report_req):
// node policy, pure, from the facts its supervision gathered.
//
//  1. A cap hit (OOM kill or watchdog kill) is "oom", whatever the exit code.
//  2. Exit 6 is "checkpointed" only after a yield order reached this node; the
//     yield file proves nothing (the job can create it itself).
//  3. Otherwise the first stop made decides: the job's timeout ("timeout"), a
//     stop order ("cancelled"), and a stop the GPU supervisor made first
//     ("fault" or "vram_cap") overrides both "" and "cancelled".
//  4. An exit nobody saw (the workload ended while cq-node was down and left
//     no status) is "lost": the coordinator requeues the job.

#include "cq/bus/protocol.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace cq::node {

struct exit_facts {
  bool oom = false;                         ///< the cap was hit
  std::optional<std::int64_t> exit_code;    ///< the workload's status, if it exited
  bool yield_ordered = false;               ///< a yield order came
  bool timed_out = false;                   ///< stopped by its timeout
  bool stop_requested = false;              ///< a stop order came
  bus::reason gpu_stop = bus::reason::none; ///< fault|vram_cap|none (the GPU supervisor's stop)
  bool lost = false;                        ///< no exit status at all
};

bus::reason exit_reason(const exit_facts& f);

} // namespace cq::node
