// buffer_pool.h: registered memory, registered once and reused.
//
//  * BufferSlab: `count` buffers of `buffer_bytes` in one allocation and one
//    MR — a connection's receive ring or send buffers. get/put are for one
//    thread (the connection's loop).
//  * LargeBufferPool: buffers for rendezvous payloads, each with its own MR.
//    Where the device has type-2 memory windows the MRs allow local access
//    and window binding only (kWindowedAccess): a peer reaches a buffer
//    only through a window a connection bound for one stream
//    (exposure_table.h). Otherwise the MRs allow remote access themselves,
//    and one buffer's access is revoked by re-registering it (Rekey) without
//    touching the others. Buffers are kept for reuse; registration happens
//    only when the pool grows or on Rekey. Thread-safe.
#ifndef RDMARPC_RUNTIME_TRANSPORT_BUFFER_POOL_H_
#define RDMARPC_RUNTIME_TRANSPORT_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {

inline constexpr int kLocalAccess = IBV_ACCESS_LOCAL_WRITE;
inline constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
// Large buffers on a device with type-2 memory windows: the MR's own rkey
// grants nothing remotely; windows bound on it do.
inline constexpr int kWindowedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

class BufferSlab {
 public:
  // Registers count × buffer_bytes with `access`. RESOURCE_EXHAUSTED (with
  // RLIMIT_MEMLOCK) when registration fails for lack of memory.
  static absl::StatusOr<std::unique_ptr<BufferSlab>> Create(ibv_pd* pd, int count,
                                                            size_t buffer_bytes, int access);
  ~BufferSlab();

  int count() const { return count_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  char* data(int index) const { return base_ + static_cast<size_t>(index) * buffer_bytes_; }
  uint32_t lkey() const { return mr_->lkey; }

  // Free-list for send buffers. Get returns -1 when all are in use.
  int Get();
  void Put(int index);
  int free_count() const { return static_cast<int>(free_.size()); }

 private:
  BufferSlab(char* base, int count, size_t buffer_bytes, MrPtr mr);
  char* base_;
  int count_;
  size_t buffer_bytes_;
  MrPtr mr_;
  std::vector<int> free_;
};

class ExternalRegion;
class ExternalMrTable;
class LargeBufferPool;

struct LargeBuffer {
  char* data = nullptr;
  size_t capacity = 0;  // bytes
  MrPtr mr;
  // Lent memory (LargeBufferPool::Lend): the region it lies in, kept alive
  // while the buffer is out, and the MR it uses when `mr` is empty (one
  // the pool keeps for the region, or the region's own pool buffer's).
  std::shared_ptr<ExternalRegion> external;
  ibv_mr* borrowed_mr = nullptr;
  const ibv_mr* active_mr() const { return mr ? mr.get() : borrowed_mr; }
  uint32_t lkey() const { return active_mr()->lkey; }
  uint32_t rkey() const { return active_mr()->rkey; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(data); }
  // The pool's (under its lock): windows on the buffer being invalidated
  // (MarkRevokePending minus RevokeDone), and whether it was Put meanwhile.
  int revoke_pending = 0;
  bool put_while_pending = false;
  // The pool's (under its lock): bytes of an attachment received into
  // this buffer that the application kept past its call (ExemptFromLimit)
  // and that do not count against the pool's limit until it comes back.
  size_t kept_by_application = 0;
};

// Memory the transport may send from without copying it: a user's
// rdmarpc::Buffer (runtime/include/rdmarpc/buffer.h). The region owns
// `owner` (what frees the memory) and, when its memory is a buffer of a
// LargeBufferPool (an attachment received into it), that buffer, returned
// to its pool when the region dies. Each pool that sends from the region
// registers it once (LargeBufferPool::Lend) and deregisters it when the
// region or the pool dies, whichever comes first. Thread-safe.
class ExternalRegion {
 public:
  // `data`, `size` bytes, stay valid until `owner` is destroyed (after the
  // region's MRs are gone). `owner` may be null (memory not ours to free).
  ExternalRegion(char* data, size_t size, std::shared_ptr<void> owner);
  // A received attachment: the pool buffer `buffer` of `pool` (kept alive
  // by `pool_owner`), `size` bytes at `offset` of it.
  ExternalRegion(std::shared_ptr<void> pool_owner, LargeBufferPool* pool, LargeBuffer* buffer,
                 size_t offset, size_t size);
  ~ExternalRegion();
  // A region in a pool buffer (a received attachment) that the application
  // keeps past its call: its bytes leave its pool's limit
  // (LargeBufferPool::ExemptFromLimit). No-op for other regions.
  void KeptPastItsCall();
  ExternalRegion(const ExternalRegion&) = delete;
  ExternalRegion& operator=(const ExternalRegion&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  friend class LargeBufferPool;
  friend class ExternalMrTable;
  char* const data_;
  const size_t size_;
  // Pool-backed regions: the buffer and its pool.
  LargeBufferPool* const home_pool_ = nullptr;
  LargeBuffer* const home_buffer_ = nullptr;
  absl::Mutex mu_;
  // Pools' tables holding an MR of this region.
  std::vector<std::weak_ptr<ExternalMrTable>> tables_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<void> owner_;  // last: freed after the MRs
};

// An attachment's bytes (header.h: kFlagAttachment): `length` bytes at
// `offset` of `region`. Empty (no attachment) when `region` is null.
struct Attachment {
  std::shared_ptr<ExternalRegion> region;
  size_t offset = 0;
  size_t length = 0;  // bytes
  explicit operator bool() const { return region != nullptr; }
  const char* data() const { return region != nullptr ? region->data() + offset : nullptr; }
};
// `bytes` copied into heap memory of their own (an inline attachment as
// it arrived, or one a user gave as bytes).
Attachment CopyToAttachment(const char* bytes, size_t length);

class LargeBufferPool {
 public:
  // `limit_bytes`: most memory registered at once (0 = no limit).
  // `keep_bytes`: most memory kept in the free lists when unused.
  // `access`: the MRs' access flags (kRemoteAccess or kWindowedAccess).
  LargeBufferPool(ibv_pd* pd, size_t limit_bytes, size_t keep_bytes, int access = kRemoteAccess);
  ~LargeBufferPool();  // all buffers must have been Put back

