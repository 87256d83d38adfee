#pragma once
// The requests waiting for a sequence slot: first come, first served, at most `capacity` of
// them (a request past that is answered 429 at once instead of waiting without bound).
#include <condition_variable>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

namespace eaglevk::cli::serve {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // False when the queue is full or closed.
  bool push(std::shared_ptr<T> item) {
    {
      std::lock_guard lock(mutex_);
      if (closed_ || items_.size() >= capacity_) return false;
      items_.push_back(std::move(item));
    }
    changed_.notify_all();
    return true;
  }
  std::shared_ptr<T> front() const {
    std::lock_guard lock(mutex_);
    return items_.empty() ? nullptr : items_.front();
  }
  // Removes the front item when it is still `item` (the single consumer looked at it first).
  void pop(const std::shared_ptr<T>& item) {
    std::lock_guard lock(mutex_);
    if (!items_.empty() && items_.front() == item) items_.pop_front();
  }
  // Everything waiting, for a queue that closes.
  std::deque<std::shared_ptr<T>> close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    changed_.notify_all();
    return std::exchange(items_, {});
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  // Until an item is there, the queue closes or `timeout` passes.
  void wait(std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return closed_ || !items_.empty(); });
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::shared_ptr<T>> items_;
  bool closed_ = false;
};

}  // namespace eaglevk::cli::serve
