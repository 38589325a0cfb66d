// ring_queue.h: the double-ended queue softrdma keeps work requests in.
//
// A growable ring buffer with the part of std::deque's interface the send
// and receive queues use. Unlike std::deque, which allocates and frees a
// block every few elements as a queue moves, it allocates only when it grows
// past its largest size so far: a QP that posts and retires work requests
// in a steady state allocates nothing (a NIC's work queues are fixed rings
// too). Popped slots are reset to T() so that what they held (a frame's
// shared_ptr) is released at once. Not thread-safe; the owner's mutex
// guards it.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_RING_QUEUE_H_
#define RDMARPC_RUNTIME_SOFTRDMA_RING_QUEUE_H_

#include <cstddef>
#include <iterator>
#include <new>
#include <utility>
#include <vector>

namespace softrdma {
namespace internal {

template <typename T>
class RingQueue {
 public:
  template <typename Q, typename V>
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iterator(Q* q, size_t i) : q_(q), i_(i) {}
    V& operator*() const { return (*q_)[i_]; }
    V* operator->() const { return &(*q_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    Q* q_;
    size_t i_;
  };
  using iterator = Iterator<RingQueue, T>;
  using const_iterator = Iterator<const RingQueue, const T>;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  T& operator[](size_t i) { return slots_[Index(i)]; }
  const T& operator[](size_t i) const { return slots_[Index(i)]; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(T v) {
    GrowIfFull();
    slots_[Index(size_)] = std::move(v);
    ++size_;
  }
  void push_front(T v) {
    GrowIfFull();
    head_ = head_ == 0 ? slots_.size() - 1 : head_ - 1;
    slots_[head_] = std::move(v);
    ++size_;
  }
  void pop_front() {
    // Destroyed and made anew in place (no temporary to move from).
    slots_[head_].~T();
    new (&slots_[head_]) T();
    head_ = head_ + 1 == slots_.size() ? 0 : head_ + 1;
    --size_;
  }
  // Empties the queue; keeps its room.
  void clear() {
    while (size_ > 0) pop_front();
    head_ = 0;
  }

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, size_); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }

 private:
  size_t Index(size_t i) const {
    const size_t j = head_ + i;
    return j < slots_.size() ? j : j - slots_.size();
  }
  void GrowIfFull() {
    if (size_ < slots_.size()) return;
    std::vector<T> bigger(slots_.empty() ? 16 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_RING_QUEUE_H_
