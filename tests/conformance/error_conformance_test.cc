// Error completions of RC QPs: remote access violations, bad local keys and
// short receives, and the flush of everything posted after the failed WR.
//
// IBA vol. 1 ch. 10 (QP states and error handling) and ibv_poll_cq(3): an error
// completion moves the QP to ERROR; every WR still on it, and any posted
// later, completes with IBV_WC_WR_FLUSH_ERR, in order. On an error WC only
// wr_id, status, qp_num and vendor_err are valid, so opcode and byte_len are
// not asserted there.
#include <arpa/inet.h>

#include <cstring>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

class ErrorConformance : public ConformanceTest {
 protected:
  // Posts `wr` (signalled, wr_id 1), then a signalled 8-byte SEND (wr_id 2)
  // and expects: wr 1 fails with `status`, wr 2 is flushed, nothing more,
  // and the client QP is in ERROR.
  void ExpectFailThenFlush(ibv_send_wr wr, ibv_wc_status status) {
    std::unique_ptr<Region> small = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(small);
    wr.wr_id = 1;
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *small, 0, 8), 0);

    absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), 2);
    ASSERT_TRUE(wcs.ok()) << wcs.status();
    EXPECT_EQ((*wcs)[0].wr_id, 1u);
    EXPECT_EQ((*wcs)[0].status, status) << WcStatusName((*wcs)[0].status);
    EXPECT_EQ((*wcs)[0].qp_num, client_qp()->qp_num);
    EXPECT_EQ((*wcs)[1].wr_id, 2u);
    EXPECT_EQ((*wcs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*wcs)[1].status);
    EXPECT_EQ((*wcs)[1].qp_num, client_qp()->qp_num);
    EXPECT_TRUE(DrainFor(client_cq(), absl::Milliseconds(50)).empty());
    EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);

    // A WR posted to a QP in ERROR is accepted and flushed (IBA vol. 1 ch. 10,
    // ibv_post_send succeeds on mlx5 and rxe alike).
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 3, *small, 0, 8), 0);
    absl::StatusOr<ibv_wc> late = PollOne(client_cq());
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(late->wr_id, 3u);
    EXPECT_EQ(late->status, IBV_WC_WR_FLUSH_ERR) << WcStatusName(late->status);
  }

  ibv_send_wr RdmaWr(ibv_wr_opcode opcode, ibv_sge* sge, uint64_t remote_addr, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.opcode = opcode;
    wr.sg_list = sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }
};

constexpr int kRemoteRw =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST_F(ErrorConformance, WriteWithUnknownRkeyIsRemAccessErrThenFlush) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(src && dst);
  ibv_sge sge{src->addr(), 64, src->lkey()};
  // Flipping bits 8..23 of a valid key names an MR index nothing registered
  // (mlx5 and rxe keep the index there; softrdma keys are random).
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_WRITE, &sge, dst->addr(), dst->rkey() ^ 0x00ffff00),
                      IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst->data()[0], 0);
}

TEST_F(ErrorConformance, WriteWithRkeyOfAnotherPdIsRemAccessErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(src);
  ibv_sge sge{src->addr(), 64, src->lkey()};
  // The client's own MR: a valid key, but of a PD the server QP is not in.
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_WRITE, &sge, src->addr(1024), src->rkey()),
                      IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorConformance, WritePastTheEndOfTheMrIsRemAccessErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(src && dst);
  ibv_sge sge{src->addr(), 64, src->lkey()};
  // [4064, 4128) overlaps the end of the 4096-byte MR by 32 bytes.
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_WRITE, &sge, dst->addr(4064), dst->rkey()),
                      IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst->data()[4064], 0);  // not even the part inside the MR
}

TEST_F(ErrorConformance, WriteWithoutRemoteWriteAccessIsRemAccessErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst =
      NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(src && dst);
  ibv_sge sge{src->addr(), 64, src->lkey()};
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_WRITE, &sge, dst->addr(), dst->rkey()),
                      IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorConformance, ReadWithoutRemoteReadAccessIsRemAccessErr) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> remote =
      NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(local && remote);
  ibv_sge sge{local->addr(), 64, local->lkey()};
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_READ, &sge, remote->addr(), remote->rkey()),
                      IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorConformance, ReadPastTheEndOfTheMrIsRemAccessErr) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> remote = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(local && remote);
  ibv_sge sge{local->addr(), 4097, local->lkey()};
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_READ, &sge, remote->addr(), remote->rkey()),
                      IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorConformance, SendWithBadLkeyIsLocProtErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 50, *dst, 0, 4096), 0);
  ibv_sge sge{src->addr(), 64, src->lkey() ^ 0x00ffff00};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ExpectFailThenFlush(wr, IBV_WC_LOC_PROT_ERR);
  // The message never left: the server's receive is still posted.
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(100)).empty());
}

TEST_F(ErrorConformance, SgeOutsideItsMrIsLocProtErr) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src);
  // A valid lkey, but the SGE runs 1 byte past the MR.
  ibv_sge sge{src->addr(4000), 97, src->lkey()};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ExpectFailThenFlush(wr, IBV_WC_LOC_PROT_ERR);
}

