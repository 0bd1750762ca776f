// Host probes (seams.hpp) of the `linux` platform: /proc (procfs.cpp) and cgroups (cgroups.cpp).
#include "node/adapters/host_probes_base.hpp"

#include "cq/node/holds.hpp"
#include "cq/node/procscan.hpp"
#include "node/adapters/linux/cgroups.hpp"
#include "node/adapters/linux/procfs.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cq::node {

namespace {

class linux_host_probes final : public host_probes_base {
public:
  std::optional<mem_info> memory() override { return read_meminfo(); }
  std::uint64_t cpus() override { return cpu_count(); }

  bus::result<memcap_setup> detect_memcap(const memory_config& cfg) override {
    std::ifstream in("/proc/self/cgroup");
    std::stringstream ss;
    ss << in.rdbuf();
    return node::detect_memcap(cfg, ss.str());
  }

  bus::result<mem_group> create_group(const memcap_setup& setup, const std::string& allocation,
                                      std::optional<std::uint64_t> cap_bytes) override {
    return node::create_group(setup, allocation, cap_bytes);
  }
  std::optional<std::uint64_t> oom_kills(const mem_group& g) override { return node::oom_kills(g); }
  std::optional<std::uint64_t> peak_usage(const mem_group& g) override {
    return node::peak_usage(g);
  }
  std::optional<std::uint64_t> current_usage(const mem_group& g) override {
    return node::current_usage(g);
  }
  status remove_group(const mem_group& g) override { return node::remove_group(g); }

  bool remove_leftover_group(const mem_group& g) override {
    if (auto pids = group_pids(g))
      for (auto pid : *pids)
        if (auto p = read_process(pid))
          signal_same_process(pid, p->start_ticks, SIGKILL);
    return static_cast<bool>(node::remove_group(g));
  }

  std::vector<std::string> own_groups(const memcap_setup& setup) override {
    std::vector<std::string> out;
    if (setup.mode == memcap_mode::watchdog || setup.owner.empty())
      return out;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(setup.parent, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      auto name = it->path().filename().string();
      if (!allocation_of_group(setup, name).empty() && it->is_directory(ec))
        out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

} // namespace

std::unique_ptr<host_probes> make_linux_host_probes() {
  return std::make_unique<linux_host_probes>();
}

} // namespace cq::node
