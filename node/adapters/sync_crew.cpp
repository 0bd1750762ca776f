#include "node/adapters/sync_crew.hpp"

#include <algorithm>

namespace cq::node {

sync_crew::~sync_crew() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void sync_crew::run(std::vector<std::function<void()>>& tasks) {
  if (tasks.size() <= 1 || most_ == 0) {
    for (auto& t : tasks)
      t();
    return;
  }
  std::lock_guard one(run_m_);
  std::unique_lock lock(m_);
  // Helpers join as batches need them, and stay for the next.
  auto want = std::min(most_, tasks.size() - 1);
  while (threads_.size() < want)
    threads_.emplace_back([this] { work(); });
  batch_ = &tasks;
  next_ = 0;
  left_ = tasks.size();
  wake_.notify_all();
  while (next_ < tasks.size()) {
    auto i = next_++;
    lock.unlock();
    tasks[i]();
    lock.lock();
    --left_;
  }
  done_.wait(lock, [&] { return left_ == 0; });
  batch_ = nullptr;
}

void sync_crew::work() {
  std::unique_lock lock(m_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (batch_ && next_ < batch_->size()); });
    if (stop_)
      return;
    auto& task = (*batch_)[next_++];
    lock.unlock();
    task();
    lock.lock();
    if (--left_ == 0)
      done_.notify_one();
  }
}

} // namespace cq::node
