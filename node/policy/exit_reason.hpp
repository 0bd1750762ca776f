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

/// What a kill line says (SPEC section 10: every kill leaves one line in the
/// job's output saying what killed it and why).
struct kill_facts {
  bus::reason reason = bus::reason::none;
  bool watchdog = false;                  ///< the cap is sampled, not the kernel's
  std::optional<std::uint64_t> ram_cap;   ///< bytes
  std::optional<std::uint64_t> peak;      ///< bytes, as measured
  std::optional<std::int64_t> timeout_ms; ///< the job's --timeout
  std::uint64_t wall_ms = 0;              ///< how long it ran
  std::int64_t term_kill_after_ms = 0;    ///< SIGTERM, then SIGKILL this much later
  bool yield_ordered = false;             ///< a yield order came before the stop
  std::string gpu_detail;                 ///< the GPU side's reason ("" if unknown)
};

/// The line the node appends to the job's output when it (or the
/// coordinator) killed the workload: oom, timeout, a stop order (cancelled,
/// or preempted after a yield order), fault, vram_cap. nullopt for an end
/// that was no kill (an exit, a checkpoint, a lost end). Starts "cq-node: "
/// and ends with a newline.
std::optional<std::string> kill_line(const kill_facts& f);

} // namespace cq::node
