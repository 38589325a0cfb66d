// stress_test.cc: several connections busy at once, and teardown while
// traffic is in flight (checked by ASan/UBSan for lifetime bugs).
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// Ping-pong of `rounds` SEND/RECV pairs on one connection; returns failures.
int PingPong(ConnectedPair& p, int rounds) {
  Buffer cb(p.client_pd, 4096, kAll);
  Buffer sb(p.server_pd, 4096, kAll);
  int failures = 0;
  for (int i = 0; i < rounds; ++i) {
    if (PostRecv(p.server->qp, i, sb, 0, 64) != 0) ++failures;
    if (PostRecv(p.client->qp, i, cb, 0, 64) != 0) ++failures;
    std::memcpy(&cb.data[1024], &i, sizeof(i));
    if (PostSend(p.client->qp, IBV_WR_SEND, i, cb, 1024, 4) != 0) ++failures;
    ibv_wc wc;
    int want_server = 1, want_client = 2;  // server: recv; client: send + recv
    while (want_server > 0) {
      if (!PollOne(p.server_cq, &wc, 10000) || wc.status != IBV_WC_SUCCESS) return failures + 1;
      --want_server;
    }
    int got;
    std::memcpy(&got, sb.data.data(), sizeof(got));
    if (got != i) ++failures;
    if (PostSend(p.server->qp, IBV_WR_SEND, i, sb, 0, 4) != 0) ++failures;
    while (want_client > 0) {
      if (!PollOne(p.client_cq, &wc, 10000) || wc.status != IBV_WC_SUCCESS) return failures + 1;
      --want_client;
    }
    if (!PollOne(p.server_cq, &wc, 10000) || wc.opcode != IBV_WC_SEND) ++failures;
  }
  return failures;
}

TEST(Stress, SmallMessagesFlowWhileA16MiBWriteIsInFlight) {
  ConnectedPair bulk;
  ASSERT_TRUE(bulk.ok());
  constexpr int kPairs = 3;
  std::vector<std::unique_ptr<ConnectedPair>> pairs;
  for (int i = 0; i < kPairs; ++i) {
    pairs.push_back(std::make_unique<ConnectedPair>());
    ASSERT_TRUE(pairs.back()->ok());
  }
  constexpr size_t kBig = 16 << 20;
  Buffer src(bulk.client_pd, kBig, kAll);
  Buffer dst(bulk.server_pd, kBig, kAll);
  std::atomic<int> failures{0};
  std::thread writer([&] {
    for (int i = 0; i < 4; ++i) {
      if (PostSend(bulk.client->qp, IBV_WR_RDMA_WRITE, i, src, 0, kBig, 0, dst.addr(),
                   dst.mr->rkey) != 0) {
        failures++;
      }
      ibv_wc wc;
      if (!PollOne(bulk.client_cq, &wc, 30000) || wc.status != IBV_WC_SUCCESS) failures++;
    }
  });
  std::vector<std::thread> talkers;
  for (auto& p : pairs) {
    talkers.emplace_back([&failures, &p] { failures += PingPong(*p, 200); });
  }
  for (auto& t : talkers) t.join();
  writer.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Stress, TeardownWithTrafficInFlightIsClean) {
  for (int round = 0; round < 5; ++round) {
    auto p = std::make_unique<ConnectedPair>();
    ASSERT_TRUE(p->ok());
    auto sb = std::make_unique<Buffer>(p->server_pd, 1 << 20, kAll);
    auto cb = std::make_unique<Buffer>(p->client_pd, 1 << 20, kAll);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(PostRecv(p->server->qp, i, *sb, 0, 1 << 20), 0);
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(PostSend(p->client->qp, IBV_WR_SEND, i, *cb, 0, 1 << 20), 0);
    }
    ASSERT_EQ(PostSend(p->client->qp, IBV_WR_RDMA_READ, 99, *cb, 0, 1 << 20, 0, sb->addr(),
                       sb->mr->rkey),
              0);
    // Tear everything down at once, mid-transfer, MRs first (a PD outlives
    // its MRs: ibv_dealloc_pd is EBUSY otherwise). Once dereg_mr returns the
    // device must not touch that memory, which is then freed: the progress
    // thread must not write into it (ASan) or hang.
    sb.reset();
    cb.reset();
    p.reset();
  }
  Stats s = GetStats();
  EXPECT_GE(s.live_qps, 0);
}

}  // namespace
}  // namespace testing
}  // namespace softrdma
