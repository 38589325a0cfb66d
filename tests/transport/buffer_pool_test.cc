// BufferSlab and LargeBufferPool over a softrdma PD.
#include "runtime/transport/buffer_pool.h"

#include <set>

#include "gtest/gtest.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/verbs/verbs.h"

namespace rdmarpc {
namespace internal {
namespace {

class SoftPd {
 public:
  SoftPd() {
    const VerbsApi& v = SoftVerbs();
    int n = 0;
    list_ = v.get_device_list(&n);
    EXPECT_GT(n, 0);
    ctx_ = v.open_device(list_[0]);
    EXPECT_NE(ctx_, nullptr);
    pd_ = v.alloc_pd(ctx_);
    EXPECT_NE(pd_, nullptr);
  }
  ~SoftPd() {
    const VerbsApi& v = SoftVerbs();
    v.dealloc_pd(pd_);
    v.close_device(ctx_);
    v.free_device_list(list_);
  }
  ibv_pd* pd() const { return pd_; }

 private:
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

TEST(BufferSlab, GetPutAndExhaustion) {
  SoftPd pd;
  absl::StatusOr<std::unique_ptr<BufferSlab>> slab = BufferSlab::Create(pd.pd(), 4, 1024, kLocalAccess);
  ASSERT_TRUE(slab.ok()) << slab.status();
  std::set<int> got;
  for (int i = 0; i < 4; ++i) got.insert((*slab)->Get());
  EXPECT_EQ(got, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ((*slab)->Get(), -1);
  EXPECT_EQ((*slab)->data(1) - (*slab)->data(0), 1024);
  (*slab)->Put(2);
  EXPECT_EQ((*slab)->Get(), 2);
}

TEST(BufferSlab, RejectsEmptyShape) {
  SoftPd pd;
  EXPECT_EQ(BufferSlab::Create(pd.pd(), 0, 1024, kLocalAccess).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LargeBufferPool, ReusesWithoutRegistering) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 0, 1 << 30);
  absl::StatusOr<LargeBuffer*> a = pool.Get(100000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->capacity, 131072u);
  LargeBuffer* first = *a;
  pool.Put(first);
  const uint64_t regs = softrdma::GetStats().reg_mr;
  absl::StatusOr<LargeBuffer*> b = pool.Get(120000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, first);
  EXPECT_EQ(softrdma::GetStats().reg_mr, regs);
  pool.Put(*b);
}

TEST(LargeBufferPool, ABufferPutWhileItsWindowIsRevokedWaitsForRevokeDone) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 0, 1 << 30, kWindowedAccess);
  absl::StatusOr<LargeBuffer*> a = pool.Get(100000);
  ASSERT_TRUE(a.ok());
  LargeBuffer* held = *a;
  const int64_t base = GetLargeBufferPoolTotals().in_use_bytes - 131072;
  pool.MarkRevokePending(held);
  pool.Put(held);  // a peer may still reach it: not reusable yet
  EXPECT_EQ(GetLargeBufferPoolTotals().in_use_bytes - base, 131072);
  absl::StatusOr<LargeBuffer*> b = pool.Get(100000);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*b, held);
  pool.RevokeDone(held);  // now it is: only b is in use
  EXPECT_EQ(GetLargeBufferPoolTotals().in_use_bytes - base, 131072);
  absl::StatusOr<LargeBuffer*> c = pool.Get(100000);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, held);
  // Revoked before it was Put: Put makes it reusable at once.
  pool.MarkRevokePending(*c);
  pool.RevokeDone(*c);
  pool.Put(*c);
  absl::StatusOr<LargeBuffer*> d = pool.Get(100000);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, held);
  pool.Put(*d);
  pool.Put(*b);
  EXPECT_EQ(GetLargeBufferPoolTotals().in_use_bytes - base, 0);
}

TEST(LargeBufferPool, ExhaustionNamesTheSizes) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 256 * 1024, 256 * 1024);
  absl::StatusOr<LargeBuffer*> a = pool.Get(200 * 1024);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<LargeBuffer*> b = pool.Get(100 * 1024);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("262144"), absl::string_view::npos) << b.status();
  pool.Put(*a);
  // Freed memory can be reused for a different size under the limit.
  absl::StatusOr<LargeBuffer*> c = pool.Get(100 * 1024);
  ASSERT_TRUE(c.ok()) << c.status();
  pool.Put(*c);
}

TEST(LargeBufferPool, AKeptAttachmentsBytesLeaveTheLimitUntilItsBufferComesBack) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 1 << 20, 1 << 20);  // limit and cache: 1 MiB
  // A 640 KiB pull buffer: a 512 KiB message, then a 100,000-byte
  // attachment that the application keeps.
  absl::StatusOr<LargeBuffer*> a = pool.Get((512 << 10) + 100000);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ((*a)->capacity, 640u << 10);
  EXPECT_EQ(pool.counted_bytes(), 640u << 10);
  // Only the attachment's bytes (rounded to 64 KiB) leave the limit; the
  // message's stay counted. Twice is once.
  pool.ExemptFromLimit(*a, 100000);
  pool.ExemptFromLimit(*a, 100000);
  EXPECT_EQ(pool.counted_bytes(), 512u << 10);
  EXPECT_EQ(pool.kept_by_application_bytes(), 128u << 10);
  // So 512 KiB more fit under the 1 MiB limit, and not a byte beyond.
  absl::StatusOr<LargeBuffer*> b = pool.Get(512 << 10);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool.Get(1).status().code(), absl::StatusCode::kResourceExhausted);
  pool.Put(*b);
  // Back in the pool, the kept bytes count again: a is whole once more,
  // and as b (cached) leaves no room for it under the 1 MiB cache, freed.
  pool.Put(*a);
  EXPECT_EQ(pool.kept_by_application_bytes(), 0u);
  EXPECT_EQ(pool.counted_bytes(), 512u << 10);
}

TEST(LargeBufferPool, AnExemptBufferPutWhileRevokedCountsAgainOnceRevoked) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 0, 1 << 30, kWindowedAccess);
  absl::StatusOr<LargeBuffer*> a = pool.Get(1 << 20);
  ASSERT_TRUE(a.ok());
  pool.ExemptFromLimit(*a, 1 << 20);
  EXPECT_EQ(pool.counted_bytes(), 0u);
  EXPECT_EQ(pool.kept_by_application_bytes(), 1u << 20);
  pool.MarkRevokePending(*a);
  pool.Put(*a);  // held back: still the application's, still exempt
  EXPECT_EQ(pool.kept_by_application_bytes(), 1u << 20);
  pool.RevokeDone(*a);
  EXPECT_EQ(pool.kept_by_application_bytes(), 0u);
  EXPECT_EQ(pool.counted_bytes(), 1u << 20);  // cached for reuse, counted
}

TEST(LargeBufferPool, RekeyChangesTheRkey) {
  SoftPd pd;
  LargeBufferPool pool(pd.pd(), 0, 1 << 30);
  absl::StatusOr<LargeBuffer*> a = pool.Get(4096);
  ASSERT_TRUE(a.ok());
  const uint32_t old_rkey = (*a)->rkey();
  char* const data = (*a)->data;
  ASSERT_TRUE(pool.Rekey(*a).ok());
  EXPECT_NE((*a)->rkey(), old_rkey);
  EXPECT_EQ((*a)->data, data);
  pool.Put(*a);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
