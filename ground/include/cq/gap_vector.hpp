// A contiguous sequence that inserts and erases near either end cheaply.
#pragma once

#include "cq/growth.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace cq {

/// A vector whose unused room may also lie before its first element: an
/// insert or erase moves the shorter side of the sequence, as std::deque's
/// do, while the elements stay contiguous (a std::span of them). What a
/// queue in serving order needs: most jobs go last, and most starts take
/// them from near the front. A plain vector's erase there moves every
/// element after it (at 100,000 queued jobs, 800 KB per start).
template <class T>
class gap_vector {
public:
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  iterator begin() { return v_.begin() + static_cast<std::ptrdiff_t>(head_); }
  iterator end() { return v_.end(); }
  const_iterator begin() const { return v_.begin() + static_cast<std::ptrdiff_t>(head_); }
  const_iterator end() const { return v_.end(); }
  std::size_t size() const { return v_.size() - head_; }
  bool empty() const { return size() == 0; }
  const T& back() const { return v_.back(); }
  std::span<const T> span() const { return {v_.data() + head_, size()}; }
  operator std::span<const T>() const { return span(); }

  /// Room for one more element: the insert or push_back after it allocates
  /// nothing (and so cannot throw where T's moves cannot).
  void make_room() { cq::make_room(v_); }

  void push_back(T x) { v_.push_back(std::move(x)); }

  /// Inserts `x` before `at`; returns where it went.
  iterator insert(const_iterator at, T x) {
    auto i = static_cast<std::size_t>(at - begin());
    if (head_ > 0 && i < size() / 2) {
      auto first = begin();
      std::move(first, first + static_cast<std::ptrdiff_t>(i), first - 1);
      --head_;
      auto to = begin() + static_cast<std::ptrdiff_t>(i);
      *to = std::move(x);
      return to;
    }
    return v_.insert(at, std::move(x));
  }

  /// Erases the element at `at`; returns the position of the one after it.
  iterator erase(const_iterator at) {
    auto i = static_cast<std::size_t>(at - begin());
    if (i >= size() / 2)
      return v_.erase(at);
    auto first = begin();
    std::move_backward(first, first + static_cast<std::ptrdiff_t>(i),
                       first + static_cast<std::ptrdiff_t>(i) + 1);
    ++head_;
    // The room in front may grow to half the storage; then the elements
    // move down once (each erase pays for one element of that move).
    if (head_ >= 64 && head_ >= v_.size() / 2) {
      v_.erase(v_.begin(), begin());
      head_ = 0;
    }
    return begin() + static_cast<std::ptrdiff_t>(i);
  }

private:
  std::vector<T> v_;
  std::size_t head_ = 0; ///< unused elements before the first
};

} // namespace cq
