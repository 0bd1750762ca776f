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

/// Lets the allocator take memory from the system in 2 MiB-aligned chunks
/// the kernel may back with transparent huge pages (madvise mode): a
/// coordinator that loads 100k jobs touches ~270 MB, and each 4 KiB page
/// fault costs ~11 us on the VMs measured (docs/adr/0036). Call first thing
/// in main; no-op without tcmalloc or where the kernel has no THP.
void use_huge_pages();

/// From now on new memory comes in ordinary pages: called once recovery's
/// bulk load is over. In steady state the coordinator grows by little at a
/// time, and a huge page holds more than it uses: with 10,000 queued jobs
/// the settled RSS was 49.5 MB with huge pages throughout and 47.0 MB with
/// them for recovery only (docs/adr/0036).
void stop_huge_pages();

} // namespace cq::coord
