// RDMA WRITE, WRITE_WITH_IMM and READ: data placement and completion fields
// (ibv_post_send(3), ibv_poll_cq(3), IBA vol. 1 ch. 9, RDMA WRITE and READ).
#include <arpa/inet.h>

#include <cstring>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

class RdmaConformance : public ConformanceTest {};

constexpr int kRemoteRw =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST_F(RdmaConformance, WritePlacesBytesWithoutConsumingAReceive) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 8192, kRemoteRw);
  ASSERT_TRUE(src && dst);
  for (size_t i = 0; i < 5000; ++i) src->data()[i] = static_cast<uint8_t>(i * 13 + 1);
  // A receive is posted but a plain WRITE must not consume it.
  ASSERT_EQ(PostRecv(server_qp(), 99, *dst, 7000, 64), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE, 1, *src, 0, 5000, dst->addr(100),
                     dst->rkey()),
            0);

  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 1u);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(wc->opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc->qp_num, client_qp()->qp_num);
  // RC: the WRITE's completion means the responder acknowledged it, so the
  // bytes are in place when the requester sees it.
  EXPECT_EQ(std::memcmp(dst->data() + 100, src->data(), 5000), 0);
  EXPECT_EQ(dst->data()[99], 0);
  EXPECT_EQ(dst->data()[5100], 0);
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(100)).empty());
}

TEST_F(RdmaConformance, WriteWithImmConsumesAReceiveAndReportsWriteLength) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, kRemoteRw);
  std::unique_ptr<Region> rbuf = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst && rbuf);
  for (size_t i = 0; i < 300; ++i) src->data()[i] = static_cast<uint8_t>(0x80 + i);
  rbuf->data()[0] = 0x11;
  ASSERT_EQ(PostRecv(server_qp(), 5, *rbuf, 0, 16), 0);
  const uint32_t imm = htonl(0x01020304);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_WRITE_WITH_IMM, 6, *src, 0, 300, dst->addr(0),
                     dst->rkey(), imm),
            0);

  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->wr_id, 6u);
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  EXPECT_EQ(send->opcode, IBV_WC_RDMA_WRITE);

  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->wr_id, 5u);
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  // byte_len is the length of the WRITE (ibv_poll_cq(3): bytes transferred),
  // even though the receive's own 16-byte buffer is not used.
  EXPECT_EQ(recv->byte_len, 300u);
  EXPECT_EQ(recv->wc_flags & IBV_WC_WITH_IMM, static_cast<unsigned>(IBV_WC_WITH_IMM));
  EXPECT_EQ(recv->imm_data, imm);
  EXPECT_EQ(recv->qp_num, server_qp()->qp_num);
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 300), 0);
  EXPECT_EQ(rbuf->data()[0], 0x11);  // the receive buffer is untouched
}

TEST_F(RdmaConformance, ZeroLengthWriteWithImmNeedsNoRkey) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> rbuf = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && rbuf);
  ASSERT_EQ(PostRecv(server_qp(), 31, *rbuf, 0, 16), 0);
  // A responder validates no R_Key for a zero-length RDMA access (IBA vol. 1
  // ch. 9, responder R_Key checks); a 0-byte WRITE_WITH_IMM is the common way
  // to send a bare immediate.
  ibv_send_wr wr{};
  wr.wr_id = 30;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.num_sge = 0;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(4242);
  wr.wr.rdma.remote_addr = 0;
  wr.wr.rdma.rkey = 0;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);
  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(recv->byte_len, 0u);
  EXPECT_EQ(recv->imm_data, htonl(4242));
}

TEST_F(RdmaConformance, ReadFetchesBytesAndReportsByteLen) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 8192, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> remote = NewRegion(server_pd(), 8192, kRemoteRw);
  ASSERT_TRUE(local && remote);
  for (size_t i = 0; i < 6000; ++i) remote->data()[i] = static_cast<uint8_t>(i * 5 + 2);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_READ, 40, *local, 10, 6000, remote->addr(0),
                     remote->rkey()),
            0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->wr_id, 40u);
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(wc->opcode, IBV_WC_RDMA_READ);
  // ibv_poll_cq(3): byte_len is "relevant in the Send Queue for RDMA Read".
  EXPECT_EQ(wc->byte_len, 6000u);
  EXPECT_EQ(std::memcmp(local->data() + 10, remote->data(), 6000), 0);
  EXPECT_EQ(local->data()[9], 0);
  EXPECT_EQ(local->data()[6010], 0);
  // A READ involves no receive and no completion at the responder.
  EXPECT_TRUE(DrainFor(server_cq(), absl::Milliseconds(100)).empty());
}

