// task_queue.h: the hand-off from any thread to a loop thread without a
// lock: an intrusive multi-producer single-consumer queue (Dmitry Vyukov's
// non-intrusive-MPSC design, as used by many actor runtimes). Push is one
// atomic exchange plus one store; Pop is consumer-only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_TASK_QUEUE_H_
#define RDMARPC_RUNTIME_TRANSPORT_TASK_QUEUE_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/any_invocable.h"

namespace rdmarpc {
namespace internal {

class TaskQueue {
 public:
  // A queue node. Push(fn) allocates one per task; an owner that hands
  // tasks over often keeps its own (inside a per-call object, say) and
  // pushes that, so the hand-off allocates nothing: it sets `fn` (small
  // enough for AnyInvocable's inline storage, two pointers) and pushes it
  // again only after the task has started to run. The task may destroy the
  // object that holds its node: the queue touches a node no more once it
  // took `fn` out of it.
  class Task {
   public:
    absl::AnyInvocable<void()> fn;

   private:
    friend class TaskQueue;
    std::atomic<Task*> next{nullptr};
    bool heap = false;  // made by Push(fn): the queue deletes it
  };

  TaskQueue() : head_(&stub_), tail_(&stub_) {}
  ~TaskQueue() {
    while (Node* n = PopNode()) Release(n);
  }
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Any thread.
  void Push(absl::AnyInvocable<void()> fn) {
    Node* n = new Node;
    n->heap = true;
    n->fn = std::move(fn);
    size_.fetch_add(1, std::memory_order_seq_cst);
    PushNode(n);
  }
  // Any thread: queues the caller's own node (see Task).
  void Push(Task* task) {
    size_.fetch_add(1, std::memory_order_seq_cst);
    PushNode(task);
  }
  // Tasks pushed and not yet popped (a push in progress counts).
  int64_t size() const { return size_.load(std::memory_order_seq_cst); }

  // Consumer thread only. Returns false when empty (or when a producer is
  // between its two steps; size() stays > 0 then, so the consumer retries).
  bool RunOne() {
    Node* n = PopNode();
    if (n == nullptr) return false;
    size_.fetch_sub(1, std::memory_order_seq_cst);
    absl::AnyInvocable<void()> fn = std::move(n->fn);
    if (n->heap) delete n;
    std::move(fn)();
    return true;
  }

 private:
  using Node = Task;

  // A task that never runs: its node freed, or its function (which may own
  // the node's holder) destroyed.
  static void Release(Node* n) {
    absl::AnyInvocable<void()> fn = std::move(n->fn);
    if (n->heap) delete n;
  }

  void PushNode(Node* n) {
    n->next.store(nullptr, std::memory_order_relaxed);
    Node* prev = head_.exchange(n, std::memory_order_acq_rel);
    prev->next.store(n, std::memory_order_release);
  }

  Node* PopNode() {
    Node* tail = tail_;
    Node* next = tail->next.load(std::memory_order_acquire);
    if (tail == &stub_) {
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;  // push in progress
    PushNode(&stub_);
    next = tail->next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    return nullptr;
  }

  std::atomic<Node*> head_;  // producers
  Node* tail_;               // consumer
  Node stub_;
  std::atomic<int64_t> size_{0};
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_TASK_QUEUE_H_
