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

/// Lets the allocator take memory from the system in 2 MiB chunks that the
/// kernel fills in one call each (MADV_POPULATE_WRITE): a coordinator that
/// loads 100k jobs touches ~200 MB, and a page fault per 4 KiB page is
/// costly on VMs (docs/adr/0036, 0051). Call first thing in main; no-op
/// without tcmalloc.
void prefault_new_memory();

/// From now on new memory comes from the allocator's own source, a page
/// fault at a time: called once recovery's bulk load is over. In steady
/// state the coordinator grows by little at a time (docs/adr/0036).
void stop_prefaulting();

} // namespace cq::coord
