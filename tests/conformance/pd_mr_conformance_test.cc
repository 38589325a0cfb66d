// Protection domains and memory regions (ibv_alloc_pd(3), ibv_reg_mr(3)):
//  - ibv_dealloc_pd fails with EBUSY while an MR (or QP) of the PD lives;
//  - keys of live MRs are distinct (lkey vs lkey, rkey vs rkey; an MR's lkey
//    and rkey may be equal, as on mlx5);
//  - after ibv_dereg_mr the keys are dead: a local use is IBV_WC_LOC_PROT_ERR
//    and a remote one IBV_WC_REM_ACCESS_ERR, also for a WR posted before the
//    dereg that the device executes (or retransmits) after it;
//  - registration past RLIMIT_MEMLOCK fails with ENOMEM for a process without
//    CAP_IPC_LOCK (ib_umem_get counts the pages an MR pins against it);
//  - remote write access without local write is refused at registration
//    (ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC
//    is set, then IBV_ACCESS_LOCAL_WRITE must be set too") with EINVAL.
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

using internal::Verbs;

class PdMrConformance : public ConformanceTest {};

TEST_F(PdMrConformance, DeallocPdWithLiveMrIsEbusy) {
  ibv_pd* pd = Verbs().alloc_pd(context());
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(4096);
  ibv_mr* mr = Verbs().reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(Verbs().dealloc_pd(pd), EBUSY);
  EXPECT_EQ(Verbs().dereg_mr(mr), 0);
  EXPECT_EQ(Verbs().dealloc_pd(pd), 0);
}

TEST_F(PdMrConformance, DeallocPdWithLiveQpIsEbusy) {
  EXPECT_EQ(Verbs().dealloc_pd(client_pd()), EBUSY);
  EXPECT_EQ(Verbs().dealloc_pd(server_pd()), EBUSY);
}

// Runs in a child process, which drops CAP_IPC_LOCK and lowers its own
// RLIMIT_MEMLOCK to 64 KiB, then registers on a context of its own (a context
// does not survive fork). Returns 0, or the number of the check that failed.
int MemlockChild() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &h, d) != 0) return 1;
  d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  if (syscall(SYS_capset, &h, d) != 0) return 2;
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return 3;
  r.rlim_cur = 64 << 10;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < r.rlim_cur) r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_MEMLOCK, &r) != 0) return 4;
  int n = 0;
  ibv_device** list = Verbs().get_device_list(&n);
  if (list == nullptr || n < 1) return 5;
  ibv_context* ctx = Verbs().open_device(list[0]);
  Verbs().free_device_list(list);
  if (ctx == nullptr) return 6;
  ibv_pd* pd = Verbs().alloc_pd(ctx);
  if (pd == nullptr) return 7;
  // Page-aligned buffers, so each MR pins exactly its own pages.
  void* a = nullptr;
  void* b = nullptr;
  if (posix_memalign(&a, 4096, 128 << 10) != 0 || posix_memalign(&b, 4096, 48 << 10) != 0) {
    return 8;
  }
  errno = 0;
  if (Verbs().reg_mr(pd, a, 128 << 10, IBV_ACCESS_LOCAL_WRITE) != nullptr) return 9;
  if (errno != ENOMEM) return 10;
  ibv_mr* small = Verbs().reg_mr(pd, a, 32 << 10, IBV_ACCESS_LOCAL_WRITE);
  if (small == nullptr) return 11;
  errno = 0;  // 32 KiB + 48 KiB > 64 KiB
  if (Verbs().reg_mr(pd, b, 48 << 10, IBV_ACCESS_LOCAL_WRITE) != nullptr) return 12;
  if (errno != ENOMEM) return 13;
  if (Verbs().dereg_mr(small) != 0) return 14;
  ibv_mr* fits = Verbs().reg_mr(pd, b, 48 << 10, IBV_ACCESS_LOCAL_WRITE);
  if (fits == nullptr) return 15;  // the deregistered pages count no more
  Verbs().dereg_mr(fits);
  Verbs().dealloc_pd(pd);
  Verbs().close_device(ctx);
  return 0;
}