TEST_F(ErrorConformance, ReadIntoMrWithoutLocalWriteIsLocProtErr) {
  // READ writes local memory, so its SGE needs IBV_ACCESS_LOCAL_WRITE.
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, 0);
  std::unique_ptr<Region> remote = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(local && remote);
  ibv_sge sge{local->addr(), 64, local->lkey()};
  ExpectFailThenFlush(RdmaWr(IBV_WR_RDMA_READ, &sge, remote->addr(), remote->rkey()),
                      IBV_WC_LOC_PROT_ERR);
}

TEST_F(ErrorConformance, ReceiveTooSmallIsLocLenErrAtResponderRemInvReqAtRequester) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 60, *dst, 0, 32), 0);
  ASSERT_EQ(PostRecv(server_qp(), 61, *dst, 1024, 1024), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 62, *src, 0, 100), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 63, *src, 0, 8), 0);

  // Responder: the 100-byte message overflows the 32-byte receive: Local
  // Length Error there (a responder error: its QP goes to ERROR, as rxe and mlx5 do), which
  // then flushes its other receive.
  absl::StatusOr<std::vector<ibv_wc>> recvs = PollN(server_cq(), 2);
  ASSERT_TRUE(recvs.ok()) << recvs.status();
  EXPECT_EQ((*recvs)[0].wr_id, 60u);
  EXPECT_EQ((*recvs)[0].status, IBV_WC_LOC_LEN_ERR) << WcStatusName((*recvs)[0].status);
  EXPECT_EQ((*recvs)[0].qp_num, server_qp()->qp_num);
  EXPECT_EQ((*recvs)[1].wr_id, 61u);
  EXPECT_EQ((*recvs)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*recvs)[1].status);
  EXPECT_EQ(QpState(server_qp()), IBV_QPS_ERR);

  // Requester: NAK Invalid Request -> Remote Invalid Request Error, then flush.
  absl::StatusOr<std::vector<ibv_wc>> sends = PollN(client_cq(), 2);
  ASSERT_TRUE(sends.ok()) << sends.status();
  EXPECT_EQ((*sends)[0].wr_id, 62u);
  EXPECT_EQ((*sends)[0].status, IBV_WC_REM_INV_REQ_ERR) << WcStatusName((*sends)[0].status);
  EXPECT_EQ((*sends)[1].wr_id, 63u);
  EXPECT_EQ((*sends)[1].status, IBV_WC_WR_FLUSH_ERR) << WcStatusName((*sends)[1].status);
  EXPECT_EQ(QpState(client_qp()), IBV_QPS_ERR);
}

TEST_F(ErrorConformance, ReceiveWithBadLkeyIsLocProtErrAtResponderRemOpErrAtRequester) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ibv_sge sge{dst->addr(), 64, dst->lkey() ^ 0x00ffff00};
  ibv_recv_wr rwr{};
  rwr.wr_id = 80;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(server_qp(), &rwr, &rbad), 0);  // keys are checked on use
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 81, *src, 0, 32), 0);
  // The responder cannot write its receive buffer: Local Protection Error
  // there, and a NAK Remote Operational Error to the requester.
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->wr_id, 80u);
  EXPECT_EQ(recv->status, IBV_WC_LOC_PROT_ERR) << WcStatusName(recv->status);
  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->wr_id, 81u);
  EXPECT_EQ(send->status, IBV_WC_REM_OP_ERR) << WcStatusName(send->status);
}

TEST_F(ErrorConformance, ReceiveIntoMrWithoutLocalWriteIsLocProtErr) {
  // A receive writes local memory, so its SGE needs IBV_ACCESS_LOCAL_WRITE
  // (ibv_reg_mr(3)); the check happens when a message arrives.
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, 0);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 85, *dst, 0, 64), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 86, *src, 0, 32), 0);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->wr_id, 85u);
  EXPECT_EQ(recv->status, IBV_WC_LOC_PROT_ERR) << WcStatusName(recv->status);
  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->wr_id, 86u);
  EXPECT_EQ(send->status, IBV_WC_REM_OP_ERR) << WcStatusName(send->status);
  EXPECT_EQ(dst->data()[0], 0);
}

TEST_F(ErrorConformance, RemoteAccessErrorMovesResponderToErrorToo) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(src && dst);
  ASSERT_EQ(PostRecv(server_qp(), 70, *dst, 0, 64), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 71, *src, 0, 64, dst->addr(4090),
                     dst->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, IBV_WC_REM_ACCESS_ERR) << WcStatusName(wc->status);
  // A remote access violation is a responder error (IBA vol. 1 ch. 9-10):
  // the responder's QP goes to ERROR as well, flushing its receive.
  absl::StatusOr<ibv_wc> flushed = PollOne(server_cq());
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  EXPECT_EQ(flushed->wr_id, 70u);
  EXPECT_EQ(flushed->status, IBV_WC_WR_FLUSH_ERR) << WcStatusName(flushed->status);
  EXPECT_EQ(QpState(server_qp()), IBV_QPS_ERR);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
