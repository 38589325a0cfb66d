// rendezvous_pacer.h: how a connection paces the pieces of its rendezvous
// transfers (RDMA READ pulls and RDMA WRITE pushes, rendezvous.cc) — the
// piece size and how many pieces may be in flight at once.
//
// Two pacings (transport.h: kRendezvousChunkBytes and the measurements
// behind them): `small` while small messages flow on the connection (one
// was seen within the last kRendezvousBulkAfterPieces pieces), so a small
// frame posted behind the pieces waits for little; `bulk` otherwise, for
// bandwidth. A remainder within a quarter piece goes with the last piece.
//
// Usage (Connection):
//   while (pacer.CanPost() && ...) {
//     size_t len = pacer.NextPieceBytes(remaining);  // post a piece of len
//     pacer.OnPosted();
//   }
//   pacer.OnEnded();           // a piece's completion (or its undo)
//   pacer.NoteSmallMessage();  // an eager request/response/stream message
//
// Threads: the owning connection's loop only. No allocation, no clock.
#ifndef RDMARPC_RUNTIME_TRANSPORT_RENDEZVOUS_PACER_H_
#define RDMARPC_RUNTIME_TRANSPORT_RENDEZVOUS_PACER_H_

#include <algorithm>
#include <cstddef>

#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {

class RendezvousPacer {
 public:
  struct Pacing {
    size_t chunk_bytes = kRendezvousChunkBytes;  // bytes per piece (>= 1)
    int in_flight = kRendezvousChunksInFlight;   // pieces at once (>= 1)
  };
  RendezvousPacer(Pacing small, Pacing bulk) : small_(Clamp(small)), bulk_(Clamp(bulk)) {}

  // True while another piece may be posted now.
  bool CanPost() const { return in_flight_ < current().in_flight; }
  // Bytes of the next piece of a transfer with `remaining` bytes left: the
  // current pacing's piece, or all of them within a quarter piece more.
  size_t NextPieceBytes(size_t remaining) const {
    const size_t chunk = current().chunk_bytes;
    return remaining <= chunk + chunk / 4 ? remaining : chunk;
  }
  // A piece was posted.
  void OnPosted() {
    ++in_flight_;
    if (pieces_since_small_ < kRendezvousBulkAfterPieces) ++pieces_since_small_;
  }
  // A posted piece completed, failed, or was never taken by the QP.
  void OnEnded() {
    if (in_flight_ > 0) --in_flight_;
  }
  // A small message (eager request, response or stream message) was sent
  // or received on the connection.
  void NoteSmallMessage() { pieces_since_small_ = 0; }
  // The connection's QP is gone: nothing is in flight any more.
  void Reset() { in_flight_ = 0; }

  bool bulk() const { return pieces_since_small_ >= kRendezvousBulkAfterPieces; }
  int in_flight() const { return in_flight_; }
  // The small pacing's piece: the most a push sends with its header.
  size_t small_chunk_bytes() const { return small_.chunk_bytes; }

 private:
  static Pacing Clamp(Pacing p) {
    p.chunk_bytes = std::max<size_t>(1, p.chunk_bytes);
    p.in_flight = std::clamp(p.in_flight, 1, kSendQueueDepth / 4);
    return p;
  }
  const Pacing& current() const { return bulk() ? bulk_ : small_; }

  const Pacing small_;
  const Pacing bulk_;
  int in_flight_ = 0;
  int pieces_since_small_ = 0;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_RENDEZVOUS_PACER_H_
