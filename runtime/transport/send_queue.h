// send_queue.h: one QP's send queue — the ring of work requests posted and
// not yet retired, selective signalling, and the batch of WRs waiting for
// the doorbell.
//
// Every send-type WR (SEND_WITH_IMM, RDMA READ, RDMA WRITE[_WITH_IMM]) gets
// the next sequence number as its wr_id. Sends are signalled one in
// kSignalInterval (and always when the caller forces it: READs and WRITEs
// whose buffers must come back, markers); an RC QP completes its WRs in
// order, so one signalled completion retires every WR up to it
// (RetireThrough), and the eager send buffers and large buffers those WRs
// used go back then. WRs made ready together are queued (PostWr) and posted
// as one chain with one ibv_post_send (Doorbell).
//
// The queue owns the eager send buffers (kSendQueueDepth at most, one per WR)
// so that recycling a buffer is part of retiring its WR. They are registered
// in chunks as the connection needs them: kFirstSendChunk at set-up, then
// doubling (4, 4, 8, 16, 32, 64, 128) each time a send needs one and none
// is free, so an idle connection holds 4 (32 KiB at the default 8 KiB) and
// one that keeps many messages in flight grows to kSendQueueDepth once (a
// registration at a new high-water mark, never again). A busy connection
// with a message or two in flight grows to kSignalEvery (16), so that one
// WR in 16 is signalled; on a lean queue (set_lean: its loop holds many
// connections, where 16 buffers each would be most of the process's
// registered memory) a WR posted while half or fewer of the registered
// buffers are free is signalled instead, so such a connection keeps its
// first 4 at the price of more signalled completions. What else
// a WR holds (SqEntry) is its poster's: it is handed back when the WR is
// retired, undone or dropped, and the poster frees it.
//
// Threads: the owning connection's loop (poller holder) only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_SEND_QUEUE_H_
#define RDMARPC_RUNTIME_TRANSPORT_SEND_QUEUE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/transport/transport.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

// What a posted WR holds until it is retired.
struct SqEntry {
  int send_buffer = -1;  // an eager send buffer of the queue's slab
  // A piece of the poster's rendezvous transfer `bulk_id` (0: none), a
  // READ (pull) or a WRITE (push): the poster counts it ended.
  uint64_t bulk_id = 0;
  bool bulk_read = false;
  // A LOCAL_INV of `window` (bound with `window_rkey` on `window_buffer`):
  // the poster's ExposureTable recycles the window and lets the pool reuse
  // the buffer once the WR retired (exposure_table.h).
  ibv_mw* window = nullptr;
  uint32_t window_rkey = 0;
  LargeBuffer* window_buffer = nullptr;
};

class SendQueue {
 public:
  static constexpr int kDepth = kSendQueueDepth;
  static constexpr int kSignalEvery = kSignalInterval;
  // An unsignalled run must leave room for the signalled WR that retires it,
  // and a full run of unsignalled WRs must never fill the ring.
  static_assert(kDepth >= 2 * kSignalEvery,
                "send queue depth must be at least twice the signalling interval");
  static_assert(kSignalEvery >= 1, "signal at least every WR");

  SendQueue() : ring_(kDepth) {}
  ~SendQueue() { DropSendSlab(); }
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Send buffers registered at set-up (a power of two). Small, because an
  // idle connection keeps them: with thousands of connections per server
  // they are most of its memory per connection (WORKSPACE.notes, "Memory
  // per connection").
  static constexpr int kFirstSendChunk = 4;
  static_assert((kFirstSendChunk & (kFirstSendChunk - 1)) == 0 && kDepth % kFirstSendChunk == 0);

  // Registers the first chunk of eager send buffers of `buffer_bytes` on
  // `pd` (later chunks go on the same PD). RESOURCE_EXHAUSTED when the
  // registration fails for lack of memory.
  absl::Status CreateSendSlab(ibv_pd* pd, size_t buffer_bytes);
  // The QP the doorbell posts to; nullptr once it is destroyed (queued WRs
  // are then dropped by Doorbell).
  void set_qp(ibv_qp* qp) { qp_ = qp; }
  // The engine whose counters this queue's posts and buffers count in
  // (engine_stats.h); set before the first post. Outlives the queue.
  void set_stats(EngineStats* stats) { stats_ = stats; }
  // While *lean is true (read at every post; the loop's flag, which
  // outlives the queue), the queue signals to keep its first chunk rather
  // than grow (above). nullptr: never lean.
  void set_lean(const bool* lean) { lean_ = lean; }
  bool lean() const { return lean_ != nullptr && *lean_; }

