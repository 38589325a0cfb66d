// handler_pool.cc: see handler_pool.h.
#include "runtime/rpc/handler_pool.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/transport/spin_pause.h"

namespace rdmarpc {
namespace internal {

HandlerPool::HandlerPool(int min_threads, int max_threads, const std::string& name,
                         absl::Duration spin, absl::Duration idle_exit)
    : min_threads_(min_threads),
      max_threads_(max_threads),
      name_(name),
      spin_(spin),
      idle_exit_(idle_exit) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < min_threads_; ++i) StartThread();
}

HandlerPool::~HandlerPool() { Stop(); }

void HandlerPool::StartThread() {
  // Threads that left have released the mutex for good: joining is quick.
  for (std::thread& t : finished_) t.join();
  finished_.clear();
  const bool extra = live_ >= min_threads_;
  ++live_;
  ++idle_;  // until it takes its first task
  threads_.emplace_back([this, extra] { Run(extra); });
  // Linux limits thread names to 15 bytes.
  pthread_setname_np(threads_.back().native_handle(),
                     absl::StrCat(name_, "-", named_++).substr(0, 15).c_str());
}

int HandlerPool::threads() const {
  absl::MutexLock lock(const_cast<absl::Mutex*>(&mu_));
  return live_;
}

void HandlerPool::Submit(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  if (sleepers_ > 0) work_.Signal();
  // More tasks queued than idle threads to take them: every thread is busy,
  // and a blocking handler must not wait for another.
  if (static_cast<int>(queue_.size() - queue_head_) > idle_ && live_ < max_threads_ &&
      !stopping_) {
    StartThread();
  }
}

std::vector<absl::AnyInvocable<void() &&>> HandlerPool::TakeQueued() {
  absl::MutexLock lock(&mu_);
  std::vector<absl::AnyInvocable<void() &&>> taken;
  while (!QueueEmptyLocked()) taken.push_back(PopLocked());
  return taken;
}

absl::AnyInvocable<void() &&> HandlerPool::PopLocked() {
  absl::AnyInvocable<void() &&> task = std::move(queue_[queue_head_++]);
  if (queue_head_ == queue_.size()) {
    queue_.clear();  // keeps the room
    queue_head_ = 0;
  } else if (queue_head_ >= 64 && queue_head_ * 2 >= queue_.size()) {
    // The queue rarely drains: compact it, moving what is left to the front.
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(queue_head_));
    queue_head_ = 0;
  }
  return task;
}

void HandlerPool::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    work_.SignalAll();
    threads.swap(threads_);
    for (std::thread& t : finished_) threads.push_back(std::move(t));
    finished_.clear();
  }
  for (std::thread& t : threads) t.join();
}

bool HandlerPool::TakeTask(absl::AnyInvocable<void() &&>* task, bool extra) {
  // Spin first (each look takes the mutex briefly), then sleep.
  const absl::Time spin_until = absl::Now() + spin_;
  SpinPause pause(16);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!QueueEmptyLocked()) {
        *task = PopLocked();
        --idle_;
        return true;
      }
      if (stopping_) return false;
      if (absl::Now() >= spin_until) {
        ++sleepers_;
        const absl::Time give_up = absl::Now() + idle_exit_;
        while (QueueEmptyLocked() && !stopping_) {
          if (!extra) {
            work_.Wait(&mu_);  // the minimum threads stay, however long idle
          } else if (work_.WaitWithDeadline(&mu_, give_up) && QueueEmptyLocked()) {
            --sleepers_;
            return false;  // an extra thread idle for idle_exit_
          }
        }
        --sleepers_;
        if (!QueueEmptyLocked()) {
          *task = PopLocked();
          --idle_;
          return true;
        }
        return false;
      }
    }
    pause.Pause();
  }
}

void HandlerPool::Run(bool extra) {
  absl::AnyInvocable<void() &&> task;
  while (TakeTask(&task, extra)) {
    std::move(task)();
    task = nullptr;
    absl::MutexLock lock(&mu_);
    ++idle_;
  }
  absl::MutexLock lock(&mu_);
  --idle_;
  --live_;
  if (!stopping_) {
    // An idle extra thread leaves: the next StartThread (or Stop) joins it.
    for (auto it = threads_.begin(); it != threads_.end(); ++it) {
      if (it->get_id() == std::this_thread::get_id()) {
        finished_.push_back(std::move(*it));
        threads_.erase(it);
        break;
      }
    }
  }
}

}  // namespace internal
}  // namespace rdmarpc
