// qp_test.cc: RC QP semantics over softrdma: SEND/RECV (+imm), RDMA WRITE
// (+imm) and READ, key and bounds checks, RNR, queue limits, and the
// completion channel.
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <atomic>
#include <numeric>
#include <thread>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

void Fill(Buffer& b, uint8_t seed) {
  for (size_t i = 0; i < b.data.size(); ++i) b.data[i] = static_cast<uint8_t>(seed + i * 7);
}

TEST(QpSendRecv, SendDeliversDataAndCompletesBothSides) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 4096, kAll);
  Buffer sbuf(p.client_pd, 4096, kAll);
  Fill(sbuf, 3);
  ASSERT_EQ(PostRecv(p.server->qp, 11, rbuf, 0, 4096), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 22, sbuf, 0, 1000), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 1000u);
  EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
  EXPECT_EQ(wc.qp_num, p.server->qp->qp_num);
  EXPECT_EQ(wc.src_qp, p.client->qp->qp_num);
  EXPECT_EQ(std::memcmp(rbuf.data.data(), sbuf.data.data(), 1000), 0);
  EXPECT_EQ(rbuf.data[1000], 0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 22u);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
}

TEST(QpSendRecv, SendWithImmCarriesImmVerbatim) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  Fill(sbuf, 9);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 256), 0);
  const uint32_t imm = htonl(0xdeadbeef);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND_WITH_IMM, 2, sbuf, 0, 40, imm, 0, 0,
                     IBV_SEND_INLINE),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 40u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.imm_data, imm);
  EXPECT_EQ(std::memcmp(rbuf.data.data(), sbuf.data.data(), 40), 0);
}

TEST(QpSendRecv, ManySendsArriveInOrder) {
  PairOptions opt;
  opt.max_send_wr = 64;
  opt.max_recv_wr = 64;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 64 * 8, kAll);
  Buffer sbuf(p.client_pd, 64 * 8, kAll);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 8, 8), 0);
    std::memcpy(&sbuf.data[i * 8], &i, sizeof(i));
  }
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1000 + i, sbuf, i * 8, 8), 0);
  }
  for (int i = 0; i < 64; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(i));
    int got;
    std::memcpy(&got, &rbuf.data[i * 8], sizeof(got));
    EXPECT_EQ(got, i);
  }
  for (int i = 0; i < 64; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.wr_id, 1000u + i);
  }
}

TEST(QpSendRecv, UnsignalledSendsMakeNoCompletion) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 128), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 128, 128), 0);
  ibv_sge sge{sbuf.addr(), 16, sbuf.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = 0;  // unsignalled
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 6, sbuf, 0, 16), 0);
  std::vector<ibv_wc> wcs = Drain(p.client_cq, 100);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 6u);
  EXPECT_EQ(Drain(p.server_cq, 50).size(), 2u);
}

TEST(QpSendRecv, ShortReceiveIsLocLenErrAndRemInvReq) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 10), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 10, 10), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, sbuf, 0, 100), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
  EXPECT_EQ(p.server->qp->state, IBV_QPS_ERR);
}

TEST(QpSendRecv, NoReceiveExhaustsRnrRetries) {
  PairOptions opt;
  opt.rnr_retry = 1;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 256, kAll);
  ResetStats();
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 9, sbuf, 0, 16), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 10, sbuf, 0, 16), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 10u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
  // rnr_retry = 1: one retry, then the error.
  EXPECT_EQ(GetStats().rnr_retries, 1u);
}

TEST(QpSendRecv, LateReceiveWithinRetryBudgetDeliversInOrder) {
  ConnectedPair p;  // rnr_retry 7: retry forever
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  Fill(sbuf, 1);
  ResetStats();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 50 + i, sbuf, i * 16, 16), 0);
  }
  // Let it be refused a few times.
  std::vector<ibv_wc> none = Drain(p.client_cq, 30);
  EXPECT_TRUE(none.empty());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 64, 64), 0);
  for (int i = 0; i < 3; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(std::memcmp(&rbuf.data[i * 64], &sbuf.data[i * 16], 16), 0);
  }
  for (int i = 0; i < 3; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.client_cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 50u + i);
  }
  EXPECT_GE(GetStats().rnr_retries, 1u);
}

