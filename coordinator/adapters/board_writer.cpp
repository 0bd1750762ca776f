// The board file (cq-coordinator --board FILE, SPEC section 8) on the real
// disk. The api actor builds each snapshot (api/board.cpp) and hands its bytes
// to the function board_writer() returns, which only queues them: a thread of
// the writer's own replaces the file (a temporary file, fsync, rename), so no
// actor's thread ever waits for the disk, and a reader sees the old snapshot
// or the new one, never part of one. Snapshots that arrive while one is being
// written replace each other: only the newest is written next.
#include "adapters/files.hpp"
#include "coordinator.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace cq::coord {

namespace {

/// The writer thread and the one snapshot waiting for it. Destroying it
/// writes the snapshot still waiting, if any, then joins the thread.
class board_thread {
public:
  explicit board_thread(std::string path) : path_(std::move(path)), thread_([this] { run(); }) {}
  board_thread(const board_thread&) = delete;
  board_thread& operator=(const board_thread&) = delete;
  ~board_thread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  /// Queues `json` (replacing a snapshot not yet written); never blocks on the disk.
  void post(const std::string& json) {
    {
      std::lock_guard lock(mutex_);
      next_ = json + "\n";
    }
    wake_.notify_one();
  }

private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return next_ || stop_; });
      if (!next_)
        return; // stopped, nothing left to write
      auto data = std::move(*next_);
      next_.reset();
      lock.unlock();
      if (auto e = replace_file(path_, data); !e.empty())
        spdlog::warn("board: {}", e); // the next snapshot tries again
      lock.lock();
    }
  }

  const std::string path_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::string> next_; ///< the newest snapshot not yet written
  bool stop_ = false;
  std::thread thread_; ///< last: starts once the members above exist
};

} // namespace

std::function<void(const std::string&)> board_writer(std::string path) {
  auto writer = std::make_shared<board_thread>(std::move(path));
  return [writer](const std::string& json) { writer->post(json); };
}

} // namespace cq::coord
