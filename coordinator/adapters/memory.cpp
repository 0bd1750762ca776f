#include "adapters/memory.hpp"

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(CQ_TCMALLOC) && defined(__linux__)
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <gperftools/malloc_extension.h>
#include <sys/mman.h>
#endif

// tcmalloc's C entry point, declared weak: it is there when cq-coordinator is
// linked with tcmalloc_minimal (cmake/tcmalloc.cmake) and null otherwise.
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));
extern "C" int MallocExtension_SetNumericProperty(const char* property, size_t value)
    __attribute__((weak));

namespace cq::coord {

void limit_thread_caches(std::size_t bytes) {
  if (MallocExtension_SetNumericProperty)
    MallocExtension_SetNumericProperty("tcmalloc.max_total_thread_cache_bytes", bytes);
}

void release_free_memory() {
  if (MallocExtension_ReleaseFreeMemory) {
    MallocExtension_ReleaseFreeMemory();
    return;
  }
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

#if defined(CQ_TCMALLOC) && defined(__linux__)
namespace {

/// tcmalloc's source of memory while the coordinator recovers: anonymous
/// maps of whole, aligned 2 MiB chunks, each prefaulted by one
/// MADV_POPULATE_WRITE (docs/adr/0051); the default allocator where a map
/// fails. Recovery writes every byte it asks for, so the kernel fills a
/// chunk's page tables in one call instead of one trap per 4 KiB page. A
/// kernel older than 5.14 answers EINVAL: its pages then fault one by one, as
/// tcmalloc's own would. No MADV_HUGEPAGE: with the kernel's default THP
/// defrag ("madvise") a marked fault compacts memory when no huge page is
/// free, and restarts went from 310 to 700 ms from one run to the next.
class prefaulting_allocator final : public SysAllocator {
public:
  explicit prefaulting_allocator(SysAllocator* next) : next_(next) {}
  std::atomic<bool> on{true}; ///< off: the default allocator's pages
  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    if (!on.load(std::memory_order_relaxed))
      return next_->Alloc(size, actual_size, alignment);
    constexpr std::uintptr_t chunk = std::uintptr_t{2} << 20;
    auto align = std::max<std::uintptr_t>(alignment, chunk);
    if ((align & (align - 1)) != 0 || size == 0)
      return next_->Alloc(size, actual_size, alignment);
    auto n = (size + chunk - 1) & ~(chunk - 1);
    void* p =
        ::mmap(nullptr, n + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return next_->Alloc(size, actual_size, alignment);
    auto base = reinterpret_cast<std::uintptr_t>(p);
    auto start = (base + align - 1) & ~(align - 1);
    if (start > base)
      ::munmap(p, start - base);
    if (auto end = base + n + align; end > start + n)
      ::munmap(reinterpret_cast<void*>(start + n), end - (start + n));
#ifdef MADV_POPULATE_WRITE
    ::madvise(reinterpret_cast<void*>(start), n, MADV_POPULATE_WRITE); // best effort
#endif
    if (actual_size)
      *actual_size = n;
    return reinterpret_cast<void*>(start);
  }

private:
  SysAllocator* next_;
};

prefaulting_allocator* installed = nullptr; ///< by prefault_new_memory

} // namespace
#endif

void prefault_new_memory() {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  auto* ext = MallocExtension::instance();
  static prefaulting_allocator alloc(ext->GetSystemAllocator());
  ext->SetSystemAllocator(&alloc);
  installed = &alloc;
#endif
}

void stop_prefaulting() {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  if (installed)
    installed->on.store(false, std::memory_order_relaxed);
#endif
}

} // namespace cq::coord
