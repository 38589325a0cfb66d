// iwarp_test.cc: softrdma's iWARP-like mode (SetIwarpMode / SOFTRDMA_IWARP).
// Its own binary: the mode applies to contexts opened after it is set, and
// rdma_cm ids share the one context opened on first use.
#include <arpa/inet.h>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

// Before any test (and so before rdma_cm opens its context).
const bool kIwarpSet = [] {
  SetIwarpMode(true);
  return true;
}();

TEST(Iwarp, DeviceReportsAnRnicWithIwarpTransport) {
  ASSERT_TRUE(kIwarpSet);
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->device->transport_type, IBV_TRANSPORT_IWARP);
  EXPECT_EQ(ctx->device->node_type, IBV_NODE_RNIC);
  ibv_device_attr a{};
  ASSERT_EQ(query_device(ctx, &a), 0);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_NONE);
  ibv_port_attr pa{};
  ASSERT_EQ(query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(close_device(ctx), 0);
}

TEST(Iwarp, ImmediateDataAndAtomicsAreRefusedAtPost) {
  ConnectedPair p;
  ASSERT_TRUE(p.ok());
  Buffer sbuf(p.client_pd, 64, kAll);
  Buffer rbuf(p.server_pd, 64, kAll);
  ASSERT_EQ(PostRecv(p.server->qp, 1, rbuf, 0, 64), 0);
  for (ibv_wr_opcode refused : {IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM,
                                IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP}) {
    ibv_sge sge{sbuf.addr(), 8, sbuf.mr->lkey};
    ibv_send_wr wr[2] = {};
    wr[0].wr_id = 1;
    wr[0].opcode = IBV_WR_RDMA_WRITE;
    wr[0].sg_list = &sge;
    wr[0].num_sge = 1;
    wr[0].send_flags = IBV_SEND_SIGNALED;
    wr[0].wr.rdma.remote_addr = rbuf.addr();
    wr[0].wr.rdma.rkey = rbuf.mr->rkey;
    wr[0].next = &wr[1];
    wr[1] = wr[0];
    wr[1].wr_id = 2;
    wr[1].opcode = refused;
    wr[1].imm_data = htonl(7);
    wr[1].next = nullptr;
    if (refused == IBV_WR_ATOMIC_FETCH_AND_ADD || refused == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr[1].wr.atomic.remote_addr = rbuf.addr();
      wr[1].wr.atomic.rkey = rbuf.mr->rkey;
    }
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(p.client->qp, wr, &bad), EINVAL) << "opcode " << refused;
    EXPECT_EQ(bad, &wr[1]);
    ibv_wc wc{};
    ASSERT_TRUE(PollOne(p.client_cq, &wc));  // the WRITE before it went
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  // Plain SEND works, and no receive was consumed by the refused WRs.
  ASSERT_EQ(PostSend(p.client->qp, IBV_WR_SEND, 3, sbuf, 0, 8), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOne(p.server_cq, &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0u);
}

TEST(Iwarp, ModeAppliesToContextsOpenedAfterIt) {
  SetIwarpMode(false);
  ibv_device** list = get_device_list(nullptr);
  ibv_context* ctx = open_device(list[0]);
  free_device_list(list);
  EXPECT_EQ(ctx->device->transport_type, IBV_TRANSPORT_IB);
  EXPECT_EQ(ctx->device->node_type, IBV_NODE_CA);
  ibv_device_attr a{};
  ASSERT_EQ(query_device(ctx, &a), 0);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_GLOB);
  EXPECT_EQ(close_device(ctx), 0);
  SetIwarpMode(true);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
