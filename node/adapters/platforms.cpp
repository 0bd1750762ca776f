// The node's two platforms (adapters.hpp: platform_kind) and which one a
// build and a command line choose.
#include "node/adapters/adapters.hpp"
#include "node/adapters/clock.hpp"

namespace cq::node {

std::unique_ptr<process_host> make_posix_process_host();
std::unique_ptr<host_probes> make_posix_host_probes();
#if defined(__linux__)
std::unique_ptr<process_host> make_linux_process_host();
std::unique_ptr<host_probes> make_linux_host_probes();
#endif

std::string_view to_string(platform_kind p) {
  return p == platform_kind::posix ? "posix" : "linux";
}

std::optional<platform_kind> parse_platform(std::string_view name) {
  if (name == "posix")
    return platform_kind::posix;
#if defined(__linux__)
  if (name == "linux")
    return platform_kind::linux_native;
#endif
  return std::nullopt;
}

platform_kind default_platform() {
#if defined(__linux__)
  return platform_kind::linux_native;
#else
  return platform_kind::posix;
#endif
}

std::unique_ptr<process_host> make_process_host(platform_kind p) {
#if defined(__linux__)
  if (p == platform_kind::linux_native)
    return make_linux_process_host();
#endif
  return make_posix_process_host();
}

std::unique_ptr<host_probes> make_host_probes(platform_kind p) {
#if defined(__linux__)
  if (p == platform_kind::linux_native)
    return make_linux_host_probes();
#endif
  return make_posix_host_probes();
}

std::int64_t wall_clock_ms() {
  return wall_ms();
}

} // namespace cq::node
