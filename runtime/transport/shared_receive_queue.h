// shared_receive_queue.h: one shared receive queue (SRQ) per event loop (a
// server worker, or a channel's engine thread with ChannelOptions::
// receive_queue = kShared), from which all the loop's connections receive,
// and the credits each connection's peer gets on it.
//
// Receive memory: a per-connection ring (receive_ring.h) posts recv_depth
// buffers for every connection, idle or not (64 x 8 KiB = 512 KiB each by
// default). An SRQ holds `extra_buffers` plus `min_credits` per attached
// connection, so an idle connection costs min_credits buffers (4 x 8 KiB =
// 32 KiB by default) and the rest is shared by the connections that send.
// Buffers are registered in slabs of kSlabBuffers when a connection needs
// more room (connection set-up: the control plane), never on the data path,
// and are never given back while the loop runs.
//
// Credits (one credit = one posted receive the peer may consume; credits.h)
// are granted per connection so that no client can take every receive:
//  * in_use(c) = credits granted to c's peer (told or still owed) that its
//    messages have not consumed yet. The invariant sum(in_use) <= posted
//    buffers means a SEND never meets an empty SRQ: no RNR.
//  * Every connection is guaranteed min_credits (its floor): the SRQ's
//    capacity is at least attached x min_credits + extra_buffers, and
//    credits above a floor ("extras") come only from the extra_buffers, so
//    the floors are always backed. A connection below its floor when no
//    posted buffer is free waits ("starved") and is served first, in
//    order, when consumed buffers are re-posted.
//  * Extras are shared fairly: a connection may hold at most
//    min(max_credits, min_credits + extras / claimants), extras being the
//    buffers beyond the floors and claimants the connections holding
//    extras or refused them at their floor (it included). A connection
//    that sends grows its window by one credit per message it sends (each
//    consumed credit comes back with one more, as TCP's slow start grows
//    its window), up to that share; a connection whose share shrank gets
//    fewer back than it used until it is under it. So every connection
//    that keeps sending ends up at its share, as with a ring of its own. A client that spends its
//    share therefore waits for credits (CreditWindow), never on RNR.
//  * A connection's credits are released only when its QP is destroyed
//    (Detach), and only after two polls that found the CQ empty
//    (OnCqDrained): until then its peer may still consume receives, or
//    their completions wait in the CQ with their buffers counted as posted.
//  Not done: credits held by a connection that went idle are not taken back
//  (that needs a revoke message); they count against the extras until it
//  sends again.
//
// A receive's wr_id is kWrIdTag | buffer index (both top bits set; a
// connection's own ring sets only bit 63, sends neither), so a completion
// for a QP already destroyed still hands its buffer back (Orphaned).
//
// Threads: the owning loop's poller holder only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_SHARED_RECEIVE_QUEUE_H_
#define RDMARPC_RUNTIME_TRANSPORT_SHARED_RECEIVE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

class EventLoop;

// One connection's credits on a SharedReceiveQueue; the connection keeps
// it (stable address) from Attach to Detach.
struct SrqShare {
  int in_use = 0;        // granted to the peer, not consumed yet
  bool starved = false;  // below the floor, waiting for a re-post
  bool wanting = false;  // at its floor, asked for extras and got none
  // Called when credits are granted outside OnMessage (a starved share
  // served after a re-post): the owner adds them to what it owes its peer.
  void (*on_granted)(SrqShare* share, int credits) = nullptr;
  void* owner = nullptr;  // for on_granted
};

class SharedReceiveQueue {
 public:
  static constexpr uint64_t kWrIdTag = uint64_t{3} << 62;
  static bool IsReceive(uint64_t wr_id) { return (wr_id & kWrIdTag) == kWrIdTag; }
  static int BufferIndex(uint64_t wr_id) { return static_cast<int>(wr_id & ~kWrIdTag); }
  // Buffers registered at once when the SRQ grows (a power of two).
  static constexpr int kSlabBuffers = 256;

  struct Options {
    size_t buffer_bytes = 8 * 1024;  // every receive buffer, in bytes
    int extra_buffers = 512;         // shared beyond the floors
    int min_credits = 4;             // floor per connection (>= kMinRecvDepth)
    int max_credits = 64;            // most one connection may hold
  };

  // The check ServerOptions and ChannelOptions pass with kShared: OK when
  // `srq_min_credits` is in kMinRecvDepth (3)..65535 and `srq_shared_buffers` in 1..65535;
  // otherwise INVALID_ARGUMENT naming `options_name` ("ServerOptions"), the
  // first option out of range, its value and the range. Any thread.
  static absl::Status CheckUserOptions(absl::string_view options_name, int srq_min_credits,
                                       int srq_shared_buffers);

  // Makes the SRQ on `pd` (its device's max_srq_wr bounds the buffers) and
  // registers and posts extra_buffers. `loop` gives the CQ entries the
  // receives may complete into (EventLoop::ReserveCqEntries; one per
  // buffer) and must outlive the SRQ. INVALID_ARGUMENT: options out of
  // range (min_credits < kMinRecvDepth, max_credits < min_credits,
  // extra_buffers < 0, buffer_bytes 0); RESOURCE_EXHAUSTED: registration,
  // max_srq_wr or the CQ's room; UNIMPLEMENTED: the device has no SRQ;
  // other codes from ibv_query_device / ibv_create_srq / ibv_post_srq_recv.
  static absl::StatusOr<std::unique_ptr<SharedReceiveQueue>> Create(ibv_pd* pd,
                                                                    const Options& options,
                                                                    EventLoop* loop,
                                                                    EngineStats* stats);
  // Destroys the SRQ, then frees its buffers and the CQ entries. Every QP
  // attached to it must be destroyed first.
  ~SharedReceiveQueue();
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  ibv_srq* srq() const { return srq_; }
  const Options& options() const { return options_; }
  ibv_pd* pd() const { return pd_; }

