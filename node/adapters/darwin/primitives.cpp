// The platform primitives (posix/primitives.hpp) over macOS: libproc for the process
// table and each process's footprint, sysctl KERN_PROCARGS2 for a process's
// environment, host_statistics64 and hw.memsize for the machine's memory.
// Compiled only on Apple (node/CMakeLists.txt); no macOS machine builds this
// project's CI, so .github/workflows/macos.yml builds and tests it on a hosted
// runner for anyone who publishes the repository.
#include "node/adapters/posix/primitives.hpp"

#include <libproc.h>
#include <mach/mach.h>
#include <mach/vm_page_size.h> // vm_kernel_page_size
#include <signal.h>
#include <sys/proc.h> // SRUN, SZOMB, ...
#include <sys/proc_info.h>
#include <sys/resource.h>
#include <sys/sysctl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace cq::node::platform {

namespace {

std::uint64_t page_bytes() {
  static const auto page = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
  return page;
}

/// The kernel's page size: host_statistics64 counts in it (16 KiB on Apple
/// Silicon, also for an x86_64 build under Rosetta, whose sysconf says 4 KiB).
std::uint64_t kernel_page_bytes() {
  return static_cast<std::uint64_t>(vm_kernel_page_size);
}

char state_of(std::uint32_t status) {
  switch (status) {
  case SRUN:
    return 'R';
  case SSTOP:
    return 'T';
  case SZOMB:
    return 'Z';
  case SIDL:
    return 'I';
  default:
    return 'S';
  }
}

} // namespace

std::string_view name() {
  return "darwin";
}

std::optional<proc_entry> process(pid_t pid) {
  // arg 1: zombies too (the kernel looks them up only when asked), so that a
  // child that already exited still has its identity and state 'Z'.
  struct proc_bsdinfowithuniqid bi {};
  if (::proc_pidinfo(pid, PROC_PIDT_BSDINFOWITHUNIQID, 1, &bi, sizeof bi) !=
      static_cast<int>(sizeof bi))
    return std::nullopt;
  proc_entry e;
  e.pid = pid;
  e.ppid = static_cast<pid_t>(bi.pbsd.pbi_ppid);
  e.pgrp = static_cast<pid_t>(bi.pbsd.pbi_pgid);
  e.uid = bi.pbsd.pbi_uid;
  e.state = state_of(bi.pbsd.pbi_status);
  // The process's unique id: assigned at fork from a counter that only grows
  // and is never reused (unlike the wall-clock start time, which a clock
  // step can reorder), so it orders processes by their start as well.
  e.start_ticks = bi.p_uniqidentifier.p_uniqueid;
  // The physical footprint (what jetsam and Activity Monitor count): RSS
  // would miss compressed memory and count shared pages. None for a zombie.
  rusage_info_v2 ri{};
  if (e.state != 'Z' &&
      ::proc_pid_rusage(pid, RUSAGE_INFO_V2, reinterpret_cast<rusage_info_t*>(&ri)) == 0)
    e.rss_pages = (ri.ri_phys_footprint + page_bytes() - 1) / page_bytes();
  return e;
}

std::vector<proc_entry> processes() {
  std::vector<proc_entry> out;
  int n = ::proc_listallpids(nullptr, 0);
  if (n <= 0)
    return out;
  // Room for processes started between the two calls.
  std::vector<pid_t> pids(static_cast<std::size_t>(n) + 256);
  n = ::proc_listallpids(pids.data(), static_cast<int>(pids.size() * sizeof(pid_t)));
  if (n <= 0)
    return out;
  pids.resize(std::min(pids.size(), static_cast<std::size_t>(n)));
  out.reserve(pids.size());
  for (auto pid : pids)
    if (pid > 0)
      if (auto e = process(pid))
        out.push_back(*e);
  return out;
}

marker environ_has(pid_t pid, std::string_view needle) {
  static const std::size_t argmax = [] {
    int n = 0;
    std::size_t size = sizeof n;
    int mib[2] = {CTL_KERN, KERN_ARGMAX};
    return ::sysctl(mib, 2, &n, &size, nullptr, 0) == 0 && n > 0 ? static_cast<std::size_t>(n)
                                                                 : std::size_t{1} << 20;
  }();
  thread_local std::vector<char> buf; // reused: a scan asks for every process
  buf.resize(argmax);
  std::size_t size = buf.size();
  int mib[3] = {CTL_KERN, KERN_PROCARGS2, pid};
  if (::sysctl(mib, 3, buf.data(), &size, nullptr, 0) != 0) {
    // A process we may not read (another user's, for a non-root daemon)
    // answers EINVAL as a vanished one does: unreadable while it exists.
    bool exists = ::kill(pid, 0) == 0 || errno == EPERM;
    return exists ? marker::unreadable : marker::absent;
  }
  return procargs2_environ_has(std::string_view(buf.data(), size), needle);
}

std::optional<std::string> process_name(pid_t pid) {
  char buf[2 * MAXCOMLEN + 1] = {};
  if (::proc_name(pid, buf, sizeof buf) <= 0)
    return std::nullopt;
  return std::string(buf);
}

std::optional<mem_info> memory() {
  std::uint64_t total = 0;
  std::size_t size = sizeof total;
  if (::sysctlbyname("hw.memsize", &total, &size, nullptr, 0) != 0 || total == 0)
    return std::nullopt;
  static const mach_port_t host = ::mach_host_self(); // one send right, kept
  vm_statistics64_data_t vm{};
  mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
  if (::host_statistics64(host, HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm), &count) !=
      KERN_SUCCESS)
    return std::nullopt;
  // Free, inactive (file-backed, reclaimable) and purgeable pages: what a
  // new job can have without the machine compressing or swapping.
  auto avail =
      (static_cast<std::uint64_t>(vm.free_count) + vm.inactive_count + vm.purgeable_count) *
      page_bytes();
  return mem_info{total, std::min(avail, total)};
}

std::uint64_t cpus() {
  auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<std::uint64_t>(n) : 1;
}

std::string self_exe() {
  char buf[PROC_PIDPATHINFO_MAXSIZE] = {};
  if (::proc_pidpath(::getpid(), buf, sizeof buf) <= 0)
    return {};
  return buf;
}

std::string boot_id() {
  // Read once: the boot does not change under a running program.
  static const std::string id = [] {
    struct timeval tv {};
    std::size_t len = sizeof tv;
    if (::sysctlbyname("kern.boottime", &tv, &len, nullptr, 0) != 0 || tv.tv_sec == 0)
      return std::string();
    return std::to_string(tv.tv_sec) + "." + std::to_string(tv.tv_usec);
  }();
  return id;
}

} // namespace cq::node::platform
