// exposure_table.h: the registered memory one connection exposes to its
// peer (rendezvous payloads and reply buffers), and the type-2 memory
// windows that scope each exposure to one stream.
//
// With windows (DeviceResources::memory_windows()), the large buffers'
// MRs grant no remote access themselves (kWindowedAccess). Exposing a
// buffer takes a window from this connection's cache (ibv_alloc_mw only
// when the cache is empty) and queues an IBV_WR_BIND_MW on the QP ahead of
// the message that carries the new rkey: the window covers exactly the
// bytes advertised, with only the access the peer needs, and works only for
// RDMA operations arriving on this QP (type 2B, IB spec 10.6.7.2). When the
// stream ends, Revoke queues an IBV_WR_LOCAL_INV (signalled); the pool holds
// the buffer back (LargeBufferPool::MarkRevokePending) until that WR
// retired, so a late or forged access by the peer fails with a remote
// access error on its own connection and never lands in a buffer another
// call reuses. A connection that is closing posts no LOCAL_INV: it keeps
// the window (and the buffer held back) until its QP is destroyed, then
// deallocates it (ibv_dealloc_mw invalidates it). A window's next rkey keeps its
// index and moves its 8-bit key (ibv_inc_rkey), so an rkey the peer saw
// before is stale for the next 255 binds of that window.
//
// Without windows, the MR's own rkey is advertised, and the connection
// re-registers the buffer when its exposure ends (LargeBufferPool::Rekey):
// a registration per large message.
//
// Either way the table counts the bytes exposed, against the
// per-connection cap (ConnectionOptions::max_exposed_bytes).
//
// Threads: the owning connection's loop only.
#ifndef RDMARPC_RUNTIME_TRANSPORT_EXPOSURE_TABLE_H_
#define RDMARPC_RUNTIME_TRANSPORT_EXPOSURE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/send_queue.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

// The longest window bound, in bytes: mlx5 binds at most 2 GiB
// (rdma-core's mlx5 set_bind_wr). A reply buffer advertises at most this.
inline constexpr size_t kMaxWindowBytes = size_t{1} << 31;

class ExposureTable {
 public:
  ExposureTable() = default;
  ~ExposureTable() { Release(); }
  ExposureTable(const ExposureTable&) = delete;
  ExposureTable& operator=(const ExposureTable&) = delete;

  // Set when the connection's QP exists. `windows`: bind a window per
  // exposure (the pool's MRs must be kWindowedAccess). `max_exposed_bytes`:
  // the cap on bytes exposed at once (0 = none).
  void Init(ibv_pd* pd, LargeBufferPool* pool, bool windows, size_t max_exposed_bytes);
  bool windows() const { return windows_; }

  // OK when `bytes` more may be exposed now; RESOURCE_EXHAUSTED naming the
  // bytes asked for, the bytes and buffers exposed and the cap otherwise.
  absl::Status CheckRoom(size_t bytes) const;
  // Exposes [addr, addr + length) of `buffer` (inside it) to the peer with
  // `access` (IBV_ACCESS_REMOTE_READ and/or IBV_ACCESS_REMOTE_WRITE) until
  // Revoke: returns the rkey to advertise. With windows the BIND_MW WR is
  // queued on `sq` (the caller checked it has room, before the message that
  // carries the rkey). A buffer is exposed at most once at a time. Errors:
  // RESOURCE_EXHAUSTED over the cap (CheckRoom); OUT_OF_RANGE for a length
  // above kMaxWindowBytes; ibv_alloc_mw's errno as a status (ENOMEM:
  // RESOURCE_EXHAUSTED). Nothing is exposed then.
  absl::StatusOr<uint32_t> Expose(SendQueue* sq, LargeBuffer* buffer, uint64_t addr,
                                  uint32_t length, int access);
  // The peer's access to `buffer` ends (no-op when it is not exposed). With
  // a window, the pool holds the buffer back until the window is gone: when
  // `qp_usable`, a LOCAL_INV is queued on `sq` (or kept until it has room,
  // PostPendingInvalidations) and OnRetired lets the buffer go; otherwise
  // (the connection is closing, its QP in error or about to be) Release
  // deallocates the window once the QP is destroyed. The caller still hands
  // the buffer back to the pool as usual.
  void Revoke(SendQueue* sq, LargeBuffer* buffer, bool qp_usable);
  // Queues invalidations Revoke kept for lack of room, while `sq` has room.
  void PostPendingInvalidations(SendQueue* sq);
  // A WR's entry handed back by the send queue: `executed` when a
  // successful completion retired it, false when it failed, was flushed or
  // never reached the QP (its window is then deallocated, never reused).
  void OnRetired(const SqEntry& entry, bool executed);
  // The QP is gone: deallocates every window (those still bound and
  // pending included) and lets the pool reuse their buffers.
  void Release();

  bool exposed(const LargeBuffer* buffer) const { return exposed_.contains(buffer); }
  size_t exposed_bytes() const { return exposed_bytes_; }
  size_t exposed_buffers() const { return exposed_.size(); }
  size_t cached_windows() const { return free_windows_.size(); }

 private:
  struct Window {
    ibv_mw* mw = nullptr;
    uint32_t rkey = 0;  // the rkey of its last bind (or ibv_alloc_mw's)
  };
  struct Exposure {
    size_t bytes = 0;
    Window window;  // mw == nullptr without windows
  };
  struct PendingInvalidation {
    LargeBuffer* buffer = nullptr;
    Window window;
  };
  void PostInvalidation(SendQueue* sq, const PendingInvalidation& p);
  void Discard(Window w);

  ibv_pd* pd_ = nullptr;
  LargeBufferPool* pool_ = nullptr;
  bool windows_ = false;
  size_t max_exposed_bytes_ = 0;
  absl::flat_hash_map<const LargeBuffer*, Exposure> exposed_;
  size_t exposed_bytes_ = 0;
  std::vector<Window> free_windows_;
  std::vector<PendingInvalidation> pending_;                 // waiting for SQ room
  absl::flat_hash_map<ibv_mw*, LargeBuffer*> invalidating_;  // LOCAL_INV posted
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_EXPOSURE_TABLE_H_
