// Host probes (seams.hpp) of the `posix` platform: no cgroups, so memory
// caps are the watchdog's (memcap.hpp); memory and CPUs from posix/primitives.hpp.
#include "node/adapters/host_probes_base.hpp"
#include "node/adapters/posix/primitives.hpp"

#include <fmt/format.h>

namespace cq::node {

namespace {

class posix_host_probes final : public host_probes_base {
public:
  std::optional<mem_info> memory() override { return platform::memory(); }
  std::uint64_t cpus() override { return platform::cpus(); }

  bus::result<memcap_setup> detect_memcap(const memory_config& cfg) override {
    if (cfg.mode != "auto" && cfg.mode != "watchdog")
      return bus::error_info{
          errc::invalid_argument,
          fmt::format("[memory] mode = \"{}\": the posix platform has no cgroups (use \"auto\" or "
                      "\"watchdog\", or run cq-node --platform linux)",
                      cfg.mode)};
    memcap_setup s;
    s.mode = memcap_mode::watchdog;
    if (cfg.mode == "auto")
      s.note = "the posix platform has no cgroups";
    return s;
  }

  bus::result<mem_group> create_group(const memcap_setup&, const std::string&,
                                      std::optional<std::uint64_t>) override {
    return mem_group{memcap_mode::watchdog, {}};
  }
  std::optional<std::uint64_t> oom_kills(const mem_group&) override { return std::nullopt; }
  std::optional<std::uint64_t> peak_usage(const mem_group&) override { return std::nullopt; }
  std::optional<std::uint64_t> current_usage(const mem_group&) override { return std::nullopt; }
  status remove_group(const mem_group&) override { return done{}; }
  bool remove_leftover_group(const mem_group&) override { return true; }

  void platform_gpu_defaults(gpu_config& cfg) override {
#if defined(__APPLE__)
    // A Mac has one GPU that Metal shares between processes: one lane
    // without a CUDA index, no nvidia-smi and no kernel log to follow.
    if (cfg.lanes.empty()) {
      bus::lane_info gpu0;
      gpu0.name = "gpu0";
      gpu0.uuid = "apple-gpu0";
      cfg.lanes.push_back(gpu0);
    }
    cfg.telemetry = false;
    cfg.kernel_log.clear();
#else
    (void)cfg;
#endif
  }
};

} // namespace

std::unique_ptr<host_probes> make_posix_host_probes() {
  return std::make_unique<posix_host_probes>();
}

} // namespace cq::node
