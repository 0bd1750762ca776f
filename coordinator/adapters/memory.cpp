#include "adapters/memory.hpp"

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(CQ_TCMALLOC) && defined(__linux__)
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <gperftools/malloc_extension.h>
#include <mutex>
#include <sys/mman.h>
#include <thread>
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

constexpr std::uintptr_t chunk = std::uintptr_t{2} << 20;

/// `n` bytes of anonymous memory at a multiple of `align` (a power of two),
/// what the map had around them given back; 0 where the map fails.
std::uintptr_t map_aligned(std::uintptr_t n, std::uintptr_t align, int flags = 0) {
  void* p = ::mmap(nullptr, n + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags,
                   -1, 0);
  if (p == MAP_FAILED)
    return 0;
  auto base = reinterpret_cast<std::uintptr_t>(p);
  auto start = (base + align - 1) & ~(align - 1);
  if (start > base)
    ::munmap(p, start - base);
  if (auto end = base + n + align; end > start + n)
    ::munmap(reinterpret_cast<void*>(start + n), end - (start + n));
  return start;
}

/// Fills a chunk's page tables in one call (best effort: EINVAL before 5.14).
void populate(std::uintptr_t start, std::uintptr_t n) {
#ifdef MADV_POPULATE_WRITE
  ::madvise(reinterpret_cast<void*>(start), n, MADV_POPULATE_WRITE);
#endif
}

/// Memory reserved for recovery and written to ahead of it by a thread of
/// its own, one page at a time (docs/adr/0064): on a VM the first write to
/// each page still exits to the hypervisor after MADV_POPULATE_WRITE (about
/// 5 us a page on this project's VMs), and the thread pays that on the core
/// the load leaves idle. The allocator takes chunks from the front; the
/// thread writes zeros only to chunks not taken yet, at most `ahead` bytes
/// past them, and the allocator waits for a chunk it is writing to before it
/// hands that chunk out, so nothing handed out is ever written to here.
struct touched_region {
  std::mutex m;
  std::condition_variable cv;
  std::uintptr_t end = 0;     ///< the reservation ends here
  std::uintptr_t taken = 0;   ///< up to here handed to the allocator (from its start)
  std::uintptr_t touched = 0; ///< up to here written to (or taken)
  std::uintptr_t busy = 0;    ///< the chunk being written to now; 0 = none
  std::uintptr_t ahead = 0;
  int waiters = 0; ///< allocations waiting for `busy`: the thread claims none meanwhile
  bool stopping = false;
  std::thread thread;

  void run() {
    std::unique_lock l(m);
    while (!stopping) {
      touched = std::max(touched, taken);
      if (touched >= end)
        return;
      if (touched >= taken + ahead || waiters > 0) {
        cv.wait(l);
        continue;
      }
      busy = touched;
      l.unlock();
      populate(busy, chunk);
      for (auto p = busy; p < busy + chunk; p += 4096)
        *reinterpret_cast<volatile char*>(p) = 0;
      l.lock();
      touched = std::max(touched, busy + chunk);
      busy = 0;
      cv.notify_all();
    }
  }

  /// `n` bytes (whole chunks) from the front, or 0 when they do not fit or
  /// the thread was stopped. Called by tcmalloc with its locks held: it waits
  /// at most for the one chunk the thread is writing to (the thread claims no
  /// other while an allocation waits).
  std::uintptr_t take(std::uintptr_t n) {
    std::unique_lock l(m);
    ++waiters;
    cv.wait(l, [&] { return stopping || busy == 0 || busy >= taken + n; });
    --waiters;
    if (stopping || n > end - taken)
      return 0;
    auto start = taken;
    taken += n;
    auto written = std::min(std::max(touched, start), start + n);
    cv.notify_all(); // the thread may go on
    l.unlock();
    if (written < start + n)
      populate(written, start + n - written);
    return start;
  }

  /// Ends the thread and gives back what was not taken.
  void stop() {
    {
      std::lock_guard l(m);
      stopping = true;
      cv.notify_all();
    }
    if (thread.joinable())
      thread.join();
    std::lock_guard l(m);
    if (end > taken)
      ::munmap(reinterpret_cast<void*>(taken), end - taken);
    end = taken;
  }
};

/// tcmalloc's source of memory while the coordinator recovers: the touched
/// region's chunks where touch_ahead made one, else anonymous maps of whole,
/// aligned 2 MiB chunks, each prefaulted by one MADV_POPULATE_WRITE
/// (docs/adr/0051); the default allocator where a map fails. Recovery writes
/// every byte it asks for, so the kernel fills a chunk's page tables in one
/// call instead of one trap per 4 KiB page. A kernel older than 5.14 answers
/// EINVAL: its pages then fault one by one, as tcmalloc's own would. No
/// MADV_HUGEPAGE: with the kernel's default THP defrag ("madvise") a marked
/// fault compacts memory when no huge page is free, and restarts went from
/// 310 to 700 ms from one run to the next.
class prefaulting_allocator final : public SysAllocator {
public:
  explicit prefaulting_allocator(SysAllocator* next) : next_(next) {}
  std::atomic<bool> on{true};                   ///< off: the default allocator's pages
  std::atomic<touched_region*> region{nullptr}; ///< set once by touch_ahead
  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    if (!on.load(std::memory_order_relaxed))
      return next_->Alloc(size, actual_size, alignment);
    auto align = std::max<std::uintptr_t>(alignment, chunk);
    if ((align & (align - 1)) != 0 || size == 0)
      return next_->Alloc(size, actual_size, alignment);
    auto n = (size + chunk - 1) & ~(chunk - 1);
    if (auto* r = region.load(std::memory_order_acquire); r && align == chunk)
      if (auto start = r->take(n)) {
        if (actual_size)
          *actual_size = n;
        return reinterpret_cast<void*>(start);
      }
    auto start = map_aligned(n, align);
    if (!start)
      return next_->Alloc(size, actual_size, alignment);
    populate(start, n);
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

void touch_ahead(std::uintmax_t store_bytes) {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  // A store of a few MB recovers into little memory: no thread for it.
  constexpr std::uintmax_t mib = 1 << 20;
  if (!installed || installed->region.load() || store_bytes < 4 * mib)
    return;
  // Recovery takes about 4 bytes of memory per byte of the store (100,000
  // queued jobs: a 50 MB store, about 200 MB); twice that is reserved, as
  // address space only until written to.
  auto reserve = static_cast<std::uintptr_t>(
      (std::min<std::uintmax_t>(8 * store_bytes, std::uintmax_t{4} << 30) + chunk - 1) &
      ~std::uintmax_t{chunk - 1});
  auto start = map_aligned(reserve, chunk, MAP_NORESERVE);
  if (!start)
    return;
  // Never destroyed: a coordinator that stops before recovery ends (a stop
  // signal during the load) exits with the thread still running, harmlessly.
  auto& r = *new touched_region;
  r.taken = r.touched = start;
  r.end = start + reserve;
  r.ahead =
      static_cast<std::uintptr_t>(std::clamp<std::uintmax_t>(4 * store_bytes, 8 * mib, 64 * mib));
  r.thread = std::thread([&r] { r.run(); });
  installed->region.store(&r, std::memory_order_release);
#else
  (void)store_bytes;
#endif
}

void stop_prefaulting() {
#if defined(CQ_TCMALLOC) && defined(__linux__)
  if (installed) {
    installed->on.store(false, std::memory_order_relaxed);
    if (auto* r = installed->region.load(std::memory_order_acquire))
      r->stop();
  }
#endif
}

} // namespace cq::coord
