// handler_pool.h: the threads that run a server's synchronous handlers, so
// that no handler runs on a thread that polls a completion queue (a slow
// handler then delays only itself, never other calls of its worker).
//
// A FIFO of tasks under one mutex, and threads taking from it. It starts
// `min_threads` threads and adds one (up to `max_threads`) whenever a task
// is queued while every thread is busy, so blocking handlers do not wait for
// each other (as gRPC's synchronous server grows its thread pool); threads
// above the minimum exit after a while without work (kIdleExit). A thread that finds
// the queue empty spins for a short while before it sleeps on the condition
// variable: a wake-up costs tens of microseconds on these VMs, and under
// load the next task usually arrives within that window.
//
// Threads: Submit from any thread; Stop from any thread but a pool thread.
#ifndef RDMARPC_RUNTIME_RPC_HANDLER_POOL_H_
#define RDMARPC_RUNTIME_RPC_HANDLER_POOL_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

class HandlerPool {
 public:
  // Threads above the minimum exit after this long without work (default).
  static constexpr absl::Duration kIdleExit = absl::Seconds(10);

  // Starts `min_threads` (>= 1) threads named `name`-N; grows to at most
  // `max_threads` (>= min_threads). A thread that ran out of work spins up to
  // `spin` before sleeping; threads above the minimum exit after
  // `idle_exit` without work.
  HandlerPool(int min_threads, int max_threads, const std::string& name, absl::Duration spin,
              absl::Duration idle_exit = kIdleExit);
  ~HandlerPool();  // Stop()
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `task`; the first free thread runs it.
  void Submit(absl::AnyInvocable<void() &&> task);
  // Removes the tasks no thread has taken yet and returns them, in order
  // (the caller runs or drops them).
  std::vector<absl::AnyInvocable<void() &&>> TakeQueued();
  // Runs the tasks still queued, then joins the threads. Idempotent.
  void Stop();
  // Threads now (started and not exited).
  int threads() const;

 private:
  void StartThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(bool extra);
  // False when the thread should exit (stopping, or an idle extra thread).
  bool TakeTask(absl::AnyInvocable<void() &&>* task, bool extra);

  const int min_threads_;
  const int max_threads_;
  const std::string name_;
  const absl::Duration spin_;
  const absl::Duration idle_exit_;
  absl::Mutex mu_;
  // Tasks queued: queue_[queue_head_ ..]. A vector rather than a deque,
  // which allocates a block every few tasks as the queue moves: this one
  // keeps its room, so a steady stream of calls allocates nothing.
  bool QueueEmptyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_head_ == queue_.size();
  }
  absl::AnyInvocable<void() &&> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  size_t queue_head_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads in TakeTask (spinning or asleep)
  int live_ ABSL_GUARDED_BY(mu_) = 0;  // threads started and not exited
  int named_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar work_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);  // exited, not joined
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_HANDLER_POOL_H_
