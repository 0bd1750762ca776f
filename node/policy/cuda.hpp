#pragma once
// CUDA_VISIBLE_DEVICES for an allocation (SPEC section 5): node policy, pure, no I/O.
//
// The variable comes from the device indexes of the lanes a start order gives
// the job, never from their names: a lane registered as "big" with index 3
// (gpu.hpp, [[gpu.lanes]]) is device 3, and a lane without an index (macOS's
// one GPU, a registered non-NVIDIA device) has no CUDA device at all, so a job
// holding such lanes runs with the variable removed. The daemon has already
// removed the submitter's value from the job's environment; it sets the value
// this function returns, and sets nothing when it returns "no value".

#include "cq/bus/protocol.hpp"

#include <optional>
#include <string>
#include <vector>

namespace cq::node {

/// The CUDA_VISIBLE_DEVICES of a job holding `lanes` (the start order's lane
/// names, in its order) on a node whose lanes are `node_lanes`.
///
/// On success: the lanes' indexes joined by commas in the order's order
/// ({"gpu2", "gpu0"} with indexes 2 and 0 -> "2,0") when every lane has one;
/// nullopt, meaning "remove the variable", when none of them has one (or
/// `lanes` is empty).
///
/// On failure (errc::invalid_argument, a one-line message naming the lane): a
/// name that is not one of `node_lanes`, a lane given twice, a device index
/// reached twice through two lanes, or a mix of lanes with and without an
/// index. A GPU job never runs with a device list other than the one it was
/// placed on: the daemon refuses the launch instead.
bus::result<std::optional<std::string>>
cuda_visible_devices(const bus::string_list& lanes, const std::vector<bus::lane_info>& node_lanes);

} // namespace cq::node
