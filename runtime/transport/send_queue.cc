// send_queue.cc: SendQueue (see send_queue.h).
#include "runtime/transport/send_queue.h"


namespace rdmarpc {
namespace internal {

absl::Status SendQueue::CreateSendSlab(ibv_pd* pd, size_t buffer_bytes) {
  absl::StatusOr<std::unique_ptr<BufferSlab>> slab =
      BufferSlab::Create(pd, kFirstSendChunk, buffer_bytes, kLocalAccess);
  if (!slab.ok()) return slab.status();
  DropSendSlab();
  pd_ = pd;
  buffer_bytes_ = buffer_bytes;
  grow_failed_ = false;
  chunks_.push_back(std::move(*slab));
  capacity_ = kFirstSendChunk;
  free_buffers_.reserve(kDepth);
  for (int i = kFirstSendChunk - 1; i >= 0; --i) free_buffers_.push_back(i);
  if (stats_ != nullptr) stats_->send_buffers_capacity.Add(kFirstSendChunk);
  return absl::OkStatus();
}

bool SendQueue::GrowSendBuffers() {
  if (capacity_ >= kDepth || grow_failed_ || pd_ == nullptr) return false;
  const int n = static_cast<int>(chunks_.size()) == 1 ? kFirstSendChunk : capacity_;
  absl::StatusOr<std::unique_ptr<BufferSlab>> slab =
      BufferSlab::Create(pd_, n, buffer_bytes_, kLocalAccess);
  if (!slab.ok()) {
    // Sends go on with the buffers there are (a message waits for one).
    grow_failed_ = true;
    return false;
  }
  chunks_.push_back(std::move(*slab));
  for (int i = capacity_ + n - 1; i >= capacity_; --i) free_buffers_.push_back(i);
  capacity_ += n;
  if (stats_ != nullptr) stats_->send_buffers_capacity.Add(n);
  return true;
}

int SendQueue::TakeSendBuffer() {
  if (free_buffers_.empty()) return -1;
  const int index = free_buffers_.back();
  free_buffers_.pop_back();
  return index;
}

void SendQueue::DropSendSlab() {
  if (chunks_.empty()) return;
  if (stats_ != nullptr) {
    // Buffers still out (the QP was destroyed with them posted) go with it.
    const int out = capacity_ - free_send_buffers();
    stats_->send_buffers_returned.Add(out);
    stats_->send_buffers_capacity.Add(-capacity_);
  }
  chunks_.clear();
  free_buffers_.clear();
  capacity_ = 0;
  pd_ = nullptr;  // no chunk is registered after Release
}

namespace {
WrOpcode CountedOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND: return WrOpcode::kSend;
    case IBV_WR_SEND_WITH_IMM: return WrOpcode::kSendWithImm;
    case IBV_WR_RDMA_WRITE: return WrOpcode::kRdmaWrite;
    case IBV_WR_RDMA_WRITE_WITH_IMM: return WrOpcode::kRdmaWriteWithImm;
    case IBV_WR_RDMA_READ: return WrOpcode::kRdmaRead;
    case IBV_WR_BIND_MW: return WrOpcode::kBindMw;
    case IBV_WR_LOCAL_INV: return WrOpcode::kLocalInv;
    default: return WrOpcode::kSend;  // the transport posts no other opcode
  }
}
}  // namespace