  // Connection set-up, outside any receive upcall (pending buffers are
  // re-posted here): room for one more connection's floor (registering and
  // posting a slab when needed). Returns the initial credits to advertise
  // (min_credits), already counted in `share`. RESOURCE_EXHAUSTED
  // when the device's SRQ or memory cannot hold another floor (the message
  // names the numbers): reject the connection. Registration and
  // ibv_post_srq_recv errors pass through with their codes.
  absl::StatusOr<int> Attach(SrqShare* share);
  // The connection's QP was destroyed: its credits go back to the pool
  // after the second OnCqDrained from now.
  void Detach(SrqShare* share);
  // The loop polled its CQ and found fewer completions than it asked for
  // (nothing was left in it): credits detached before the previous such
  // poll are free now.
  void OnCqDrained() {
    sum_in_use_ -= release_armed_;
    release_armed_ = release_next_;
    release_next_ = 0;
  }

  // --- data path ---
  // A receive completed (any status): it is no longer posted.
  void OnCompleted() { --posted_; }
  absl::string_view data(int index, size_t byte_len) const {
    return absl::string_view(slabs_[index / kSlabBuffers]->data(index % kSlabBuffers), byte_len);
  }
  // Buffer `index` may be re-posted (its message was handled, or it was
  // flushed).
  void Consumed(int index) { to_repost_.push_back(index); }
  // A receive of a QP no longer mapped (destroyed): its buffer goes back.
  void Orphaned(int index) {
    OnCompleted();
    Consumed(index);
  }
  // `share`'s peer consumed one credit with a message. Returns the
  // credits granted back now (0, 1 or 2), or -1 when the peer had none left
  // to spend (it sent beyond its credits: a protocol violation the caller
  // must close the connection for).
  int OnMessage(SrqShare* share);
  bool RepostDue() const {
    return !to_repost_.empty() && (static_cast<int>(to_repost_.size()) >= repost_batch_ ||
                                   force_repost_ || !starved_.empty());
  }
  // Going idle: re-post what is held back at the next RepostDue check.
  // True only for the first caller since the last re-post (one connection
  // schedules the re-post for all).
  bool RequestIdleRepost() {
    if (force_repost_ || to_repost_.empty()) return false;
    force_repost_ = true;
    return true;
  }
  // Posts every pending buffer with one chained ibv_post_srq_recv, then
  // grants starved shares what the freed buffers allow (on_granted).
  // Returns the number posted, or ibv_post_srq_recv's error.
  absl::StatusOr<int> PostPending();

  // The most credits `share` may hold now (its fair share, see above).
  int FairCap(const SrqShare& share) const;
  // Posted receives not backing any credit.
  int free_credits() const { return posted_ - sum_in_use_; }
  int capacity() const { return static_cast<int>(slabs_.size()) * kSlabBuffers; }
  int posted() const { return posted_; }
  int attached() const { return attached_; }
  int borrowers() const { return borrowers_; }
  int wanting() const { return wanting_; }
  int starved() const { return static_cast<int>(starved_.size()); }
  size_t registered_bytes() const {
    return static_cast<size_t>(capacity()) * options_.buffer_bytes;
  }

 private:
  SharedReceiveQueue(ibv_pd* pd, const Options& options, EventLoop* loop, EngineStats* stats)
      : pd_(pd), options_(options), loop_(loop), stats_(stats) {}
  // Registers slabs until capacity() >= `buffers`, queueing their buffers
  // for the next PostPending.
  absl::Status GrowTo(int buffers);
  // Sets share->in_use, keeping the sums.
  void SetInUse(SrqShare* share, int in_use);
  void SetWanting(SrqShare* share, bool wanting) {
    if (share->wanting == wanting) return;
    share->wanting = wanting;
    wanting_ += wanting ? 1 : -1;
  }
  int extra_budget() const { return capacity() - attached_ * options_.min_credits; }

  ibv_pd* const pd_;
  const Options options_;
  EventLoop* const loop_;
  EngineStats* const stats_;
  ibv_srq* srq_ = nullptr;
  int max_wr_ = 0;  // the device's max_srq_wr (what the SRQ was made with)
  int cq_entries_ = 0;
  std::vector<std::unique_ptr<BufferSlab>> slabs_;
  int posted_ = 0;
  int sum_in_use_ = 0;
  int extra_in_use_ = 0;  // sum of max(0, in_use - min_credits)
  int borrowers_ = 0;     // shares with in_use > min_credits
  int wanting_ = 0;       // shares with `wanting` set
  int attached_ = 0;
  int release_next_ = 0;   // detached since the last drained poll
  int release_armed_ = 0;  // freed at the next drained poll
  int repost_batch_ = 16;
  bool force_repost_ = false;
  std::vector<int> to_repost_;
  std::vector<SrqShare*> starved_;  // oldest first
  std::vector<ibv_recv_wr> wrs_;    // scratch for PostPending
  std::vector<ibv_sge> sges_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_SHARED_RECEIVE_QUEUE_H_
