// touch_ahead (docs/adr/0064): while a thread writes zeros ahead of the
// allocator into memory it has not handed out yet, nothing the allocator
// hands out is ever written to by that thread; stop_prefaulting ends the
// thread. Two threads allocate blocks of many sizes (300 MB in all, more than
// the thread runs ahead) and fill each at once with a pattern of its own;
// every block is checked after all were made, again after the stop, and
// blocks made after the stop as well. With --small the reservation is
// smaller than what the two take (the allocator goes on with chunks of its
// own), and the stop comes while the other thread still allocates. A
// standalone program: it needs the coordinator's allocator (tcmalloc), and
// reports a skip (77) without it.
#include "adapters/memory.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct block {
  std::unique_ptr<std::uint64_t[]> words;
  std::size_t n = 0;
  std::uint64_t seed = 0;
};

std::uint64_t word(std::uint64_t seed, std::size_t i) {
  return (seed * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull) ^ 0x5a5a5a5a5a5a5a5aull;
}

/// Blocks of 8 B to 4 MiB, `bytes` in all, each filled as soon as it is made.
std::vector<block> make(std::uint64_t seed, std::size_t bytes) {
  std::mt19937_64 rng(seed);
  std::vector<block> out;
  std::size_t made = 0;
  while (made < bytes) {
    auto shift = rng() % 20; // 1 .. 2^19 words
    block b;
    b.n = std::size_t{1} + (rng() % (std::size_t{1} << shift));
    b.seed = rng();
    b.words.reset(new std::uint64_t[b.n]);
    for (std::size_t i = 0; i < b.n; ++i)
      b.words[i] = word(b.seed, i);
    made += b.n * 8;
    out.push_back(std::move(b));
  }
  return out;
}

/// How many words of `blocks` differ from their pattern.
std::size_t damaged(const std::vector<block>& blocks) {
  std::size_t bad = 0;
  for (const auto& b : blocks)
    for (std::size_t i = 0; i < b.n; ++i)
      bad += b.words[i] != word(b.seed, i) ? 1 : 0;
  return bad;
}

std::size_t threads() {
  std::size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

/// Whether the process is down to `n` threads within 5 s (a joined thread
/// leaves /proc a moment after its join returns).
bool threads_become(std::size_t n) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (threads() != n && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return threads() == n;
}

} // namespace

int main(int argc, char** argv) {
#ifndef CQ_TCMALLOC
  (void)argc, (void)argv;
  std::puts("SKIP: not linked with tcmalloc: touch_ahead is a no-op");
  return 77;
#else
  constexpr std::size_t mib = std::size_t{1} << 20;
  bool small = argc > 1 && std::string_view(argv[1]) == "--small";
  cq::coord::prefault_new_memory();
  // As for a 64 MB store (512 MiB reserved), or a 16 MB one (128 MiB).
  cq::coord::touch_ahead(small ? 16 * mib : 64 * mib);
  if (threads() != 2) {
    std::printf("FAIL: touch_ahead started no thread (%zu threads)\n", threads());
    return 1;
  }
  std::vector<block> a, b, d;
  std::thread other([&] { b = make(2, 150 * mib); });
  a = make(1, small ? 100 * mib : 150 * mib);
  if (small) { // stopped while the other thread still allocates
    cq::coord::stop_prefaulting();
    d = make(4, 50 * mib);
  }
  other.join();
  int failed = 0;
  if (auto bad = damaged(a) + damaged(b) + damaged(d)) {
    std::printf("FAIL: %zu words written over while the thread ran ahead\n", bad);
    failed = 1;
  }
  if (!small)
    cq::coord::stop_prefaulting();
  if (!threads_become(1)) {
    std::printf("FAIL: %zu threads after stop_prefaulting (1 expected)\n", threads());
    failed = 1;
  }
  auto c = make(3, 50 * mib);
  if (auto bad = damaged(a) + damaged(b) + damaged(c) + damaged(d)) {
    std::printf("FAIL: %zu words differ after the stop\n", bad);
    failed = 1;
  }
  if (!failed)
    std::puts("ok: 350 MB of blocks keep their patterns; the thread ended at the stop");
  return failed;
#endif
}
