// pd_test.cc: a PD cannot be freed while MRs, QPs or SRQs made on it live,
// as ibv_dealloc_pd reports EBUSY on hardware; reg_mr pins only memory the
// process can access as asked.
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace {

class PdTest : public testing::SoftDeviceTest {};

// ibv_reg_mr pins the pages with get_user_pages (ib_umem_get), writable ones
// when the access lets the device write (local write, remote write or
// atomic): unmapped, PROT_NONE or (for such access) read-only memory fails
// with EFAULT there, rather than the device faulting on it later.
TEST_F(PdTest, RegMrOfMemoryTheProcessCannotAccessAsAskedIsEfault) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Three pages: read-only, PROT_NONE, then unmapped.
  auto* base = static_cast<uint8_t*>(
      ::mmap(nullptr, 3 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  ASSERT_EQ(::mprotect(base + page, page, PROT_NONE), 0);
  ASSERT_EQ(::munmap(base + 2 * page, page), 0);
  for (int access : {static_cast<int>(IBV_ACCESS_LOCAL_WRITE),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC}) {
    errno = 0;
    EXPECT_EQ(reg_mr(pd, base, page, access), nullptr) << "access " << access;
    EXPECT_EQ(errno, EFAULT) << "access " << access;
  }
  errno = 0;
  EXPECT_EQ(reg_mr(pd, base + page, page, 0), nullptr);  // PROT_NONE
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(reg_mr(pd, base + 2 * page, page, 0), nullptr);  // unmapped
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(reg_mr(pd, base + page - 8, 16, IBV_ACCESS_REMOTE_READ), nullptr);  // straddles
  EXPECT_EQ(errno, EFAULT);
  // Read-only memory for remote reads only is fine, as on hardware.
  ibv_mr* mr = reg_mr(pd, base, page, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(::munmap(base, 2 * page), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

TEST_F(PdTest, DeallocWithLiveMrIsEbusy) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  std::vector<char> buf(4096);
  ibv_mr* mr = reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);
  ASSERT_EQ(dereg_mr(mr), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
}

TEST_F(PdTest, DeallocWithLiveQpOrSrqIsEbusy) {
  ibv_pd* pd = alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr sattr{};
  sattr.attr.max_wr = 4;
  sattr.attr.max_sge = 1;
  ibv_srq* srq = create_srq(pd, &sattr);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr qattr{};
  qattr.send_cq = cq;
  qattr.recv_cq = cq;
  qattr.qp_type = IBV_QPT_RC;
  qattr.cap.max_send_wr = 4;
  qattr.cap.max_recv_wr = 4;
  qattr.cap.max_send_sge = 1;
  qattr.cap.max_recv_sge = 1;
  ibv_qp* qp = create_qp(pd, &qattr);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);
  ASSERT_EQ(destroy_qp(qp), 0);
  EXPECT_EQ(dealloc_pd(pd), EBUSY);  // the SRQ still lives
  ASSERT_EQ(destroy_srq(srq), 0);
  EXPECT_EQ(dealloc_pd(pd), 0);
  EXPECT_EQ(destroy_cq(cq), 0);
}

}  // namespace
}  // namespace softrdma
