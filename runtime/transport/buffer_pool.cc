// buffer_pool.cc: see buffer_pool.h.
#include "runtime/transport/buffer_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace rdmarpc {
namespace internal {
namespace {
constexpr size_t kPage = 4096;
constexpr size_t kLargeGranule = 64 * 1024;

char* AllocAligned(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kPage, bytes == 0 ? kPage : bytes) != 0) return nullptr;
  return static_cast<char*>(p);
}
}  // namespace

absl::StatusOr<std::unique_ptr<BufferSlab>> BufferSlab::Create(ibv_pd* pd, int count,
                                                               size_t buffer_bytes, int access) {
  if (count <= 0 || buffer_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("buffer slab of ", count, " x ", buffer_bytes,
                                                   " bytes"));
  }
  const size_t total = static_cast<size_t>(count) * buffer_bytes;
  char* base = AllocAligned(total);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", total, " bytes"));
  }
  std::memset(base, 0, total);
  absl::StatusOr<MrPtr> mr = RegisterMemory(pd, base, total, access);
  if (!mr.ok()) {
    std::free(base);
    return mr.status();
  }
  return std::unique_ptr<BufferSlab>(new BufferSlab(base, count, buffer_bytes, std::move(*mr)));
}

BufferSlab::BufferSlab(char* base, int count, size_t buffer_bytes, MrPtr mr)
    : base_(base), count_(count), buffer_bytes_(buffer_bytes), mr_(std::move(mr)) {
  free_.reserve(count);
  for (int i = count - 1; i >= 0; --i) free_.push_back(i);
}

BufferSlab::~BufferSlab() {
  mr_.reset();  // deregister before freeing the memory
  std::free(base_);
}

int BufferSlab::Get() {
  if (free_.empty()) return -1;
  const int i = free_.back();
  free_.pop_back();
  return i;
}

void BufferSlab::Put(int index) { free_.push_back(index); }

namespace {
// The sum over every LargeBufferPool, for the metrics.
std::atomic<int64_t> g_large_registered{0};
std::atomic<int64_t> g_large_cached{0};
std::atomic<int64_t> g_large_in_use{0};
void MirrorLarge(int64_t registered, int64_t cached, int64_t in_use) {
  g_large_registered.fetch_add(registered, std::memory_order_relaxed);
  g_large_cached.fetch_add(cached, std::memory_order_relaxed);
  g_large_in_use.fetch_add(in_use, std::memory_order_relaxed);
}
int64_t Signed(size_t n) { return static_cast<int64_t>(n); }
}  // namespace

LargeBufferPoolTotals GetLargeBufferPoolTotals() {
  return {g_large_registered.load(std::memory_order_relaxed),
          g_large_cached.load(std::memory_order_relaxed),
          g_large_in_use.load(std::memory_order_relaxed)};
}

// The MRs one pool registered for lent regions, by region. Shared between
// the pool and the regions: whichever dies first deregisters.
class ExternalMrTable {
 public:
  explicit ExternalMrTable(ibv_pd* pd) : pd_(pd) {}
  // The region's MR in this pool's PD, registered on first use.
  absl::StatusOr<ibv_mr*> Get(const std::shared_ptr<ExternalMrTable>& self, ExternalRegion* region,
                              int access) {
    absl::MutexLock lock(&mu_);
    if (dead_) return absl::FailedPreconditionError("buffer pool is shutting down");
    auto it = mrs_.find(region);
    if (it != mrs_.end()) return it->second.get();
    absl::StatusOr<MrPtr> mr = RegisterMemory(pd_, region->data_, region->size_, access);
    if (!mr.ok()) return mr.status();
    ibv_mr* raw = mr->get();
    mrs_.emplace(region, std::move(*mr));
    absl::MutexLock region_lock(&region->mu_);
    region->tables_.push_back(self);
    return raw;
  }
  // The region is dying: its MR goes.
  void Forget(const ExternalRegion* region) {
    absl::MutexLock lock(&mu_);
    mrs_.erase(region);
  }
  // The pool is dying: every MR goes.
  void Close() {
    absl::MutexLock lock(&mu_);
    dead_ = true;
    mrs_.clear();
  }

 private:
  ibv_pd* const pd_;
  absl::Mutex mu_;
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<const ExternalRegion*, MrPtr> mrs_ ABSL_GUARDED_BY(mu_);
};

ExternalRegion::ExternalRegion(char* data, size_t size, std::shared_ptr<void> owner)
    : data_(data), size_(size), owner_(std::move(owner)) {}

ExternalRegion::ExternalRegion(std::shared_ptr<void> pool_owner, LargeBufferPool* pool,
                               LargeBuffer* buffer, size_t offset, size_t size)
    : data_(buffer->data + offset),
      size_(size),
      home_pool_(pool),
      home_buffer_(buffer),
      owner_(std::move(pool_owner)) {}

