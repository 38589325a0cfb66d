// shared_receive_queue.cc: SharedReceiveQueue (see shared_receive_queue.h).
#include "runtime/transport/shared_receive_queue.h"

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {

static_assert((SharedReceiveQueue::kSlabBuffers & (SharedReceiveQueue::kSlabBuffers - 1)) == 0,
              "slabs are a power of two buffers, so an index splits with a shift");

absl::Status SharedReceiveQueue::CheckUserOptions(absl::string_view options_name,
                                                 int srq_min_credits, int srq_shared_buffers) {
  if (srq_min_credits < kMinRecvDepth || srq_min_credits > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(options_name, ": srq_min_credits ",
                                                   srq_min_credits, " (", kMinRecvDepth,
                                                   "..65535)"));
  }
  if (srq_shared_buffers < 1 || srq_shared_buffers > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_name, ": srq_shared_buffers ", srq_shared_buffers, " (1..65535)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> SharedReceiveQueue::Create(
    ibv_pd* pd, const Options& options, EventLoop* loop, EngineStats* stats) {
  if (options.min_credits < kMinRecvDepth || options.max_credits < options.min_credits ||
      options.extra_buffers < 0 || options.buffer_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared receive queue: min_credits ", options.min_credits, " (>= ", kMinRecvDepth,
        "), max_credits ", options.max_credits, " (>= min_credits), extra_buffers ",
        options.extra_buffers, " (>= 0), buffer_bytes ", options.buffer_bytes, " (> 0)"));
  }
  ibv_device_attr attr{};
  if (int rc = Verbs().query_device(pd->context, &attr); rc != 0) {
    return ErrnoToStatus("ibv_query_device", rc);
  }
  if (attr.max_srq <= 0 || attr.max_srq_wr <= 0) {
    return absl::UnimplementedError(
        absl::StrCat("device ", pd->context->device != nullptr ? pd->context->device->name : "?",
                     " has no shared receive queues (max_srq ", attr.max_srq, ", max_srq_wr ",
                     attr.max_srq_wr, ")"));
  }
  std::unique_ptr<SharedReceiveQueue> q(new SharedReceiveQueue(pd, options, loop, stats));
  q->max_wr_ = std::min(attr.max_srq_wr, 1 << 20);
  ibv_srq_init_attr init{};
  init.attr.max_wr = static_cast<uint32_t>(q->max_wr_);
  init.attr.max_sge = 1;
  q->srq_ = Verbs().create_srq(pd, &init);
  if (q->srq_ == nullptr) return ErrnoToStatus("ibv_create_srq", errno);
  if (absl::Status s = q->GrowTo(std::max(1, options.extra_buffers)); !s.ok()) return s;
  q->repost_batch_ = RepostBatchFor(q->capacity());
  if (absl::StatusOr<int> n = q->PostPending(); !n.ok()) return n.status();
  return q;
}

SharedReceiveQueue::~SharedReceiveQueue() {
  if (srq_ != nullptr) {
    if (int rc = Verbs().destroy_srq(srq_); rc != 0) {
      // A QP still attached: its buffers must outlive it, so they leak.
      LOG(ERROR) << "ibv_destroy_srq failed (" << rc << "); leaking its " << slabs_.size()
                 << " buffer slabs";
      for (auto& s : slabs_) s.release();
    }
  }
  if (cq_entries_ > 0) loop_->ReleaseCqEntries(cq_entries_);
}

absl::Status SharedReceiveQueue::GrowTo(int buffers) {
  // Refused before registering anything when the slabs would not fit.
  const int64_t slabs = (int64_t{buffers} + kSlabBuffers - 1) / kSlabBuffers;
  while (capacity() < buffers) {
    if (slabs * kSlabBuffers > max_wr_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shared receive queue full: ", buffers, " receives needed, at most ",
          max_wr_ / kSlabBuffers * kSlabBuffers, " fit (the device's max_srq_wr ", max_wr_,
          " in slabs of ", kSlabBuffers, "); it holds ", attached_,
          attached_ == 1 ? " connection" : " connections", " x ", options_.min_credits,
          " srq_min_credits + ", options_.extra_buffers,
          " srq_shared_buffers: lower those, or spread the connections over more loops "
          "(ChannelOptions::engine_threads, ServerOptions::num_workers)"));
    }
    if (absl::Status s = loop_->ReserveCqEntries(kSlabBuffers); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<BufferSlab>> slab =
        BufferSlab::Create(pd_, kSlabBuffers, options_.buffer_bytes, kLocalAccess);
    if (!slab.ok()) {
      loop_->ReleaseCqEntries(kSlabBuffers);
      return slab.status();
    }
    cq_entries_ += kSlabBuffers;
    const int first = capacity();
    slabs_.push_back(std::move(*slab));
    for (int i = 0; i < kSlabBuffers; ++i) to_repost_.push_back(first + i);
    const size_t n = static_cast<size_t>(capacity());
    to_repost_.reserve(n);
    wrs_.resize(n);
    sges_.resize(n);
    starved_.reserve(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SharedReceiveQueue::Attach(SrqShare* share) {
  const int needed = (attached_ + 1) * options_.min_credits + options_.extra_buffers;
  if (absl::Status s = GrowTo(needed); !s.ok()) return s;
  if (absl::StatusOr<int> n = PostPending(); !n.ok()) return n.status();
  // Borrowers may still hold extras the new floor needs (they give them
  // back as they send): the floor must be posted now, so grow once more.
  if (free_credits() < options_.min_credits) {
    if (absl::Status s = GrowTo(capacity() + kSlabBuffers); !s.ok()) return s;
    if (absl::StatusOr<int> n = PostPending(); !n.ok()) return n.status();
  }
  if (free_credits() < options_.min_credits) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared receive queue: ", free_credits(), " free receives of ", posted_,
                     " posted; a connection needs ", options_.min_credits));
  }
  repost_batch_ = RepostBatchFor(capacity());
  ++attached_;
  share->in_use = 0;
  share->starved = false;
  SetInUse(share, options_.min_credits);
  return options_.min_credits;
}

