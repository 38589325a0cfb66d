// engine_stats.h: what one completion engine (an EventLoop: a server worker
// or a channel's loop) did on the device, counted by the engine itself and
// summed over every engine when read (SumEngineStats), so that no message
// touches a counter another thread writes.
//
// Writers: only the thread holding the engine's poller (the loop thread or a
// leading caller, event_loop.h); the hand-over of the poller orders their
// writes, so a counter is a relaxed load and store, not a locked
// read-modify-write. Readers: any thread, at any time; a read is a snapshot
// of each counter, not a consistent cut across counters.
#ifndef RDMARPC_RUNTIME_TRANSPORT_ENGINE_STATS_H_
#define RDMARPC_RUNTIME_TRANSPORT_ENGINE_STATS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace rdmarpc {
namespace internal {

// A counter with one writer at a time (see above). Signed so that a gauge
// (incremented by one event, decremented by another) can be kept the same
// way; summed over engines it is never negative.
class EngineCounter {
 public:
  void Add(int64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  int64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Work request kinds, as rdmarpc_work_requests_posted_total's `opcode` label
// names them (WrOpcodeName).
enum class WrOpcode : int {
  kSend,
  kSendWithImm,
  kRdmaWrite,
  kRdmaWriteWithImm,
  kRdmaRead,
  kRecv,
  kBindMw,    // a type-2 memory window bound for one stream (exposure_table.h)
  kLocalInv,  // and invalidated when it ends
  kCount
};
const char* WrOpcodeName(WrOpcode op);

// Connection states counted by rdmarpc_connections (the transport's
// ConnState minus kClosed, which no live connection is in).
inline constexpr int kNumCountedConnStates = 6;

// ibv_wc_status values 0..kNumWcStatus-1 (IBV_WC_SUCCESS to
// IBV_WC_TM_RNDV_INCOMPLETE in rdma-core's verbs.h); anything above counts
// as the last.
inline constexpr int kNumWcStatus = 24;
// IBV_WC_LOC_LEN_ERR -> "LOC_LEN_ERR", ... (the enumerator without IBV_WC_).
const char* WcStatusName(int status);

// Rendezvous directions: this side pulled the bytes (RDMA READ) or pushed
// them (RDMA WRITE).
enum class RendezvousDirection : int { kRead, kWrite, kCount };

struct EngineStats {
  EngineCounter wrs_posted[static_cast<int>(WrOpcode::kCount)];
  EngineCounter signalled_send_wrs;  // of the send WRs, posted IBV_SEND_SIGNALED
  EngineCounter inline_send_wrs;     // of the send WRs, posted IBV_SEND_INLINE
  EngineCounter send_doorbells;      // ibv_post_send calls
  EngineCounter recv_doorbells;      // ibv_post_recv calls
  EngineCounter send_completions;    // work completions polled, send queue
  EngineCounter recv_completions;    // work completions polled, receive queue
  // Completions polled with an error status, by status; IBV_WC_WR_FLUSH_ERR
  // apart (a connection's teardown flushes what was posted: not a fault).
  EngineCounter wc_errors[kNumWcStatus];
  EngineCounter wc_flushed;
  // Times a connection had messages queued and no credit to send them, and
  // the time it waited until a returned credit let it send again (or it
  // closed), in nanoseconds.
  EngineCounter credit_stalls;
  EngineCounter credit_stall_ns;
  EngineCounter rendezvous_transfers[static_cast<int>(RendezvousDirection::kCount)];
  EngineCounter rendezvous_bytes[static_cast<int>(RendezvousDirection::kCount)];
  EngineCounter keepalive_probes;      // probe WRs posted (keepalive.cc)
  EngineCounter payload_bytes_copied;  // see TransportStats::payload_bytes_copied
  // Eager send buffers taken from and given back to connections' send
  // slabs (in use = taken - returned), and their total (capacity).
  EngineCounter send_buffers_taken;
  EngineCounter send_buffers_returned;
  EngineCounter send_buffers_capacity;
  EngineCounter connections_established;  // reached kEstablished
  EngineCounter connections_closed;       // ended, for any reason
  // Times the loop thread slept on its completion channel, and times a
  // poller (loop thread or leading caller) that would have spun found every
  // spinning slot of the process taken and slept or handed back instead
  // (spin_governor.h).
  EngineCounter loop_sleeps;
  EngineCounter spins_refused;
  // Times the loop grew its CQ for more connections (ibv_resize_cq).
  EngineCounter cq_resizes;
  // Live connections by state (a gauge: +1 on entry, -1 on exit).
  EngineCounter connections_in_state[kNumCountedConnStates];
};

// The sum over every engine alive now and every engine that ended (so
// counters only grow), as plain numbers.
struct EngineTotals {
  int64_t wrs_posted[static_cast<int>(WrOpcode::kCount)] = {};
  int64_t signalled_send_wrs = 0;
  int64_t inline_send_wrs = 0;
  int64_t send_doorbells = 0;
  int64_t recv_doorbells = 0;
  int64_t send_completions = 0;
  int64_t recv_completions = 0;
  int64_t wc_errors[kNumWcStatus] = {};
  int64_t wc_flushed = 0;
  int64_t credit_stalls = 0;
  int64_t credit_stall_ns = 0;
  int64_t rendezvous_transfers[static_cast<int>(RendezvousDirection::kCount)] = {};
  int64_t rendezvous_bytes[static_cast<int>(RendezvousDirection::kCount)] = {};
  int64_t keepalive_probes = 0;
  int64_t payload_bytes_copied = 0;
  int64_t send_buffers_in_use = 0;
  int64_t send_buffers_capacity = 0;
  int64_t connections_established = 0;
  int64_t connections_closed = 0;
  int64_t loop_sleeps = 0;
  int64_t spins_refused = 0;
  int64_t cq_resizes = 0;
  int64_t connections_in_state[kNumCountedConnStates] = {};
  int engines = 0;  // engines alive now
};

// Registers `stats` (owned by its engine, alive until Unregister) for
// SumEngineStats. Any thread.
void RegisterEngineStats(const EngineStats* stats);
// Folds `stats`'s counters into the totals of ended engines (gauges are
// dropped: an ended engine has no live connections or buffers) and forgets
// it. Any thread; after the engine's last write.
void UnregisterEngineStats(const EngineStats* stats);
// Any thread.
EngineTotals SumEngineStats();
// Test and benchmark hook: makes the counters read zero from now on
// (gauges are left as they are). Any thread.
void ResetEngineCounters();

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_ENGINE_STATS_H_