ExternalRegion::~ExternalRegion() {
  std::vector<std::weak_ptr<ExternalMrTable>> tables;
  {
    absl::MutexLock lock(&mu_);
    tables.swap(tables_);
  }
  for (const std::weak_ptr<ExternalMrTable>& weak : tables) {
    if (std::shared_ptr<ExternalMrTable> table = weak.lock()) table->Forget(this);
  }
  // Only then may the memory go: back to its pool (kept alive by owner_,
  // destroyed after this body), or freed by owner_.
  if (home_pool_ != nullptr) home_pool_->Put(home_buffer_);
}

void ExternalRegion::KeptPastItsCall() {
  if (home_pool_ != nullptr) home_pool_->ExemptFromLimit(home_buffer_, size_);
}

absl::StatusOr<LargeBuffer*> LargeBufferPool::Lend(std::shared_ptr<ExternalRegion> region,
                                                   size_t offset, size_t length) {
  if (offset > region->size() || length > region->size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("attachment of ", length, " bytes at offset ", offset,
                                              " leaves its buffer of ", region->size(), " bytes"));
  }
  auto b = std::make_unique<LargeBuffer>();
  b->data = region->data() + offset;
  b->capacity = length;
  if (access_ == kWindowedAccess) {
    if (region->home_pool_ == this) {
      b->borrowed_mr = region->home_buffer_->mr.get();
    } else {
      // Bind rights only: a lent region is exposed to READ and never
      // written by the NIC, so read-only memory (a PROT_READ mapping) may
      // be lent too.
      absl::StatusOr<ibv_mr*> mr =
          external_mrs_->Get(external_mrs_, region.get(), IBV_ACCESS_MW_BIND);
      if (!mr.ok()) return mr.status();
      b->borrowed_mr = *mr;
    }
  } else {
    // Exposed through this MR's own rkey: one registration per loan, gone
    // with it. Remote READ only: the peer that pulls the attachment may not
    // write into the sender's memory through that rkey.
    absl::StatusOr<MrPtr> mr =
        RegisterMemory(pd_, b->data, length == 0 ? 1 : length, IBV_ACCESS_REMOTE_READ);
    if (!mr.ok()) return mr.status();
    b->mr = std::move(*mr);
  }
  b->external = std::move(region);
  absl::MutexLock lock(&mu_);
  ++outstanding_;
  return b.release();
}

Attachment CopyToAttachment(const char* bytes, size_t length) {
  char* data = AllocAligned(length);
  CHECK(data != nullptr) << "cannot allocate " << length << " bytes for an attachment";
  if (length > 0) std::memcpy(data, bytes, length);
  Attachment a;
  a.region = std::make_shared<ExternalRegion>(
      data, length, std::shared_ptr<void>(data, [](void* p) { std::free(p); }));
  a.length = length;
  return a;
}

LargeBufferPool::LargeBufferPool(ibv_pd* pd, size_t limit_bytes, size_t keep_bytes, int access)
    : pd_(pd),
      access_(access),
      limit_bytes_(limit_bytes),
      keep_bytes_(keep_bytes),
      external_mrs_(std::make_shared<ExternalMrTable>(pd)) {}

LargeBufferPool::~LargeBufferPool() {
  external_mrs_->Close();
  absl::MutexLock lock(&mu_);
  LOG_IF(ERROR, outstanding_ != 0) << outstanding_ << " large buffers still in use at pool exit";
  for (auto& [size, b] : free_) {
    MirrorLarge(0, -Signed(b->capacity), 0);
    FreeLocked(b);
  }
  free_.clear();
}

void LargeBufferPool::FreeLocked(LargeBuffer* b) {
  counted_bytes_ -= b->capacity;
  MirrorLarge(-Signed(b->capacity), 0, 0);
  b->mr.reset();
  std::free(b->data);
  delete b;
}