TEST(QpLimits, SendQueueOverflowIsEnomemWithBadWr) {
  PairOptions opt;
  opt.max_send_wr = 2;
  opt.rnr_retry = 7;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 256, kAll);
  // No receives posted: the sends stay outstanding (RNR), filling the queue.
  ibv_sge sge{sbuf.addr(), 8, sbuf.mr->lkey};
  ibv_send_wr wr[3] = {};
  for (int i = 0; i < 3; ++i) {
    wr[i].wr_id = i;
    wr[i].opcode = IBV_WR_SEND;
    wr[i].sg_list = &sge;
    wr[i].num_sge = 1;
    wr[i].send_flags = IBV_SEND_SIGNALED;
    wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.client->qp, &wr[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &wr[2]);
}

TEST(QpLimits, RecvQueueOverflowIsEnomem) {
  PairOptions opt;
  opt.max_recv_wr = 2;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 8), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 8, 8), 0);
  EXPECT_EQ(PostRecv(p.server->qp, 3, rbuf, 16, 8), ENOMEM);
}

TEST(QpLimits, InlineOverCapIsEinval) {
  PairOptions opt;
  opt.max_inline = 64;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 256, kAll);
  EXPECT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, sbuf, 0, 65, 0, 0, 0, IBV_SEND_INLINE),
            EINVAL);
  ibv_sge sge[5];
  for (auto& s : sge) s = {sbuf.addr(), 1, sbuf.mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sge;
  wr.num_sge = 5;  // max_sge is 4
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.client->qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  wr.num_sge = 1;
  wr.opcode = IBV_WR_TSO;  // not supported (a UD opcode)
  EXPECT_EQ(ibv_post_send(p.client->qp, &wr, &bad), EINVAL);
}

TEST(QpLimits, BadLkeyIsLocProtErr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 256, kAll);
  ibv_sge sge{sbuf.addr(), 16, sbuf.mr->lkey ^ 0x5a5a5a5a};
  ibv_send_wr wr{};
  wr.wr_id = 77;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
}

TEST(QpRdma, WriteAndWriteWithImmLandInPeerMemory) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 8192, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  Buffer src(p.client_pd, 8192, kAll);
  Fill(src, 42);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, src, 0, 4096, 0, target.addr() + 100,
                     target.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(&target.data[100], src.data.data(), 4096), 0);
  EXPECT_EQ(target.data[99], 0);
  EXPECT_EQ(target.data[4196], 0);
  // A plain WRITE consumes no receive and makes no completion at the target.
  EXPECT_TRUE(Drain(p.server_cq, 20).empty());

  ASSERT_EQ(PostRecv(p.server->qp, 5, rbuf, 0, 64), 0);
  const uint32_t imm = htonl(1234567);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 2, src, 0, 3000, imm,
                     target.addr() + 5000, target.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.imm_data, imm);
  EXPECT_EQ(std::memcmp(&target.data[5000], src.data.data(), 3000), 0);
  EXPECT_EQ(rbuf.data, std::vector<uint8_t>(64, 0));  // the receive's SGE untouched
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);
}

TEST(QpRdma, ReadFetchesPeerMemory) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  Fill(remote, 17);
  Buffer local(p.client_pd, 8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 3, local, 10, 6000, 0, remote.addr() + 7,
                     remote.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, 6000u);
  EXPECT_EQ(std::memcmp(&local.data[10], &remote.data[7], 6000), 0);
}

TEST(QpRdma, LargeWriteAndReadOf16MiB) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  constexpr size_t kSize = 16 << 20;
  Buffer remote(p.server_pd, kSize, kAll);
  Buffer local(p.client_pd, kSize, kAll);
  Fill(local, 5);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, local, 0, kSize, 0, remote.addr(),
                     remote.mr->rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc, 20000));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.data, local.data);
  std::fill(local.data.begin(), local.data.end(), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 2, local, 0, kSize, 0, remote.addr(),
                     remote.mr->rkey),
            0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc, 20000));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(remote.data, local.data);
}

struct AccessCase {
  const char* name;
  int target_access;
  ibv_wr_opcode opcode;
  int rkey_xor;      // corrupt the rkey
  size_t offset;     // start inside the target
  uint32_t length;
};

// ctest names a parameterised case after what gtest prints for its value;
// print the case name so the names are readable and stable across builds.
void PrintTo(const AccessCase& c, std::ostream* os) { *os << c.name; }

class QpRemoteAccess : public ::testing::TestWithParam<AccessCase> {};

