#pragma once
// A few threads that run fsyncs side by side (ADR 0077). A start's record and
// its directories are five fsyncs (ADR 0045); one after another each waits
// for the disk, where issued together the disk serves them at once: on this
// project's VMs five took 0.99-1.17 ms in turn and 0.43-0.62 ms together.
// Used by the machine's node_disk (disk.cpp, files.cpp); not for actors.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cq::node {

class sync_crew {
public:
  /// At most `helpers` threads beside the callers', started when first needed.
  explicit sync_crew(std::size_t helpers) : most_(helpers) {}
  ~sync_crew();
  sync_crew(const sync_crew&) = delete;
  sync_crew& operator=(const sync_crew&) = delete;

  /// Runs every task once, on the helpers and on the calling thread, and
  /// returns when all have returned; then rethrows the first exception a
  /// task threw, if any. Batches of several callers run at once (the
  /// helpers take a task of each in turn, each caller works on its own).
  void run(std::vector<std::function<void()>>& tasks);

private:
  struct batch {
    std::vector<std::function<void()>>* tasks;
    std::size_t next = 0; ///< the next task to take
    std::size_t left = 0; ///< tasks not yet returned
    std::condition_variable done;
    std::exception_ptr failed; ///< the first exception a task threw
  };
  void run_one(batch& b, std::size_t i);
  void work();

  std::size_t most_;
  std::mutex m_; ///< guards what follows
  std::condition_variable wake_;
  std::deque<batch*> open_; ///< batches with tasks not yet taken, in turn
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

} // namespace cq::node
