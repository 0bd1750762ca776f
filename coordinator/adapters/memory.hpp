#pragma once
// Returning the allocator's free memory to the system (docs/adr/0033).

#include <cstddef>
#include <cstdint>

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

/// For a store of `store_bytes` (a few MB or more): reserves address space
/// for recovery and starts a thread that writes to it a page at a time, up
/// to 64 MiB ahead of what the allocator has taken, so that the first write
/// to each page is paid on the core the load leaves idle (docs/adr/0064).
/// After prefault_new_memory; no-op without tcmalloc.
void touch_ahead(std::uintmax_t store_bytes);

/// From now on new memory comes from the allocator's own source, a page
/// fault at a time: called once recovery's bulk load is over. In steady
/// state the coordinator grows by little at a time (docs/adr/0036). Ends
/// touch_ahead's thread and unmaps what it reserved and recovery did not take.
void stop_prefaulting();

} // namespace cq::coord
