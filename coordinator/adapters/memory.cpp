#include "adapters/memory.hpp"

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
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

} // namespace cq::coord