TEST_P(QpRemoteAccess, ViolationIsRemAccessErrThenFlush) {
  const AccessCase& c = GetParam();
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer target(p.server_pd, 4096, c.target_access);
  Buffer local(p.client_pd, 8192, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 99, rbuf, 0, 64), 0);
  ResetStats();
  ASSERT_EQ(PostSend(p.client->qp, c.opcode, 1, local, 0, c.length, 0, target.addr() + c.offset,
                     target.mr->rkey ^ c.rkey_xor),
            0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 2, local, 0, 8), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.client->qp->state, IBV_QPS_ERR);
  // The responder QP goes to error too (as rxe) and flushes its receive.
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.server->qp->state, IBV_QPS_ERR);
  EXPECT_EQ(target.data, std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(GetStats().rem_access_errors, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QpRemoteAccess,
    ::testing::Values(
        AccessCase{"WrongRkeyWrite", kAll, IBV_WR_RDMA_WRITE, 0x1111, 0, 64},
        AccessCase{"WrongRkeyRead", kAll, IBV_WR_RDMA_READ, 0x1111, 0, 64},
        AccessCase{"WriteOutOfBounds", kAll, IBV_WR_RDMA_WRITE, 0, 4000, 200},
        AccessCase{"ReadOutOfBounds", kAll, IBV_WR_RDMA_READ, 0, 4095, 2},
        AccessCase{"WriteWithoutRemoteWrite", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                   IBV_WR_RDMA_WRITE, 0, 0, 64},
        AccessCase{"ReadWithoutRemoteRead", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                   IBV_WR_RDMA_READ, 0, 0, 64},
        AccessCase{"WriteImmWithoutRemoteWrite", IBV_ACCESS_LOCAL_WRITE,
                   IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, 64}),
    [](const ::testing::TestParamInfo<AccessCase>& info) { return info.param.name; });

int PostAtomic(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, const Buffer& local, uint64_t addr,
               uint32_t rkey, uint64_t compare_add, uint64_t swap) {
  ibv_sge sge{local.addr(), 8, local.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

TEST(QpAtomic, FetchAddAndCompareSwapReturnTheOriginalValue) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  Buffer local(p.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  uint64_t v = 40;
  std::memcpy(remote.data.data(), &v, 8);
  ASSERT_EQ(PostAtomic(p.client->qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, local, remote.addr(),
                       remote.mr->rkey, 2, 0),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  uint64_t got;
  std::memcpy(&got, local.data.data(), 8);
  EXPECT_EQ(got, 40u);
  std::memcpy(&got, remote.data.data(), 8);
  EXPECT_EQ(got, 42u);
  // Compare fails (42 != 7): memory unchanged, original returned.
  ASSERT_EQ(PostAtomic(p.client->qp, IBV_WR_ATOMIC_CMP_AND_SWP, 2, local, remote.addr(),
                       remote.mr->rkey, 7, 100),
            0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&got, local.data.data(), 8);
  EXPECT_EQ(got, 42u);
  std::memcpy(&got, remote.data.data(), 8);
  EXPECT_EQ(got, 42u);
  // Compare matches: swapped.
  ASSERT_EQ(PostAtomic(p.client->qp, IBV_WR_ATOMIC_CMP_AND_SWP, 3, local, remote.addr(),
                       remote.mr->rkey, 42, 100),
            0);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  std::memcpy(&got, local.data.data(), 8);
  EXPECT_EQ(got, 42u);
  std::memcpy(&got, remote.data.data(), 8);
  EXPECT_EQ(got, 100u);
}

TEST(QpAtomic, WithoutRemoteAtomicAccessIsRemAccessErr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 64, kAll);  // no REMOTE_ATOMIC
  Buffer local(p.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostAtomic(p.client->qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, local, remote.addr(),
                       remote.mr->rkey, 1, 0),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

TEST(QpAtomic, MisalignedAddressIsRemInvReqErr) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer remote(p.server_pd, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  Buffer local(p.client_pd, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostAtomic(p.client->qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, local, remote.addr() + 4,
                       remote.mr->rkey, 1, 0),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
}

TEST(QpRdma, DeregisteredRkeyIsRefused) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  std::vector<uint8_t> mem(4096, 0);
  ibv_mr* mr = reg_mr(p.server_pd, mem.data(), mem.size(), kAll);
  ASSERT_NE(mr, nullptr);
  const uint32_t rkey = mr->rkey;
  ASSERT_EQ(dereg_mr(mr), 0);
  Buffer local(p.client_pd, 64, kAll);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 1, local, 0, 64, 0,
                     reinterpret_cast<uint64_t>(mem.data()), rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

TEST(QpSendRecv, ConcurrentPostersOnOneQpLoseNothing) {
  PairOptions opt;
  opt.max_send_wr = 1024;
  opt.max_recv_wr = 1024;
  opt.cqe = 4096;
  ConnectedPair p(opt);
  ASSERT_TRUE(p.ok());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  Buffer rbuf(p.server_pd, kThreads * kPerThread * 8, kAll);
  Buffer sbuf(p.client_pd, kThreads * 8, kAll);
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    ASSERT_EQ(PostRecv(p.server->qp, i, rbuf, i * 8, 8), 0);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::memcpy(&sbuf.data[t * 8], &t, sizeof(t));
      for (int i = 0; i < kPerThread; ++i) {
        // Keep under max_send_wr: the four threads together stay below 1024.
        if (PostSend(p.client->qp, IBV_WR_SEND, t, sbuf, t * 8, 8) != 0) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<int> per_thread(kThreads, 0);
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(p.server_cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(i));  // receives complete in order
    int t;
    std::memcpy(&t, &rbuf.data[i * 8], sizeof(t));
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    per_thread[t]++;
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(per_thread[t], kPerThread);
  std::vector<ibv_wc> sends = Drain(p.client_cq, 200);
  EXPECT_EQ(sends.size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST(Stats, CountWorkRequestsByOpcode) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 4096, kAll);
  Buffer src(p.client_pd, 4096, kAll);
  ResetStats();
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 1024), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 1024, 1024), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 3, rbuf, 3500, 8), 0);  // for WRITE_WITH_IMM
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 1, src, 0, 100), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND_WITH_IMM, 2, src, 0, 300, 5), 0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE, 3, src, 0, 1000, 0, rbuf.addr() + 2048,
                     rbuf.mr->rkey),
            0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 4, src, 0, 10, 6,
                     rbuf.addr() + 3072, rbuf.mr->rkey),
            0);
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_RDMA_READ, 5, src, 0, 50, 0, rbuf.addr(),
                     rbuf.mr->rkey),
            0);
  EXPECT_EQ(Drain(p.client_cq, 100).size(), 5u);
  Stats s = GetStats();
  EXPECT_EQ(s.send, 1u);
  EXPECT_EQ(s.send_with_imm, 1u);
  EXPECT_EQ(s.rdma_write, 1u);
  EXPECT_EQ(s.rdma_write_with_imm, 1u);
  EXPECT_EQ(s.rdma_read, 1u);
  EXPECT_EQ(s.recv, 3u);
  EXPECT_EQ(s.bytes_sent, 100u + 300 + 1000 + 10 + 50);
  EXPECT_EQ(s.post_send_calls, 5u);
  EXPECT_EQ(s.post_recv_calls, 3u);
  EXPECT_EQ(s.max_send_bytes, 300u);
  EXPECT_EQ(s.rnr_retries, 0u);
}