uint64_t SendQueue::PostWr(ibv_send_wr* wr, SqEntry entry, bool force_signal) {
  const uint64_t seq = head_++;
  // Signal every kSignalInterval-th WR (15 unsignalled, then one signalled)
  // so buffers of the unsignalled ones before it are recycled by its
  // completion, and when send buffers run low: fewer than kSignalEvery
  // left to take (free or not registered yet), or, on a lean queue, half
  // or fewer of the registered ones free, so they come back before a send
  // must register another chunk.
  const bool low = !chunks_.empty() && (lean() ? 2 * free_send_buffers() <= capacity_
                                               : send_buffers_left() < kSignalEvery);
  if (force_signal || ++unsignalled_run_ >= kSignalEvery || low) {
    wr->send_flags |= IBV_SEND_SIGNALED;
    unsignalled_run_ = 0;
  }
  wr->wr_id = seq;
  if (stats_ != nullptr) {
    const WrOpcode op = CountedOpcode(wr->opcode);
    stats_->wrs_posted[static_cast<int>(op)].Add();
    // Window binds and invalidations are not sends (TransportStats).
    const bool send = op != WrOpcode::kBindMw && op != WrOpcode::kLocalInv;
    if (send && (wr->send_flags & IBV_SEND_SIGNALED)) stats_->signalled_send_wrs.Add();
    if (wr->send_flags & IBV_SEND_INLINE) stats_->inline_send_wrs.Add();
    if (entry.send_buffer >= 0) stats_->send_buffers_taken.Add();
  }
  ring_[seq % kDepth] = entry;
  // Queued for the next doorbell: WRs made ready together go to the device
  // in one ibv_post_send chain.
  PendingWr p;
  p.wr = *wr;
  p.sge = wr->sg_list != nullptr ? *wr->sg_list : ibv_sge{};
  p.wr.next = nullptr;
  batch_.push_back(p);
  return seq;
}

int SendQueue::Doorbell(absl::FunctionRef<void(uint64_t seq, const SqEntry& entry)> unposted) {
  if (batch_.empty()) return 0;
  if (qp_ == nullptr) {  // destroyed meanwhile: nothing can be posted any more
    batch_.clear();
    return 0;
  }
  const size_t n = batch_.size();
  for (size_t i = 0; i < n; ++i) {
    batch_[i].wr.sg_list = &batch_[i].sge;
    batch_[i].wr.next = i + 1 < n ? &batch_[i + 1].wr : nullptr;
  }
  // Counted before the post, as the WRs are in PostWr: once posted, the
  // peer may answer (and a reader of the stats see that answer) before this
  // thread runs on, and the figures must never show a WR without its
  // doorbell.
  if (stats_ != nullptr) stats_->send_doorbells.Add();
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &batch_[0].wr, &bad);
  if (rc != 0) {
    // WRs from `bad` on never entered the queue: undo their accounting.
    size_t first_bad = 0;
    while (first_bad < n && &batch_[first_bad].wr != bad) ++first_bad;
    for (size_t i = n; i > first_bad; --i) {
      const uint64_t seq = --head_;
      SqEntry& e = ring_[seq % kDepth];
      if (stats_ != nullptr) {
        const ibv_send_wr& wr = batch_[i - 1].wr;
        const WrOpcode op = CountedOpcode(wr.opcode);
        stats_->wrs_posted[static_cast<int>(op)].Add(-1);
        const bool send = op != WrOpcode::kBindMw && op != WrOpcode::kLocalInv;
        if (send && (wr.send_flags & IBV_SEND_SIGNALED)) stats_->signalled_send_wrs.Add(-1);
        if (wr.send_flags & IBV_SEND_INLINE) stats_->inline_send_wrs.Add(-1);
      }
      if (e.send_buffer >= 0 && !chunks_.empty()) PutSendBuffer(e.send_buffer);
      const SqEntry undone = e;
      e = SqEntry{};
      unposted(seq, undone);
    }
  }
  batch_.clear();
  return rc;
}

bool SendQueue::PostDrainMarker() {
  if (qp_ == nullptr || empty() || !has_room()) return false;
  const uint64_t seq = head_;
  ibv_send_wr wr{};
  wr.wr_id = seq;
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 0;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (stats_ != nullptr) {  // before the post, as in Doorbell
    stats_->send_doorbells.Add();
    stats_->wrs_posted[static_cast<int>(WrOpcode::kSend)].Add();
    stats_->signalled_send_wrs.Add();
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp_, &wr, &bad);
  if (rc != 0) {
    if (stats_ != nullptr) {
      stats_->wrs_posted[static_cast<int>(WrOpcode::kSend)].Add(-1);
      stats_->signalled_send_wrs.Add(-1);
    }
    return false;
  }
  ring_[seq % kDepth] = SqEntry{};
  ++head_;
  unsignalled_run_ = 0;
  return true;
}

}  // namespace internal
}  // namespace rdmarpc
