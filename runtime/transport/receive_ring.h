// receive_ring.h: one connection's receive ring — a registered slab of
// receive buffers, all posted at set-up, and the re-posting of consumed
// ones in batches.
//
// Every receive WR carries kWrIdTag | buffer index as its wr_id (send WRs
// carry a sequence number below 2^63, send_queue.h), so a completion is told
// apart and its buffer found without a lookup. Consumed buffers are held
// back (Consumed) until RepostBatchFor(depth) of them are pending, or until
// the loop goes idle (RequestIdleRepost), and go back in one chained
// ibv_post_recv (PostPending); only then are they credits owed to the peer
// (transport.h: why holding them back cannot deadlock). A server's
// connections may instead share their worker's SRQ (shared_receive_queue.h).
//
// Threads: the owning connection's loop (poller holder) only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_RECEIVE_RING_H_
#define RDMARPC_RUNTIME_TRANSPORT_RECEIVE_RING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

class ReceiveRing {
 public:
  // Marks a receive's wr_id; the low bits are its buffer index.
  static constexpr uint64_t kWrIdTag = uint64_t{1} << 63;
  static bool IsReceive(uint64_t wr_id) { return (wr_id & kWrIdTag) != 0; }
  static int BufferIndex(uint64_t wr_id) { return static_cast<int>(wr_id & ~kWrIdTag); }

  ReceiveRing() = default;
  ReceiveRing(const ReceiveRing&) = delete;
  ReceiveRing& operator=(const ReceiveRing&) = delete;

  // Registers `depth` buffers of `buffer_bytes` (local write access).
  absl::Status Create(ibv_pd* pd, int depth, size_t buffer_bytes);
  // The engine whose counters this ring's posts count in (engine_stats.h);
  // set before the first post. Outlives the ring.
  void set_stats(EngineStats* stats) { stats_ = stats; }
  // Posts every buffer (set-up): one chained ibv_post_recv.
  absl::Status PostAll(ibv_qp* qp);

  // A receive completed, with any status: it is no longer posted.
  void OnCompleted() { --posted_; }
  // The bytes a successful receive into buffer `index` delivered.
  absl::string_view data(int index, size_t byte_len) const {
    return absl::string_view(slab_->data(index), byte_len);
  }
  // Buffer `index` was consumed: it waits for the next re-post batch.
  void Consumed(int index) { to_repost_.push_back(index); }
  // True when the consumed buffers should go back now: a whole batch is
  // pending, or RequestIdleRepost asked for it.
  bool RepostDue() const {
    return !to_repost_.empty() &&
           (static_cast<int>(to_repost_.size()) >= repost_batch_ || force_repost_);
  }
  // Going idle: re-post what is held back at the next RepostDue check.
  // Returns true when anything was held back.
  bool RequestIdleRepost() {
    force_repost_ = !to_repost_.empty();
    return force_repost_;
  }
  // Posts every pending buffer with one chained ibv_post_recv (no allocation:
  // scratch sized at Create). Returns the number posted, or the error of
  // ibv_post_recv (the pending list is dropped either way: the QP is then
  // unusable).
  absl::StatusOr<int> PostPending(ibv_qp* qp);

  int posted() const { return posted_; }
  int pending() const { return static_cast<int>(to_repost_.size()); }
  int repost_batch() const { return repost_batch_; }
  int depth() const { return slab_ != nullptr ? slab_->count() : 0; }
  // Frees the slab (after the QP is destroyed).
  void Release() { slab_.reset(); }

 private:
  std::unique_ptr<BufferSlab> slab_;
  int posted_ = 0;
  std::vector<int> to_repost_;  // consumed, waiting for a batch
  int repost_batch_ = 1;
  bool force_repost_ = false;
  std::vector<ibv_recv_wr> wrs_;  // scratch for PostPending, depth long
  std::vector<ibv_sge> sges_;
  EngineStats* stats_ = nullptr;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_RECEIVE_RING_H_