absl::StatusOr<LargeBuffer*> LargeBufferPool::Get(size_t bytes) {
  const size_t want = (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
  absl::MutexLock lock(&mu_);
  // Reuse the smallest free buffer that fits and wastes at most half of it.
  auto it = free_.lower_bound(want);
  if (it != free_.end() && it->first <= 2 * want) {
    LargeBuffer* b = it->second;
    free_bytes_ -= b->capacity;
    free_.erase(it);
    ++outstanding_;
    MirrorLarge(0, -Signed(b->capacity), Signed(b->capacity));
    return b;
  }
  // Make room under the limit by dropping cached buffers that did not fit.
  while (limit_bytes_ != 0 && counted_bytes_ + want > limit_bytes_ && !free_.empty()) {
    auto victim = free_.begin();
    free_bytes_ -= victim->second->capacity;
    MirrorLarge(0, -Signed(victim->second->capacity), 0);
    FreeLocked(victim->second);
    free_.erase(victim);
  }
  if (limit_bytes_ != 0 && counted_bytes_ + want > limit_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "large buffer of ", want, " bytes would exceed the pool limit of ", limit_bytes_,
        " bytes (", counted_bytes_, " in use)"));
  }
  char* data = AllocAligned(want);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", want, " bytes"));
  }
  absl::StatusOr<MrPtr> mr = RegisterMemory(pd_, data, want, access_);
  if (!mr.ok()) {
    std::free(data);
    return mr.status();
  }
  auto* b = new LargeBuffer;
  b->data = data;
  b->capacity = want;
  b->mr = std::move(*mr);
  counted_bytes_ += want;
  ++outstanding_;
  MirrorLarge(Signed(want), 0, Signed(want));
  return b;
}

void LargeBufferPool::Put(LargeBuffer* b) {
  if (b == nullptr) return;
  std::shared_ptr<ExternalRegion> lent;  // destroyed after the lock
  absl::MutexLock lock(&mu_);
  if (b->revoke_pending > 0) {
    // A peer may still reach it until the invalidation retires.
    b->put_while_pending = true;
    return;
  }
  PutLocked(b, &lent);
}

void LargeBufferPool::MarkRevokePending(LargeBuffer* b) {
  absl::MutexLock lock(&mu_);
  ++b->revoke_pending;
}

void LargeBufferPool::RevokeDone(LargeBuffer* b) {
  std::shared_ptr<ExternalRegion> lent;  // destroyed after the lock
  absl::MutexLock lock(&mu_);
  --b->revoke_pending;
  if (b->revoke_pending == 0 && b->put_while_pending) {
    b->put_while_pending = false;
    PutLocked(b, &lent);
  }
}

void LargeBufferPool::ExemptFromLimit(LargeBuffer* b, size_t bytes) {
  const size_t exempt =
      std::min(b->capacity, (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule);
  absl::MutexLock lock(&mu_);
  if (b->kept_by_application != 0 || exempt == 0) return;
  b->kept_by_application = exempt;
  counted_bytes_ -= exempt;
  kept_bytes_ += exempt;
}

void LargeBufferPool::CountAgainstLimitLocked(LargeBuffer* b) {
  if (b->kept_by_application == 0) return;
  kept_bytes_ -= b->kept_by_application;
  counted_bytes_ += b->kept_by_application;
  b->kept_by_application = 0;
}

void LargeBufferPool::PutLocked(LargeBuffer* b, std::shared_ptr<ExternalRegion>* lent) {
  --outstanding_;
  CountAgainstLimitLocked(b);
  if (b->external != nullptr) {
    // Lent memory is never reused. The region may die with this buffer,
    // and its destructor takes this pool's lock when it lies in one of
    // our buffers: the caller destroys it once the lock is released.
    *lent = std::move(b->external);
    b->mr.reset();
    delete b;
    return;
  }
  MirrorLarge(0, 0, -Signed(b->capacity));
  if (free_bytes_ + b->capacity > keep_bytes_) {
    FreeLocked(b);
    return;
  }
  free_bytes_ += b->capacity;
  MirrorLarge(0, Signed(b->capacity), 0);
  free_.emplace(b->capacity, b);
}

absl::Status LargeBufferPool::Rekey(LargeBuffer* b) {
  // Deregistering invalidates the old rkey; the new MR gets a fresh one.
  b->mr.reset();
  if (b->external != nullptr) return absl::OkStatus();  // its loan's MR was the only one
  absl::StatusOr<MrPtr> mr = RegisterMemory(pd_, b->data, b->capacity, access_);
  if (!mr.ok()) {
    absl::MutexLock lock(&mu_);
    --outstanding_;
    CountAgainstLimitLocked(b);
    MirrorLarge(0, 0, -Signed(b->capacity));
    FreeLocked(b);
    return mr.status();
  }
  b->mr = std::move(*mr);
  return absl::OkStatus();
}

void LargeBufferPool::RekeyAndPut(LargeBuffer* b) {
  if (b == nullptr) return;
  absl::Status s = Rekey(b);
  if (!s.ok()) {
    LOG(WARNING) << "dropping a large buffer whose rkey could not be renewed: " << s;
    return;
  }
  Put(b);
}

size_t LargeBufferPool::counted_bytes() const {
  absl::MutexLock lock(&mu_);
  return counted_bytes_;
}

size_t LargeBufferPool::kept_by_application_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

}  // namespace internal
}  // namespace rdmarpc
