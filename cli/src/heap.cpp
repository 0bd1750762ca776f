// heap_in_huge_pages (sys.hpp): cq's heap in transparent huge pages, for
// commands that read much. In cq_cli_lib, so that its test links it alone.
#include "sys.hpp"

#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace cq::cli::sys {

namespace {
/// heap_in_huge_pages' spacer: held for the process's life.
void* volatile spacer = nullptr;
} // namespace

void heap_in_huge_pages() {
#if defined(__linux__) && defined(__GLIBC__)
  // glibc's heap grows by M_TOP_PAD beyond each request: one early growth
  // of 64 MiB (virtual: nothing is touched) serves what a command allocates,
  // and that stretch is marked for huge pages.
  constexpr std::size_t pad = std::size_t{64} << 20;
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  ::mallopt(M_TOP_PAD, static_cast<int>(pad));
  // Large blocks (a listing's vectors) come from the heap too, not from maps
  // of their own; a first one above the top chunk makes the heap grow now.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  auto before = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  void* volatile p = std::malloc(std::size_t{1} << 20); // kept: not optimised out
  auto after = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  // The growth wrote a chunk header past the block: a page there has its
  // page table already, and the kernel gives its 2 MiB no huge page. The
  // huge stretch begins at the first boundary past it.
  auto touched = reinterpret_cast<std::uintptr_t>(p) + (std::size_t{1} << 20) + 64;
  std::free(p);
  auto start = (std::max(before, touched) + huge - 1) & ~(huge - 1);
  auto end = after & ~(huge - 1);
  if (end <= start)
    return;
  ::madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
  // The heap's free top begins below `start`, in small pages: up to 3 MiB
  // that the command would fill first, a fault per 4 KiB. A spacer block,
  // kept and never touched past its header, takes that stretch, so the
  // next blocks come from `start` on.
  void* volatile probe = std::malloc(64);
  auto top = reinterpret_cast<std::uintptr_t>(probe) + 64;
  std::free(probe);
  constexpr std::uintptr_t slack = 256; // chunk headers and alignment
  if (start > top + slack)
    spacer = std::malloc(start - top - slack);
#endif
}

} // namespace cq::cli::sys
