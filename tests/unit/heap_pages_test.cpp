// cq's heap in huge pages (cli/src/sys.cpp: heap_in_huge_pages, ADR 0036):
// after the call, a command's large blocks fault in 2 MiB at a time, not
// 4 KiB. A program of its own: the call must come first in a fresh process,
// and each run (a child of this one, so that address randomisation gives it
// a heap of its own) places the heap elsewhere. Before the fix, a growth's
// chunk header touched the first huge stretch before it was marked, and
// about half of the runs filled up to 2 MiB in small pages.
//
// Reports a skip (77) where the kernel gives no huge pages (not Linux, THP
// off, or none free when asked: its thp_fault_fallback count moved).
#include "sys.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/// A figure of /proc/vmstat (0 when absent).
long vmstat(const std::string& name) {
  std::ifstream in("/proc/vmstat");
  std::string key;
  long value = 0;
  while (in >> key >> value)
    if (key == name)
      return value;
  return 0;
}

/// One run: the call, then an 8 MiB block written through. In small pages
/// that is 2,048 faults; in huge pages a handful.
int child() {
  cq::cli::sys::heap_in_huge_pages();
  auto before = minor_faults();
  std::vector<char> block(std::size_t{8} << 20, 1);
  auto faults = minor_faults() - before;
  std::printf("%ld faults for 8 MiB at %p\n", faults, static_cast<void*>(block.data()));
  return faults < 256 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0)
    return child();
#if !defined(__linux__) || !defined(__GLIBC__)
  std::cout << "skipped: huge pages for the heap are a Linux and glibc matter\n";
  return 77;
#else
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (modes.find("[never]") != std::string::npos || modes.empty()) {
    std::cout << "skipped: transparent huge pages are off on this machine\n";
    return 77;
  }
  auto fallback = vmstat("thp_fault_fallback");
  int failed = 0;
  constexpr int runs = 12;
  for (int i = 0; i < runs; ++i) {
    std::cout.flush();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/proc/self/exe", argv[0], "--child", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) == 127) {
      std::cout << "cannot run the child\n";
      return 1;
    }
    failed += WEXITSTATUS(status) != 0;
  }
  if (failed && vmstat("thp_fault_fallback") != fallback) {
    std::cout << "skipped: the kernel had no huge page to give (thp_fault_fallback moved)\n";
    return 77;
  }
  std::cout << failed << " of " << runs << " runs wrote their block in small pages\n";
  return failed == 0 ? 0 : 1;
#endif
}