void SharedReceiveQueue::Detach(SrqShare* share) {
  if (share->starved) {
    starved_.erase(std::find(starved_.begin(), starved_.end(), share));
    share->starved = false;
  }
  SetWanting(share, false);
  // Receives its QP consumed may still wait in the CQ, counted as posted:
  // its credits keep backing them until two drained polls (OnCqDrained).
  const int held = share->in_use;
  SetInUse(share, 0);
  sum_in_use_ += held;
  release_next_ += held;
  --attached_;
}

void SharedReceiveQueue::SetInUse(SrqShare* share, int in_use) {
  const int floor = options_.min_credits;
  const int old_extra = std::max(0, share->in_use - floor);
  const int new_extra = std::max(0, in_use - floor);
  sum_in_use_ += in_use - share->in_use;
  extra_in_use_ += new_extra - old_extra;
  borrowers_ += (new_extra > 0 ? 1 : 0) - (old_extra > 0 ? 1 : 0);
  share->in_use = in_use;
  if (new_extra > 0) SetWanting(share, false);  // a borrower is counted as one
}

int SharedReceiveQueue::FairCap(const SrqShare& share) const {
  const int floor = options_.min_credits;
  const int claimants = borrowers_ + wanting_ + (share.in_use > floor || share.wanting ? 0 : 1);
  const int cap = floor + std::max(0, extra_budget()) / std::max(1, claimants);
  return std::min(options_.max_credits, std::max(floor, cap));
}

int SharedReceiveQueue::OnMessage(SrqShare* share) {
  if (share->in_use <= 0) return -1;
  SetInUse(share, share->in_use - 1);
  const int floor = options_.min_credits;
  const int cap = FairCap(*share);
  // One back for the one spent and one more, up to the cap (a peer's
  // credits held cannot be told from its messages on their way, so every
  // sender grows, as TCP's slow start does).
  const int want = std::min(2, cap - share->in_use);
  int granted = 0;
  while (granted < want && free_credits() > 0 &&
         (share->in_use < floor || extra_in_use_ < extra_budget())) {
    SetInUse(share, share->in_use + 1);
    ++granted;
  }
  // At its floor and refused extras: it claims a share of them, so the
  // borrowers' caps shrink and they give some back.
  SetWanting(share, share->in_use <= floor && share->in_use < cap);
  if (share->in_use < floor && !share->starved) {
    share->starved = true;
    starved_.push_back(share);
  } else if (share->starved && share->in_use >= floor) {
    // Back at its floor through its own messages: nothing owed at a re-post.
    share->starved = false;
    starved_.erase(std::find(starved_.begin(), starved_.end(), share));
  }
  return granted;
}

absl::StatusOr<int> SharedReceiveQueue::PostPending() {
  const size_t n = to_repost_.size();
  int posted = 0;
  if (n > 0) {
    for (size_t i = 0; i < n; ++i) {
      const int idx = to_repost_[i];
      BufferSlab* slab = slabs_[idx / kSlabBuffers].get();
      sges_[i] = ibv_sge{reinterpret_cast<uint64_t>(slab->data(idx % kSlabBuffers)),
                         static_cast<uint32_t>(slab->buffer_bytes()), slab->lkey()};
      wrs_[i].wr_id = kWrIdTag | static_cast<uint64_t>(idx);
      wrs_[i].sg_list = &sges_[i];
      wrs_[i].num_sge = 1;
      wrs_[i].next = i + 1 < n ? &wrs_[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_srq_recv(srq_, wrs_.data(), &bad);
    size_t done = n;
    if (rc != 0) {
      done = 0;
      while (done < n && &wrs_[done] != bad) ++done;
    }
    if (stats_ != nullptr) {
      stats_->recv_doorbells.Add();
      stats_->wrs_posted[static_cast<int>(WrOpcode::kRecv)].Add(static_cast<int64_t>(done));
    }
    posted_ += static_cast<int>(done);
    posted = static_cast<int>(done);
    if (rc != 0) {
      // The buffers not posted stay pending for the next try (the next
      // idle re-post too).
      to_repost_.erase(to_repost_.begin(), to_repost_.begin() + static_cast<ptrdiff_t>(done));
      force_repost_ = false;
      return ErrnoToStatus("ibv_post_srq_recv", rc);
    }
    to_repost_.clear();
  }
  force_repost_ = false;
  // Starved shares first, oldest first, up to their floor.
  size_t served = 0;
  while (served < starved_.size() && free_credits() > 0) {
    SrqShare* s = starved_[served];
    const int n_grant = std::max(0, std::min(options_.min_credits - s->in_use, free_credits()));
    SetInUse(s, s->in_use + n_grant);
    if (s->in_use >= options_.min_credits) {
      s->starved = false;
      ++served;
    }
    if (s->on_granted != nullptr && n_grant > 0) s->on_granted(s, n_grant);
    if (s->starved) break;
  }
  starved_.erase(starved_.begin(), starved_.begin() + static_cast<ptrdiff_t>(served));
  return posted;
}

}  // namespace internal
}  // namespace rdmarpc
