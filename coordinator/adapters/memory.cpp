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

/// tcmalloc's source of memory: anonymous maps of whole, aligned 2 MiB
/// chunks marked MADV_HUGEPAGE, so one fault maps 2 MiB where the kernel has
/// a huge page free; the default allocator where a map fails. Memory tcmalloc
/// releases (release_free_memory) is still returned page by page: the kernel
/// splits the huge page.
class huge_page_allocator final : public SysAllocator {
public:
  explicit huge_page_allocator(SysAllocator* next) : next_(next) {}
  std::atomic<bool> on{true}; ///< off: the default allocator's pages
  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    if (!on.load(std::memory_order_relaxed))
      return next_->Alloc(size, actual_size, alignment);
    constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
    auto align = std::max<std::uintptr_t>(alignment, huge);
    if ((align & (align - 1)) != 0 || size == 0)
      return next_->Alloc(size, actual_size, alignment);
    auto n = (size + huge - 1) & ~(huge - 1);
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
    ::madvise(reinterpret_cast<void*>(start), n, MADV_HUGEPAGE);
    if (actual_size)
      *actual_size = n;
    return reinterpret_cast<void*>(start);
  }

private:
  SysAllocator* next_;
};

huge_page_allocator* installed = nullptr; ///< by use_huge_pages

} // namespace
#endif

void use_huge_pages() {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  auto* ext = MallocExtension::instance();
  static huge_page_allocator alloc(ext->GetSystemAllocator());
  ext->SetSystemAllocator(&alloc);
  installed = &alloc;
#endif
}

void stop_huge_pages() {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  if (installed)
    installed->on.store(false, std::memory_order_relaxed);
#endif
}

} // namespace cq::coord
