#pragma once
// Returning the allocator's free memory to the system (docs/adr/0033).

#include <cstddef>

namespace cq::coord {

/// Hands the pages the allocator holds free back to the kernel: tcmalloc's
/// ReleaseFreeMemory where the program is linked with it, else glibc's
/// malloc_trim. Safe from any thread; costs little when little is free.
void release_free_memory();

/// Caps what tcmalloc's per-thread caches may hold in all (its default is
/// 32 MiB, which a handful of actor threads can keep as RSS); no-op
/// without tcmalloc.
void limit_thread_caches(std::size_t bytes);

} // namespace cq::coord
