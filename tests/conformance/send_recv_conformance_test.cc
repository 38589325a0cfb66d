// SEND / SEND_WITH_IMM / RECV: completion fields, inline, gather/scatter and
// zero-length messages, as ibv_post_send(3), ibv_poll_cq(3) and IBA vol. 1
// ch. 10-11 define them.
//
// Fields asserted on each WC are those ibv_poll_cq(3) calls valid for it:
// every WC has wr_id, status, opcode (on success) and qp_num; byte_len is
// valid for receives (and for READ / atomics on the send queue); imm_data
// only when wc_flags has IBV_WC_WITH_IMM. byte_len of a SEND completion is
// undefined, so it is not asserted.
#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "tests/conformance/conformance_fixture.h"

namespace rdmarpc {
namespace conformance {
namespace {

class SendRecvConformance : public ConformanceTest {};

void Fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

TEST_F(SendRecvConformance, SendCompletesBothSidesWithExactFields) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  Fill(src->data(), 1000, 3);
  ASSERT_EQ(PostRecv(server_qp(), 0xabc, *dst, 16, 2048), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 0x123, *src, 0, 1000), 0);

  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->wr_id, 0x123u);
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  EXPECT_EQ(send->opcode, IBV_WC_SEND);
  EXPECT_EQ(send->qp_num, client_qp()->qp_num);

  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->wr_id, 0xabcu);
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->opcode, IBV_WC_RECV);
  EXPECT_EQ(recv->byte_len, 1000u);
  EXPECT_EQ(recv->wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(recv->qp_num, server_qp()->qp_num);
  EXPECT_EQ(std::memcmp(dst->data() + 16, src->data(), 1000), 0);
  EXPECT_EQ(dst->data()[15], 0);            // nothing before the SGE
  EXPECT_EQ(dst->data()[16 + 1000], 0);     // nor past the message
}

TEST_F(SendRecvConformance, SendWithImmCarriesImmDataVerbatim) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  Fill(src->data(), 64, 9);
  // imm_data is in network order on both ends (ibv_post_send(3): "in network
  // byte order"); the device carries the 4 bytes as given.
  const uint32_t imm = htonl(0xdeadbeef);
  ASSERT_EQ(PostRecv(server_qp(), 7, *dst, 0, 4096), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND_WITH_IMM, 8, *src, 0, 64, 0, 0, imm), 0);

  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  EXPECT_EQ(send->opcode, IBV_WC_SEND);  // SEND_WITH_IMM completes as IBV_WC_SEND
  EXPECT_EQ(send->wr_id, 8u);

  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->opcode, IBV_WC_RECV);
  EXPECT_EQ(recv->wr_id, 7u);
  EXPECT_EQ(recv->byte_len, 64u);  // payload only: the immediate is not counted
  EXPECT_EQ(recv->wc_flags & IBV_WC_WITH_IMM, static_cast<unsigned>(IBV_WC_WITH_IMM));
  EXPECT_EQ(recv->imm_data, imm);
  EXPECT_EQ(ntohl(recv->imm_data), 0xdeadbeefu);
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 64), 0);
}

TEST_F(SendRecvConformance, InlineSendNeedsNoKeyAndCopiesAtPost) {
  ASSERT_GE(pair().client_cap.max_inline_data, 48u);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  ASSERT_EQ(PostRecv(server_qp(), 1, *dst, 0, 4096), 0);

  // Unregistered memory, lkey 0: an inline send reads it at post time and
  // checks no key (ibv_post_send(3), IBV_SEND_INLINE: "the lkey field is not
  // checked"), so the buffer may be rewritten as soon as the post returns.
  std::array<uint8_t, 48> payload{};
  Fill(payload.data(), payload.size(), 40);
  const std::array<uint8_t, 48> sent = payload;
  ibv_sge sge{reinterpret_cast<uint64_t>(payload.data()), 48, 0};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);
  payload.fill(0xff);

  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  EXPECT_EQ(send->opcode, IBV_WC_SEND);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->byte_len, 48u);
  EXPECT_EQ(std::memcmp(dst->data(), sent.data(), 48), 0);
}

TEST_F(SendRecvConformance, GatherSendScatterReceive) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  ASSERT_GE(pair().client_cap.max_send_sge, 3u);
  ASSERT_GE(pair().server_cap.max_recv_sge, 3u);
  Fill(src->data(), 4096, 1);

  // Receive: 10 bytes at 0, 10 at 100, 10 at 200 -> a 23-byte message fills
  // the first two and 3 bytes of the third, in SGE order (ibv_post_recv(3) scatter list).
  ibv_sge rsge[3] = {{dst->addr(0), 10, dst->lkey()},
                     {dst->addr(100), 10, dst->lkey()},
                     {dst->addr(200), 10, dst->lkey()}};
  ibv_recv_wr rwr{};
  rwr.wr_id = 11;
  rwr.sg_list = rsge;
  rwr.num_sge = 3;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(server_qp(), &rwr, &rbad), 0);

  // Send: 5 bytes at 1000, 7 at 2000, 11 at 3000, gathered in order.
  ibv_sge ssge[3] = {{src->addr(1000), 5, src->lkey()},
                     {src->addr(2000), 7, src->lkey()},
                     {src->addr(3000), 11, src->lkey()}};
  ibv_send_wr swr{};
  swr.wr_id = 12;
  swr.opcode = IBV_WR_SEND;
  swr.sg_list = ssge;
  swr.num_sge = 3;
  swr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* sbad = nullptr;
  ASSERT_EQ(ibv_post_send(client_qp(), &swr, &sbad), 0);

  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->wr_id, 11u);
  EXPECT_EQ(recv->byte_len, 23u);

  uint8_t message[23];
  std::memcpy(message, src->data() + 1000, 5);
  std::memcpy(message + 5, src->data() + 2000, 7);
  std::memcpy(message + 12, src->data() + 3000, 11);
  EXPECT_EQ(std::memcmp(dst->data(), message, 10), 0);
  EXPECT_EQ(std::memcmp(dst->data() + 100, message + 10, 10), 0);
  EXPECT_EQ(std::memcmp(dst->data() + 200, message + 20, 3), 0);
  EXPECT_EQ(dst->data()[203], 0);  // the rest of the third SGE is untouched
  EXPECT_EQ(dst->data()[10], 0);   // nor the gaps between SGEs
}