TEST_F(RdmaConformance, ReadScattersIntoSeveralLocalSges) {
  std::unique_ptr<Region> local = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> remote = NewRegion(server_pd(), 4096, kRemoteRw);
  ASSERT_TRUE(local && remote);
  for (size_t i = 0; i < 30; ++i) remote->data()[500 + i] = static_cast<uint8_t>(0xa0 + i);
  ibv_sge sge[2] = {{local->addr(0), 12, local->lkey()}, {local->addr(1000), 18, local->lkey()}};
  ibv_send_wr wr{};
  wr.wr_id = 41;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = sge;
  wr.num_sge = 2;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote->addr(500);
  wr.wr.rdma.rkey = remote->rkey();
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);
  absl::StatusOr<ibv_wc> wc = PollOne(client_cq());
  ASSERT_TRUE(wc.ok()) << wc.status();
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << WcStatusName(wc->status);
  EXPECT_EQ(wc->byte_len, 30u);
  EXPECT_EQ(std::memcmp(local->data(), remote->data() + 500, 12), 0);
  EXPECT_EQ(std::memcmp(local->data() + 1000, remote->data() + 512, 18), 0);
  EXPECT_EQ(local->data()[12], 0);
}

// READ / atomic depth: rdma_cm carries each side's initiator_depth and
// responder_resources in the CM REQ / REP, and sets the QP's max_rd_atomic to
// what the peer's responder resources allow and max_dest_rd_atomic to its
// own (rdma_connect(3), rdma_accept(3); IBA vol. 1 12.7.29). A requester never
// has more READs / atomics out than max_rd_atomic: the rest wait in the SQ
// and complete in order.
class RdAtomicDepthConformance : public ConformanceTest {
 protected:
  QpOptions DefaultOptions() const override {
    QpOptions o;
    o.max_send_wr = 32;
    o.responder_resources = 2;  // both sides: responder_resources = initiator_depth = 2
    return o;
  }
};

TEST_F(RdAtomicDepthConformance, QpsReportTheNegotiatedDepths) {
  for (ibv_qp* qp : {client_qp(), server_qp()}) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(internal::Verbs().query_qp(
                  qp, &attr, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init),
              0);
    EXPECT_EQ(attr.max_rd_atomic, 2) << (qp == client_qp() ? "client" : "server");
    EXPECT_EQ(attr.max_dest_rd_atomic, 2) << (qp == client_qp() ? "client" : "server");
  }
}

TEST_F(RdAtomicDepthConformance, MoreReadsThanTheDepthCompleteInOrder) {
  constexpr int kReads = 12;
  constexpr uint32_t kSlice = 512;
  std::unique_ptr<Region> local = NewRegion(client_pd(), kReads * kSlice, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> remote = NewRegion(server_pd(), kReads * kSlice, kRemoteRw);
  ASSERT_TRUE(local && remote);
  for (size_t i = 0; i < kReads * kSlice; ++i) remote->data()[i] = static_cast<uint8_t>(i * 7 + 1);
  for (int i = 0; i < kReads; ++i) {
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_RDMA_READ, 500 + i, *local, i * kSlice, kSlice,
                       remote->addr(i * kSlice), remote->rkey()),
              0);
  }
  absl::StatusOr<std::vector<ibv_wc>> wcs = PollN(client_cq(), kReads);
  ASSERT_TRUE(wcs.ok()) << wcs.status();
  for (int i = 0; i < kReads; ++i) {
    EXPECT_EQ((*wcs)[i].wr_id, 500u + i);
    EXPECT_EQ((*wcs)[i].status, IBV_WC_SUCCESS) << WcStatusName((*wcs)[i].status);
    EXPECT_EQ((*wcs)[i].byte_len, kSlice);
  }
  EXPECT_EQ(std::memcmp(local->data(), remote->data(), kReads * kSlice), 0);
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