TEST_F(PdMrConformance, RegMrPastRlimitMemlockIsEnomemWithoutCapIpcLock) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(MemlockChild());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "MemlockChild's check " << WEXITSTATUS(status) << " failed";
}

// SEND 1 finds no receive and waits out the responder's RNR timer (81.92 ms);
// SEND 2, posted behind it, has not executed when its MR is deregistered, so
// when the device sends it (the retransmission after the wait reads the
// buffer again) its lkey is dead: LOC_PROT_ERR, while SEND 1 succeeds.
TEST_F(PdMrConformance, MrDeregisteredAfterPostFailsTheWrWhenItExecutes) {
  ibv_qp_attr a{};
  a.min_rnr_timer = 26;  // 81.92 ms
  ASSERT_EQ(Verbs().modify_qp(server_qp(), &a, IBV_QP_MIN_RNR_TIMER), 0);
  std::unique_ptr<Region> first = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> second = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(first && second && dst);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 1, *first, 0, 256), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *second, 0, 256), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // SEND 1 is RNR-waiting
  ASSERT_EQ(second->Deregister(), 0);
  ASSERT_EQ(PostRecv(server_qp(), 10, *dst, 0, 4096), 0);
  ASSERT_EQ(PostRecv(server_qp(), 11, *dst, 4096, 4096), 0);
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  EXPECT_EQ((*wcs)[0].wr_id, 1u);
  EXPECT_EQ((*wcs)[0].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[0].status);
  EXPECT_EQ((*wcs)[1].wr_id, 2u);
  EXPECT_EQ((*wcs)[1].status, IBV_WC_LOC_PROT_ERR) << WcStatusName((*wcs)[1].status);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
}

TEST_F(PdMrConformance, KeysOfLiveMrsAreDistinct) {
  constexpr int kRegions = 16;
  std::vector<std::unique_ptr<Region>> regions;
  std::set<uint32_t> lkeys;
  std::set<uint32_t> rkeys;
  for (int i = 0; i < kRegions; ++i) {
    // Alternate PDs: keys are unique per device, not per PD.
    regions.push_back(NewRegion(i % 2 == 0 ? client_pd() : server_pd(), 4096,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ));
    ASSERT_TRUE(regions.back());
    lkeys.insert(regions.back()->lkey());
    rkeys.insert(regions.back()->rkey());
  }
  EXPECT_EQ(lkeys.size(), static_cast<size_t>(kRegions));
  EXPECT_EQ(rkeys.size(), static_cast<size_t>(kRegions));
}

TEST_F(PdMrConformance, RemoteWriteWithoutLocalWriteIsEinval) {
  std::vector<uint8_t> buf(4096);
  errno = 0;
  ibv_mr* mr = Verbs().reg_mr(client_pd(), buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (mr != nullptr) Verbs().dereg_mr(mr);
}

TEST_F(PdMrConformance, DeregisteredLkeyIsLocProtErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 1, *dst, 0, 4096), 0);
  ASSERT_EQ(src->Deregister(), 0);
  // The memory is still allocated; only the key is gone.
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 64), 0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 2u);
  EXPECT_EQ(wc->status, IBV_WC_LOC_PROT_ERR) << WcStatusName(wc->status);
}

TEST_F(PdMrConformance, DeregisteredRkeyIsRemAccessErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(
      server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src && dst);
  src->data()[0] = 0x99;
  // The key works before dereg ...
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1, *src, 0, 8, dst->addr(), dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> ok = PollOne(client_cq());
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->status, IBV_WC_SUCCESS) << WcStatusName(ok->status);
  ASSERT_EQ(dst->data()[0], 0x99);
  // ... and not after.
  ASSERT_EQ(dst->Deregister(), 0);
  src->data()[0] = 0x55;
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 2, *src, 0, 8, dst->addr(), dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 2u);
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR) << WcStatusName(wc->status);
  EXPECT_EQ(dst->data()[0], 0x99);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
