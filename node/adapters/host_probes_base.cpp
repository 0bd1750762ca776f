#include "node/adapters/host_probes_base.hpp"
#include "node/adapters/posix/primitives.hpp"

#include "cq/node/files.hpp"
#include "cq/node/holds.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cq::node {

status host_probes_base::lock_for_life(const std::filesystem::path& file) {
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return bus::error_info{errc::internal,
                           fmt::format("cannot open {}: {}", file.string(), std::strerror(errno))};
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

std::string host_probes_base::find_shim() {
  auto self = platform::self_exe();
  if (self.empty())
    return {};
  auto shim = std::filesystem::path(self).parent_path() / "cq-shim";
  if (::access(shim.c_str(), X_OK) != 0)
    return {};
  return shim.string();
}

std::string host_probes_base::random_id() {
  return random_hex_id();
}

std::unique_ptr<gpu_probes> host_probes_base::gpu(const gpu_config& cfg) {
  return make_gpu_probes(cfg);
}

} // namespace cq::node
