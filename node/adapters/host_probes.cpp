// Host probes (seams.hpp) over Linux: meminfo.cpp, memcap.cpp, flock.
#include "node/adapters/adapters.hpp"
#include "node/adapters/clock.hpp"

#include "cq/node/holds.hpp"
#include "cq/node/procscan.hpp"

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

class linux_host_probes final : public host_probes {
public:
  ~linux_host_probes() override {
    // The lock stays held until the process ends (the kernel drops it even
    // on kill -9); closing here would let a second daemon in while this one
    // still finishes.
  }

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

  status lock_for_life(const std::filesystem::path& file) override {
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
      return bus::error_info{
          errc::internal, fmt::format("cannot open {}: {}", file.string(), std::strerror(errno))};
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      auto holder = std::string(trim(read_file_bounded(file, 64).value_or("")));
      ::close(fd);
      return bus::error_info{errc::already_exists,
                             fmt::format("pid {}", holder.empty() ? "unknown" : holder)};
    }
    auto pid = fmt::format("{}\n", ::getpid());
    (void)!::ftruncate(fd, 0);
    (void)!::pwrite(fd, pid.data(), pid.size(), 0);
    lock_fds_.push_back(fd);
    return done{};
  }

  std::string find_shim() override {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec)
      return {};
    auto shim = self.parent_path() / "cq-shim";
    if (::access(shim.c_str(), X_OK) != 0)
      return {};
    return shim.string();
  }

  std::string random_id() override { return random_hex_id(); }
  std::unique_ptr<gpu_probes> gpu(const gpu_config& cfg) override { return make_gpu_probes(cfg); }

private:
  std::vector<int> lock_fds_; ///< held for the life of the process
};

} // namespace

std::unique_ptr<host_probes> make_host_probes() {
  return std::make_unique<linux_host_probes>();
}

std::int64_t wall_clock_ms() {
  return wall_ms();
}

} // namespace cq::node