  // A buffer of at least `bytes` (rounded up to 64 KiB), registered for
  // remote read and write. RESOURCE_EXHAUSTED when the limit would be passed
  // (message names request, in-use and limit bytes) or registration fails.
  absl::StatusOr<LargeBuffer*> Get(size_t bytes);
  // Returns a buffer for reuse. The caller guarantees no peer may still
  // access it through its current rkey (else call Rekey first). A buffer
  // whose window is still being invalidated (MarkRevokePending) is held
  // back until RevokeDone.
  void Put(LargeBuffer* buffer);
  // A window on `buffer` is being invalidated (a LOCAL_INV posted and not
  // yet retired): a Put meanwhile does not make it reusable. Any thread.
  void MarkRevokePending(LargeBuffer* buffer);
  // The invalidation took effect: the buffer becomes reusable, at once when
  // it was Put meanwhile. Any thread.
  void RevokeDone(LargeBuffer* buffer);

  // Revokes every rkey handed out for `buffer` by re-registering it: on a
  // device without memory windows, at the end of each exposure. On failure
  // the buffer is freed (it must not be reused) and the error returned.
  absl::Status Rekey(LargeBuffer* buffer);
  // Rekey then Put (or free on Rekey failure).
  void RekeyAndPut(LargeBuffer* buffer);

  // A LargeBuffer over `length` bytes at `offset` of `region`, to expose
  // and send from like one of the pool's own (Put hands it back; it is
  // never reused). Where the pool's MRs are kWindowedAccess the region is
  // registered once per pool and that MR kept (a pool buffer's own MR when
  // the region lies in one of this pool's buffers); otherwise each Lend
  // registers the bytes for remote READ only, and Rekey or Put deregisters
  // them, which is what revokes the peer's access. The region's MR with
  // windows has bind rights only (IBV_ACCESS_MW_BIND): lent memory is only
  // ever read by the peer. Errors: OUT_OF_RANGE
  // when [offset, offset + length) leaves the region; registration's
  // (RESOURCE_EXHAUSTED for lack of locked memory).
  absl::StatusOr<LargeBuffer*> Lend(std::shared_ptr<ExternalRegion> region, size_t offset,
                                    size_t length);

  // An attachment of `bytes` received into `buffer` outlives its call (the
  // application kept it, e.g. a stored value): those bytes, rounded up to
  // the pool's 64 KiB granule, stop counting against the limit until the
  // buffer is Put back, so kept values cannot starve the calls the limit
  // is for. The rest of the buffer (a message pulled ahead of the
  // attachment) still counts. No-op for a buffer already exempt. Any
  // thread.
  void ExemptFromLimit(LargeBuffer* buffer, size_t bytes);

  // Bytes registered by the pool that count against its limit (buffers in
  // use, cached free ones), and bytes of buffers the application kept
  // (ExemptFromLimit), in no limit.
  size_t counted_bytes() const;
  size_t kept_by_application_bytes() const;

 private:
  // A buffer back from the application counts against the limit again.
  void CountAgainstLimitLocked(LargeBuffer* buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(LargeBuffer* buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lent buffer's region is moved to `*lent`, for the caller to drop
  // after the lock.
  void PutLocked(LargeBuffer* buffer, std::shared_ptr<ExternalRegion>* lent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ibv_pd* const pd_;
  const int access_;
  const size_t limit_bytes_;
  const size_t keep_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, LargeBuffer*> free_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t counted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // exempt from the limit
  size_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // MRs of regions lent with windows (shared with the regions, which
  // deregister theirs when they die first).
  std::shared_ptr<ExternalMrTable> external_mrs_;
};

// Rendezvous buffers over every LargeBufferPool of the process, in bytes:
// registered now, of those cached free for reuse, and on loan. Any thread.
struct LargeBufferPoolTotals {
  int64_t registered_bytes = 0;
  int64_t cached_bytes = 0;
  int64_t in_use_bytes = 0;
};
LargeBufferPoolTotals GetLargeBufferPoolTotals();

// Owns one LargeBuffer on loan from a pool; returns it on destruction (no
// rekey: only for buffers never exposed, or whose exposure ended normally).
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(LargeBufferPool* pool, LargeBuffer* buffer) : pool_(pool), buffer_(buffer) {}
  PooledBuffer(PooledBuffer&& o) noexcept : pool_(o.pool_), buffer_(o.buffer_) {
    o.buffer_ = nullptr;
  }
  PooledBuffer& operator=(PooledBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = o.pool_;
      buffer_ = o.buffer_;
      o.buffer_ = nullptr;
    }
    return *this;
  }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer() { reset(); }

  LargeBuffer* get() const { return buffer_; }
  LargeBuffer* operator->() const { return buffer_; }
  explicit operator bool() const { return buffer_ != nullptr; }
  LargeBuffer* release() {
    LargeBuffer* b = buffer_;
    buffer_ = nullptr;
    return b;
  }
  void reset() {
    if (buffer_ != nullptr) pool_->Put(buffer_);
    buffer_ = nullptr;
  }

 private:
  LargeBufferPool* pool_ = nullptr;
  LargeBuffer* buffer_ = nullptr;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_BUFFER_POOL_H_
