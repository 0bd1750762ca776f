#pragma once
// What both platforms' host probes (linux/host_probes.cpp,
// posix/host_probes.cpp) do the same way: the state dir's lock, cq-shim
// beside this program, fresh ids, the GPU probes.
#include "node/adapters/adapters.hpp"

#include <vector>

namespace cq::node {

class host_probes_base : public host_probes {
public:
  /// The lock stays held until the process ends (the kernel drops it even on
  /// kill -9); closing it earlier would let a second daemon in while this one
  /// still finishes.
  ~host_probes_base() override = default;
  status lock_for_life(const std::filesystem::path& file) override;
  std::string find_shim() override;
  std::string random_id() override;
  std::unique_ptr<gpu_probes> gpu(const gpu_config& cfg) override;

private:
  std::vector<int> lock_fds_; ///< held for the life of the process
};

} // namespace cq::node
