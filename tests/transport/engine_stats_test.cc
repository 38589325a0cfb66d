// engine_stats_test.cc: engines' counters summed when read, kept when an
// engine ends, and reset to a baseline.
#include "runtime/transport/engine_stats.h"

#include <memory>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

int64_t SendWithImm(const EngineTotals& t) {
  return t.wrs_posted[static_cast<int>(WrOpcode::kSendWithImm)];
}

TEST(EngineStats, SumsEveryLiveEngine) {
  const EngineTotals before = SumEngineStats();
  EngineStats a, b;
  RegisterEngineStats(&a);
  RegisterEngineStats(&b);
  a.wrs_posted[static_cast<int>(WrOpcode::kSendWithImm)].Add(3);
  b.wrs_posted[static_cast<int>(WrOpcode::kSendWithImm)].Add(4);
  a.wc_errors[12].Add();  // IBV_WC_RETRY_EXC_ERR
  a.connections_in_state[4].Add(2);
  b.connections_in_state[4].Add(1);
  const EngineTotals t = SumEngineStats();
  EXPECT_EQ(SendWithImm(t) - SendWithImm(before), 7);
  EXPECT_EQ(t.wc_errors[12] - before.wc_errors[12], 1);
  EXPECT_EQ(t.connections_in_state[4] - before.connections_in_state[4], 3);
  EXPECT_EQ(t.engines - before.engines, 2);
  UnregisterEngineStats(&a);
  UnregisterEngineStats(&b);
}

TEST(EngineStats, CountersOfAnEndedEngineStayAndItsGaugesGo) {
  const EngineTotals before = SumEngineStats();
  {
    auto e = std::make_unique<EngineStats>();
    RegisterEngineStats(e.get());
    e->rendezvous_bytes[static_cast<int>(RendezvousDirection::kRead)].Add(1 << 20);
    e->send_buffers_capacity.Add(256);
    e->send_buffers_taken.Add(10);
    e->send_buffers_returned.Add(4);
    const EngineTotals live = SumEngineStats();
    EXPECT_EQ(live.send_buffers_in_use - before.send_buffers_in_use, 6);
    EXPECT_EQ(live.send_buffers_capacity - before.send_buffers_capacity, 256);
    UnregisterEngineStats(e.get());
  }
  const EngineTotals after = SumEngineStats();
  EXPECT_EQ(after.rendezvous_bytes[0] - before.rendezvous_bytes[0], 1 << 20);
  EXPECT_EQ(after.send_buffers_in_use, before.send_buffers_in_use);
  EXPECT_EQ(after.send_buffers_capacity, before.send_buffers_capacity);
  EXPECT_EQ(after.engines, before.engines);
}

TEST(EngineStats, ResetMakesCountersReadZeroAndLeavesGauges) {
  EngineStats e;
  RegisterEngineStats(&e);
  e.keepalive_probes.Add(5);
  e.connections_in_state[0].Add(1);
  ResetEngineCounters();
  EngineTotals t = SumEngineStats();
  EXPECT_EQ(t.keepalive_probes, 0);
  EXPECT_EQ(t.connections_in_state[0], 1);
  e.keepalive_probes.Add(2);
  UnregisterEngineStats(&e);  // what it counted stays, from the baseline
  t = SumEngineStats();
  EXPECT_EQ(t.keepalive_probes, 2);
  EXPECT_EQ(t.connections_in_state[0], 0);
}

TEST(EngineStats, NamesTheLabels) {
  EXPECT_STREQ(WrOpcodeName(WrOpcode::kRdmaWriteWithImm), "rdma_write_with_imm");
  EXPECT_STREQ(WrOpcodeName(WrOpcode::kRecv), "recv");
  EXPECT_STREQ(WcStatusName(5), "WR_FLUSH_ERR");        // IBV_WC_WR_FLUSH_ERR
  EXPECT_STREQ(WcStatusName(13), "RNR_RETRY_EXC_ERR");  // IBV_WC_RNR_RETRY_EXC_ERR
  EXPECT_STREQ(WcStatusName(99), "TM_RNDV_INCOMPLETE");  // past the end: the last
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