TEST_F(SendRecvConformance, ZeroLengthSendConsumesAReceive) {
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst);
  dst->data()[0] = 0x5a;
  ASSERT_EQ(PostRecv(server_qp(), 21, *dst, 0, 64), 0);
  ASSERT_EQ(PostRecv(server_qp(), 22, *dst, 64, 64), 0);

  // No SGE at all (num_sge 0): a message of 0 bytes, legal for SEND (IBA vol. 1 ch. 9).
  ibv_send_wr wr{};
  wr.wr_id = 20;
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 0;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);
  // And a 0-byte SEND_WITH_IMM: the immediate is the whole message.
  wr.wr_id = 23;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(77);
  ASSERT_EQ(ibv_post_send(client_qp(), &wr, &bad), 0);

  absl::StatusOr<std::vector<ibv_wc>> sends = PollN(client_cq(), 2);
  ASSERT_TRUE(sends.ok()) << sends.status();
  EXPECT_EQ((*sends)[0].wr_id, 20u);
  EXPECT_EQ((*sends)[0].status, IBV_WC_SUCCESS) << WcStatusName((*sends)[0].status);
  EXPECT_EQ((*sends)[1].wr_id, 23u);
  EXPECT_EQ((*sends)[1].status, IBV_WC_SUCCESS) << WcStatusName((*sends)[1].status);

  absl::StatusOr<std::vector<ibv_wc>> recvs = PollN(server_cq(), 2);
  ASSERT_TRUE(recvs.ok()) << recvs.status();
  EXPECT_EQ((*recvs)[0].wr_id, 21u);  // receives are consumed in posting order
  EXPECT_EQ((*recvs)[0].status, IBV_WC_SUCCESS) << WcStatusName((*recvs)[0].status);
  EXPECT_EQ((*recvs)[0].opcode, IBV_WC_RECV);
  EXPECT_EQ((*recvs)[0].byte_len, 0u);
  EXPECT_EQ((*recvs)[0].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ((*recvs)[1].wr_id, 22u);
  EXPECT_EQ((*recvs)[1].byte_len, 0u);
  EXPECT_EQ((*recvs)[1].wc_flags & IBV_WC_WITH_IMM, static_cast<unsigned>(IBV_WC_WITH_IMM));
  EXPECT_EQ((*recvs)[1].imm_data, htonl(77));
  EXPECT_EQ(dst->data()[0], 0x5a);  // nothing written
}

TEST_F(SendRecvConformance, SendSourceNeedsNoLocalWriteAccess) {
  // Gathering only reads local memory: an MR registered with no access flag
  // at all (local read is always allowed, ibv_reg_mr(3)) is a valid source.
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, 0);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  Fill(src->data(), 128, 77);
  ASSERT_EQ(PostRecv(server_qp(), 1, *dst, 0, 4096), 0);
  ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 2, *src, 0, 128), 0);
  absl::StatusOr<ibv_wc> send = PollOne(client_cq());
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(send->status, IBV_WC_SUCCESS) << WcStatusName(send->status);
  absl::StatusOr<ibv_wc> recv = PollOne(server_cq());
  ASSERT_TRUE(recv.ok()) << recv.status();
  EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << WcStatusName(recv->status);
  EXPECT_EQ(recv->byte_len, 128u);
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 128), 0);
}

TEST_F(SendRecvConformance, MessagesArriveInOrderIntoReceivesInOrder) {
  std::unique_ptr<Region> src = NewRegion(client_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  std::unique_ptr<Region> dst = NewRegion(server_pd(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  constexpr int kMessages = 8;
  for (int i = 0; i < kMessages; ++i) {
    src->data()[i * 16] = static_cast<uint8_t>(0x40 + i);
    ASSERT_EQ(PostRecv(server_qp(), 100 + i, *dst, i * 256, 256), 0);
  }
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(PostSend(client_qp(), IBV_WR_SEND, 200 + i, *src, i * 16, 16 + i), 0);
  }
  absl::StatusOr<std::vector<ibv_wc>> sends = PollN(client_cq(), kMessages);
  ASSERT_TRUE(sends.ok()) << sends.status();
  absl::StatusOr<std::vector<ibv_wc>> recvs = PollN(server_cq(), kMessages);
  ASSERT_TRUE(recvs.ok()) << recvs.status();
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ((*sends)[i].wr_id, 200u + i);
    EXPECT_EQ((*recvs)[i].wr_id, 100u + i);
    EXPECT_EQ((*recvs)[i].byte_len, 16u + i);
    EXPECT_EQ(dst->data()[i * 256], 0x40 + i);
  }
}

}  // namespace
}  // namespace conformance
}  // namespace rdmarpc
