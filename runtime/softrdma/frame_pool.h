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
// built fresh, and so is a frame when kMaxTries pooled ones were all still
// held (frames retire in about the order they were handed out, so the
// oldest is nearly always free).
//
// One pool per thread (ForThisThread), shared by every QP the thread posts
// or answers on: with thousands of QPs each message on a different one, a
// pool per QP made every frame, its vector and its control block cold
// cache lines (FramePool::Get was 5.9 % of a conn_scale server's cycles at
// 10,000 connections), where a thread's pool stays in its cache. A frame
// may outlive its pool's thread: the WQE or the link holding it owns it.
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
  // The calling thread's pool. Not thread-safe itself: only its thread uses
  // it.
  static FramePool& ForThisThread() {
    thread_local FramePool pool;
    return pool;
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