// The counters bench/rpc_bench reads for the per-call verbs budget.
TEST(SoftrdmaStats, CountsSignalledSendsAndPolledCompletions) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer rbuf(p.server_pd, 256, kAll);
  Buffer sbuf(p.client_pd, 256, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  ASSERT_EQ(PostRecv(p.server->qp, 2, rbuf, 64, 64), 0);
  ResetStats();
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 10, sbuf, 0, 16), 0);  // signalled
  ibv_sge sge{sbuf.addr() + 16, 16, sbuf.mr->lkey};
  ibv_send_wr wr = {};
  wr.wr_id = 11;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = 0;  // unsignalled: no CQE on the client
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
  ibv_wc wc;
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 2u);
  ASSERT_TRUE(PollOne(p.client_cq, &wc));
  EXPECT_EQ(wc.wr_id, 10u);
  Stats s = GetStats();
  EXPECT_EQ(s.send, 2u);
  EXPECT_EQ(s.signaled_sends, 1u);
  EXPECT_EQ(s.wc_polled, 3u);
  EXPECT_GE(s.poll_cq_calls, 3u);
  // An empty poll counts as a call and polls nothing.
  EXPECT_EQ(ibv_poll_cq(p.client_cq, 1, &wc), 0);
  Stats after = GetStats();
  EXPECT_EQ(after.poll_cq_calls, s.poll_cq_calls + 1);
  EXPECT_EQ(after.wc_polled, 3u);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
