// credits.h: receiver-granted send credits (one credit = one receive the peer
// has posted and not yet consumed), so a SEND never meets an empty receive
// queue and RNR never happens.
//
// Used by one loop thread only (no locking).
#ifndef RDMARPC_RUNTIME_TRANSPORT_CREDITS_H_
#define RDMARPC_RUNTIME_TRANSPORT_CREDITS_H_

#include <algorithm>
#include <cstdint>

#include "runtime/transport/engine_stats.h"

namespace rdmarpc {
namespace internal {

class CreditWindow {
 public:
  // `peer_recv_depth`: receives the peer pre-posted (from its handshake).
  // `local_recv_depth`: receives we post, for the explicit-return threshold.
  CreditWindow(int peer_recv_depth, int local_recv_depth);

  // Sending side. A message (request/response/release, or WRITE_WITH_IMM)
  // needs a credit while keeping one in reserve for a kCredit message, so the
  // two sides can always return credits to each other (no deadlock).
  bool CanSendMessage() const { return credits_ > 1; }
  bool CanSendCreditMessage() const { return credits_ >= 1; }
  // Takes one credit. Precondition: the matching CanSend* was true.
  void Consume();
  // The peer returned `n` credits (from a received header).
  void OnReturned(int n) { credits_ += n; }
  int available() const { return credits_; }

  // Receiving side: `n` receives were re-posted; they are owed to the peer.
  void OnReposted(int n) { owed_ += n; }
  // Credits to put in an outgoing header; resets the owed count.
  uint16_t TakeOwed();
  int owed() const { return owed_; }
  // True when owed credits should go back in an explicit kCredit message
  // because no other traffic will carry them soon: half the ring, at least 2
  // (a kCredit costs the peer one receive, so a threshold of 1 would ping-pong).
  bool ShouldSendCreditMessage() const { return owed_ >= threshold_ && CanSendCreditMessage(); }
  // Receiving from a shared receive queue (shared_receive_queue.h), where
  // the peer's window is what it was granted, not a ring: `in_use` credits
  // are granted and not consumed. Credits go back explicitly once the peer
  // may be down to a quarter of its window: the threshold is
  // in_use - 1 - in_use / 4 (at least 2, at most half the ring). A peer
  // blocked with one credit left means in_use - 1 owed here, which reaches
  // it whenever in_use >= 3 (the floor); a response that follows a request
  // soon carries the owed credits instead.
  void SetPeerWindow(int in_use) {
    threshold_ = std::max(2, std::min(ring_threshold_, in_use - 1 - in_use / 4));
  }

 private:
  int credits_;
  int owed_ = 0;
  int threshold_;
  int ring_threshold_;
};

// Times a sender's waits for credits (messages queued, no credit to send
// them): Update at each point where that may have changed; a stall runs from
// the first Update(true) to the next Update(false). Counts each stall and
// its length in `stats` (EngineStats::credit_stalls, credit_stall_ns) as it
// begins and ends. Times are ns since the epoch (absl::Now). One loop thread.
class CreditStallTimer {
 public:
  void Update(bool stalled, int64_t now_ns, EngineStats* stats) {
    if (stalled == (since_ns_ != 0)) return;
    if (stalled) {
      since_ns_ = now_ns;
      stats->credit_stalls.Add();
      return;
    }
    const int64_t waited = now_ns > since_ns_ ? now_ns - since_ns_ : 0;
    since_ns_ = 0;
    total_ns_ += waited;
    stats->credit_stall_ns.Add(waited);
  }
  bool stalled() const { return since_ns_ != 0; }
  // Time stalled so far, the stall going on included, in ns.
  int64_t total_ns(int64_t now_ns) const {
    return total_ns_ + (since_ns_ != 0 && now_ns > since_ns_ ? now_ns - since_ns_ : 0);
  }

 private:
  int64_t since_ns_ = 0;  // 0: not stalled
  int64_t total_ns_ = 0;  // stalls that ended
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_CREDITS_H_