  // True while a WR may still be queued (the ring is not full).
  bool has_room() const { return head_ - tail_ < static_cast<uint64_t>(kDepth); }
  // WRs that may still be queued.
  int room() const { return kDepth - static_cast<int>(head_ - tail_); }
  // True when every WR posted was retired.
  bool empty() const { return head_ == tail_; }
  // The sequence number the next PostWr gives.
  uint64_t next_seq() const { return head_; }
  // True once the WR `seq` was retired (a later signalled completion covered it).
  bool retired(uint64_t seq) const { return tail_ > seq; }
  // True for a WR posted and not yet retired.
  bool outstanding(uint64_t seq) const { return seq >= tail_ && seq < head_; }
  // Eager send buffers: whether a send may take one now (with none free,
  // registers the next chunk unless kDepth are registered or a registration
  // failed before), taking one (-1 when none is free), and where buffer
  // `index` lies.
  bool has_send_buffer() { return !free_buffers_.empty() || GrowSendBuffers(); }
  int TakeSendBuffer();
  char* send_buffer(int index) const {
    const int c = ChunkOf(index);
    return chunks_[c]->data(index - ChunkStart(c));
  }
  uint32_t send_lkey(int index) const { return chunks_[ChunkOf(index)]->lkey(); }
  // Buffers registered, free now, and that may still be taken (free plus
  // not registered yet).
  int send_buffer_capacity() const { return capacity_; }
  int free_send_buffers() const { return static_cast<int>(free_buffers_.size()); }
  int send_buffers_left() const {
    return chunks_.empty() ? 0 : free_send_buffers() + (kDepth - capacity_);
  }
  // The entry of WR `seq` (outstanding(seq)); the poster may change what
  // it holds (e.g. take a resource it already handled).
  SqEntry& entry(uint64_t seq) { return ring_[seq % kDepth]; }
  // WRs since the last signalled one (never reaches kSignalEvery).
  int unsignalled_run() const { return unsignalled_run_; }
  size_t batched() const { return batch_.size(); }

  // Queues one WR (one SGE at most) for the next doorbell: gives it the next
  // sequence number as wr_id, and IBV_SEND_SIGNALED when `force_signal`,
  // when kSignalEvery WRs ran unsignalled, or when send buffers run low, so
  // a completion soon recycles them: fewer than kSignalEvery left to take
  // (send_buffers_left), or, when lean(), half or fewer of the registered
  // ones free. Caller checks has_room(). Returns the sequence number.
  uint64_t PostWr(ibv_send_wr* wr, SqEntry entry, bool force_signal);
  // Posts every queued WR as one chain (one ibv_post_send). Returns 0, or the
  // error of ibv_post_send: the WRs from the failed one on never entered the
  // QP; their accounting is undone (send buffers back) and
  // `unposted(seq, entry)` is called for each, newest first, before this
  // returns.
  int Doorbell(absl::FunctionRef<void(uint64_t seq, const SqEntry& entry)> unposted);
  // A signalled completion of WR `seq`: retires it and every WR before it,
  // oldest first — its send buffer goes back to the slab, then
  // `retired(entry)` gets what else it held. No-op for a sequence number not
  // outstanding. Inline, with the callback a template: this runs for every
  // message sent.
  template <class Fn>
  void RetireThrough(uint64_t seq, Fn&& retired) {
    if (!outstanding(seq)) return;
    // In-order SQ completion: this one retires every WR up to it.
    for (; tail_ <= seq; ++tail_) {
      SqEntry& e = ring_[tail_ % kDepth];
      if (e.send_buffer >= 0 && !chunks_.empty()) PutSendBuffer(e.send_buffer);
      const SqEntry done = e;
      e = SqEntry{};
      retired(done);
    }
  }
  // Posts a signalled zero-length SEND at once, outside the batch (the queue
  // is drained first): on a QP in ERROR its flush retires every WR before
  // it, as the Linux kernel's ib_drain_sq does. False when nothing is
  // outstanding, there is no room, or the post failed.
  bool PostDrainMarker();
  // The QP is gone: drops queued WRs, hands every entry of an unretired WR
  // to `dropped`, and frees the send slab.
  template <class Fn>
  void Release(Fn&& dropped) {
    batch_.clear();
    qp_ = nullptr;
    for (SqEntry& e : ring_) {
      const SqEntry held = e;
      if (held.send_buffer >= 0 && !chunks_.empty()) PutSendBuffer(held.send_buffer);
      e = SqEntry{};
      dropped(held);
    }
    DropSendSlab();
  }

 private:
  void PutSendBuffer(int index) {
    free_buffers_.push_back(index);
    if (stats_ != nullptr) stats_->send_buffers_returned.Add();
  }
  // Chunk c holds buffers [ChunkStart(c), ChunkStart(c + 1)): chunk 0 and
  // chunk 1 kFirstSendChunk each, every later one as many as before it.
  static int ChunkOf(int index) {
    const unsigned q = static_cast<unsigned>(index) / kFirstSendChunk;
    return q == 0 ? 0 : 32 - __builtin_clz(q);
  }
  static int ChunkStart(int chunk) {
    return chunk == 0 ? 0 : kFirstSendChunk << (chunk - 1);
  }
  // Registers the next chunk; false when kDepth are registered or it fails.
  bool GrowSendBuffers();
  // Frees every chunk, taking its buffers out of the engine's capacity gauge.
  void DropSendSlab();

  struct PendingWr {
    ibv_send_wr wr;
    ibv_sge sge;
  };
  std::vector<SqEntry> ring_;
  uint64_t head_ = 0;        // next sequence number
  uint64_t tail_ = 0;        // oldest not retired
  int unsignalled_run_ = 0;  // WRs since the last signalled one
  std::vector<PendingWr> batch_;  // WRs waiting for the doorbell
  std::vector<std::unique_ptr<BufferSlab>> chunks_;
  std::vector<int> free_buffers_;  // indexes, any chunk
  int capacity_ = 0;               // buffers registered
  ibv_pd* pd_ = nullptr;
  size_t buffer_bytes_ = 0;
  bool grow_failed_ = false;  // a chunk's registration failed: no more tries
  ibv_qp* qp_ = nullptr;
  EngineStats* stats_ = nullptr;
  const bool* lean_ = nullptr;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SEND_QUEUE_H_
