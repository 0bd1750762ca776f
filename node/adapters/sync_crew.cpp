#include "node/adapters/sync_crew.hpp"

#include <algorithm>
#include <system_error>

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

void sync_crew::run_one(batch& b, std::size_t i) {
  try {
    (*b.tasks)[i]();
  } catch (...) {
    std::lock_guard lock(m_);
    if (!b.failed)
      b.failed = std::current_exception();
  }
}

void sync_crew::run(std::vector<std::function<void()>>& tasks) {
  if (tasks.size() <= 1 || most_ == 0) {
    for (auto& t : tasks)
      t();
    return;
  }
  batch b;
  b.tasks = &tasks;
  b.left = tasks.size();
  std::unique_lock lock(m_);
  // Helpers join as batches need them, and stay for the next. One that
  // cannot be started (a limit on processes) leaves the work to those there
  // are, or to the caller alone.
  auto want = std::min(most_, tasks.size() - 1);
  try {
    while (threads_.size() < want)
      threads_.emplace_back([this] { work(); });
  } catch (const std::system_error&) {
  }
  open_.push_back(&b);
  wake_.notify_all();
  // The caller works on its own batch; the helpers take what it leaves.
  while (b.next < tasks.size()) {
    auto i = b.next++;
    if (b.next == tasks.size())
      open_.erase(std::find(open_.begin(), open_.end(), &b));
    lock.unlock();
    run_one(b, i);
    lock.lock();
    --b.left;
  }
  b.done.wait(lock, [&] { return b.left == 0; });
  if (b.failed)
    std::rethrow_exception(b.failed);
}

void sync_crew::work() {
  std::unique_lock lock(m_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !open_.empty(); });
    if (stop_)
      return;
    // Batches in turn, a task of each: a start's five syncs are not queued
    // behind a burst of exit records.
    auto* b = open_.front();
    open_.pop_front();
    auto i = b->next++;
    if (b->next < b->tasks->size())
      open_.push_back(b);
    lock.unlock();
    run_one(*b, i);
    lock.lock();
    if (--b->left == 0)
      b->done.notify_one();
  }
}

} // namespace cq::node
