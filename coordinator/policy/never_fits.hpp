#pragma once
// What placement.cpp and never_fits.cpp share (policy-internal): the
// figures by which a job can never run on a node, however empty, and the
// small helpers both use.

#include "placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace cq::policy::detail {

inline std::uint64_t sub(std::uint64_t a, std::uint64_t b) {
  return a > b ? a - b : 0;
}

inline std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
}

/// A node that maps identities to users runs only those identities' jobs.
inline bool maps(const node_view& n, const job_view& j) {
  return !n.run_as || std::find(n.run_as->begin(), n.run_as->end(), j.owner) != n.run_as->end();
}

/// The first figure by which `j` can never run on `n`, however empty the node:
/// more than it has, whatever runs there or ends. (Held lanes and VRAM used
/// outside cq are not here: they change.)
enum class never : std::uint8_t {
  none,      ///< it could fit on the empty node
  ram,       ///< cap over allocatable RAM
  cpus,      ///< more CPUs than the node has
  gpus,      ///< more GPUs than the node has lanes
  vram_cap,  ///< VRAM over the node's VRAM cap
  vram,      ///< too few lanes with that much VRAM in total
  floor,     ///< cap + combined floor (node's, job's) over the node's memory
  start_min, ///< start minimum over the node's memory
};

/// Why `j` can never run on `n` (never::none: it could, on the empty node).
never never_fits(const node_view& n, const job_view& j);

/// The words for a never_fits() reason, with the figures.
std::string never_words(const node_view& n, const job_view& j, never why);

} // namespace cq::policy::detail
