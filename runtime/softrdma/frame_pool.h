// frame_pool.h: the frames QPs build for their send queues, reused.
//
// A send WQE keeps its frame (header and payload) until it retires, for RNR
// retransmission, and the link may hold it a while longer (a shared-memory
// ring's backlog, a socket's write queue). Building a new one per WR costs
// two heap allocations; a pool hands out a frame nobody else holds any more
// (use_count() == 1), so a thread posting in a steady state allocates no
// frame. Frames of up to kMaxPooledPayload bytes are pooled, at most
// kMaxPooledFrames of them (the most the pool has had out at once, up to
// that), so a pool keeps at most about 1 MiB of them; larger or further ones are
// built fresh, and so is a frame when kMaxTries pooled ones in a row were
// all still held (the search goes round from where the last one ended, and
// most frames retire within microseconds, so one of the next few is nearly
// always free; a thread whose QPs hold many frames for long pays a few
// cold probes and an allocation per post).
//
// One pool per thread (ForThisThread), shared by every QP the thread posts
// or answers on: with thousands of QPs each message on a different one, a
// pool per QP would make every frame, its vector and its control block cold
// cache lines (measured: FramePool::Get 5.6-5.9 % of a conn_scale server's
// cycles at 10,000 connections, bench/README.md), where a thread's pool
// stays in its cache. A frame may outlive its pool's thread: the WQE or the
// link holding it owns it.
#ifndef RDMARPC_RUNTIME_SOFTRDMA_FRAME_POOL_H_
#define RDMARPC_RUNTIME_SOFTRDMA_FRAME_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "softrdma/wire.h"

namespace softrdma {
namespace internal {

class FramePool {
 public:
  // The calling thread's pool, made on first use and freed when the thread
  // exits. Not thread-safe itself: only its thread uses it. nullptr once
  // the thread's thread_local destructors freed it: a destructor that posts
  // a send after that (a per-thread connection saying goodbye) gets a
  // fresh frame from Take instead.
  static FramePool* ForThisThread();
  // A frame from the calling thread's pool, or built fresh when the pool is
  // gone (above).
  static std::shared_ptr<std::vector<uint8_t>> Take(FrameHeader h, uint32_t payload_len) {
    FramePool* pool = ForThisThread();
    return pool != nullptr ? pool->Get(h, payload_len) : NewFrame(h, payload_len);
  }

  // Small messages and control frames; a same-host frame larger than this
  // (up to kShmInlineMax) is built fresh.
  static constexpr uint32_t kMaxPooledPayload = 4096;
  static constexpr size_t kMaxPooledFrames = 256;
  static constexpr size_t kMaxTries = 8;

  // A frame with header `h` (its length set to `payload_len`) and
  // `payload_len` bytes of room after it, as NewFrame builds.
  std::shared_ptr<std::vector<uint8_t>> Get(FrameHeader h, uint32_t payload_len) {
    if (payload_len > kMaxPooledPayload) return NewFrame(h, payload_len);
    for (size_t tries = 0; tries < std::min(frames_.size(), kMaxTries); ++tries) {
      std::shared_ptr<std::vector<uint8_t>>& f = frames_[next_];
      next_ = next_ + 1 == frames_.size() ? 0 : next_ + 1;
      if (f.use_count() != 1) continue;
      // The last other holder released it (with release order); see its
      // writes and reads before we reuse the bytes.
      std::atomic_thread_fence(std::memory_order_acquire);
      h.length = payload_len;
      f->resize(kHeaderSize + payload_len);
      EncodeHeader(h, f->data());
      return f;
    }
    std::shared_ptr<std::vector<uint8_t>> f = NewFrame(h, payload_len);
    if (frames_.size() < kMaxPooledFrames) {
      f->reserve(kHeaderSize + 256);  // room for a small message's frame later
      frames_.push_back(f);
    }
    return f;
  }

 private:
  std::vector<std::shared_ptr<std::vector<uint8_t>>> frames_;
  size_t next_ = 0;  // where the next search starts (frames retire in order)
};

}  // namespace internal
}  // namespace softrdma

#endif  // RDMARPC_RUNTIME_SOFTRDMA_FRAME_POOL_H_
