// transport_stats.h: process-wide counters of work the transport does per
// call that the verbs counters cannot see, read by bench/rpc_bench for the
// per-call budget ("bytes the runtime copied, serialisation aside").
//
// Read off the engines' own counters (engine_stats.h), summed over every
// engine; safe to read from any thread. A read is a snapshot, not a
// consistent cut across counters.
#ifndef RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_STATS_H_
#define RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_STATS_H_

#include <cstddef>
#include <cstdint>

namespace rdmarpc::internal {

struct TransportStats {
  // Payload bytes (request or response message bodies) the runtime memcpy'd
  // between buffers after serialisation and before parsing, in bytes: e.g. a
  // serialised message copied into a registered send buffer. Zero-copy paths
  // (serialising straight into registered memory, RDMA READ/WRITE by the
  // NIC) add nothing.
  uint64_t payload_bytes_copied = 0;
  // Send work requests the transport posted (SEND_WITH_IMM, WRITE_WITH_IMM,
  // READ; memory-window binds and invalidations not counted), and how many
  // of them asked for a completion (IBV_SEND_SIGNALED): selective
  // signalling shows as signalled_send_wrs ≈ send_wrs / 16.
  uint64_t send_wrs = 0;
  uint64_t signalled_send_wrs = 0;
  // Of send_wrs, those posted with IBV_SEND_INLINE (the message fit the QP's
  // max_inline_data: the NIC takes the bytes from the WQE, no DMA read).
  uint64_t inline_send_wrs = 0;
};

// Snapshot of the counters since process start or the last Reset. Any
// thread.
TransportStats GetTransportStats();
void ResetTransportStats();

}  // namespace rdmarpc::internal

#endif  // RDMARPC_RUNTIME_TRANSPORT_TRANSPORT_STATS_H_
