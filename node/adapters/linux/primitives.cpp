// The platform primitives (posix/primitives.hpp) over Linux's /proc: the `posix`
// platform run on Linux, so that CI exercises the code path Mac nodes take.
#include "node/adapters/posix/primitives.hpp"

#include "cq/node/files.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/linux/procfs.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

namespace cq::node::platform {

std::string_view name() {
  return "linux";
}

std::vector<proc_entry> processes() {
  return scan_processes();
}

std::optional<proc_entry> process(pid_t pid) {
  return read_process(pid);
}

marker environ_has(pid_t pid, std::string_view needle) {
  return node::environ_has(pid, needle);
}

std::optional<std::string> process_name(pid_t pid) {
  auto comm = read_file_bounded(fmt::format("/proc/{}/comm", pid), 256);
  if (!comm)
    return std::nullopt;
  return std::string(trim(*comm));
}

std::optional<mem_info> memory() {
  return read_meminfo();
}

std::uint64_t cpus() {
  return cpu_count();
}

std::string self_exe() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

std::string boot_id() {
  // Read once: the boot does not change under a running program.
  static const std::string id = [] {
    std::string s;
    if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "re")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f))
        s = buf;
      std::fclose(f);
    }
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
      s.pop_back();
    return s;
  }();
  return id;
}

} // namespace cq::node::platform
