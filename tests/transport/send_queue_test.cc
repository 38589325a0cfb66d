// SendQueue: selective signalling, retirement by a signalled completion, and
// one ibv_post_send per doorbell, on softrdma.
#include "runtime/transport/send_queue.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/transport/engine_stats.h"
#include "runtime/softrdma/softrdma.h"
#include "tests/softrdma/test_util.h"

namespace rdmarpc {
namespace internal {
namespace {

// A zero-length RDMA WRITE: touches no memory and needs no receive.
ibv_send_wr ZeroLengthWrite(ibv_sge* sge) {
  *sge = ibv_sge{};
  ibv_send_wr wr{};
  wr.sg_list = sge;
  wr.num_sge = 0;
  wr.opcode = IBV_WR_RDMA_WRITE;
  return wr;
}

// Takes a send buffer (registering a chunk when none is free) and posts a
// zero-length WR holding it. Returns its sequence number; *signalled:
// whether PostWr signalled it.
uint64_t PostHoldingABuffer(SendQueue* q, bool* signalled) {
  EXPECT_TRUE(q->has_send_buffer());
  SqEntry e;
  e.send_buffer = q->TakeSendBuffer();
  EXPECT_GE(e.send_buffer, 0);
  ibv_sge sge;
  ibv_send_wr wr = ZeroLengthWrite(&sge);
  const uint64_t seq = q->PostWr(&wr, e, /*force_signal=*/false);
  *signalled = (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  return seq;
}

TEST(SendQueue, NeverMoreThanTheIntervalUnsignalled) {
  SendQueue q;  // no send slab: only the interval decides
  int run = 0;
  int longest = 0;
  for (int i = 0; i < SendQueue::kDepth - 1; ++i) {
    ASSERT_TRUE(q.has_room());
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    const uint64_t seq = q.PostWr(&wr, SqEntry{}, /*force_signal=*/i == 40);
    EXPECT_EQ(seq, static_cast<uint64_t>(i));
    EXPECT_EQ(wr.wr_id, seq);
    if (wr.send_flags & IBV_SEND_SIGNALED) {
      run = 0;
    } else {
      longest = std::max(longest, ++run);
    }
    EXPECT_LT(q.unsignalled_run(), SendQueue::kSignalEvery);
  }
  EXPECT_EQ(longest, SendQueue::kSignalEvery - 1);
  EXPECT_EQ(q.batched(), static_cast<size_t>(SendQueue::kDepth - 1));
}

TEST(SendQueue, ForcedSignalStartsANewRun) {
  SendQueue q;
  std::vector<bool> signalled;
  for (int i = 0; i < 2 * SendQueue::kSignalEvery; ++i) {
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    q.PostWr(&wr, SqEntry{}, /*force_signal=*/i == 3);
    signalled.push_back((wr.send_flags & IBV_SEND_SIGNALED) != 0);
  }
  // Forced at 3, then the next one kSignalEvery WRs later.
  for (int i = 0; i < static_cast<int>(signalled.size()); ++i) {
    EXPECT_EQ(signalled[i], i == 3 || i == 3 + SendQueue::kSignalEvery) << i;
  }
}

TEST(SendQueue, SignalledCompletionRetiresEveryWrBeforeIt) {
  softrdma::testing::ConnectedPair pair;
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 256).ok());
  // Buffers taken and not back yet.
  auto out = [&q] { return q.send_buffer_capacity() - q.free_send_buffers(); };
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 5; ++i) {
    SqEntry e;
    ASSERT_TRUE(q.has_send_buffer());  // registers a chunk when none is free
    e.send_buffer = q.TakeSendBuffer();
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    seqs.push_back(q.PostWr(&wr, e, /*force_signal=*/false));
  }
  EXPECT_EQ(out(), 5);
  EXPECT_FALSE(q.empty());
  // The completion of the third retires the first three and their buffers.
  q.RetireThrough(seqs[2], [](const SqEntry&) {});
  EXPECT_TRUE(q.retired(seqs[0]));
  EXPECT_TRUE(q.retired(seqs[2]));
  EXPECT_FALSE(q.retired(seqs[3]));
  EXPECT_TRUE(q.outstanding(seqs[3]));
  EXPECT_EQ(out(), 2);
  // A completion for a WR already retired (or never posted) changes nothing.
  q.RetireThrough(seqs[1], [](const SqEntry&) { ADD_FAILURE() << "retired twice"; });
  q.RetireThrough(seqs[4] + 1, [](const SqEntry&) { ADD_FAILURE() << "never posted"; });
  EXPECT_EQ(out(), 2);
  q.RetireThrough(seqs[4], [](const SqEntry&) {});
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(out(), 0);
}

TEST(SendQueue, RetiredEntriesGoBackToThePosterOldestFirst) {
  SendQueue q;
  for (uint64_t id = 1; id <= 4; ++id) {
    SqEntry e;
    e.bulk_id = id;
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    q.PostWr(&wr, e, /*force_signal=*/false);
  }
  std::vector<uint64_t> back;
  q.RetireThrough(2, [&](const SqEntry& e) { back.push_back(e.bulk_id); });
  EXPECT_EQ(back, (std::vector<uint64_t>{1, 2, 3}));
  // The one left is handed back when the queue is released.
  back.clear();
  q.Release([&](const SqEntry& e) {
    if (e.bulk_id != 0) back.push_back(e.bulk_id);
  });
  EXPECT_EQ(back, (std::vector<uint64_t>{4}));
}

TEST(SendQueue, SendBuffersGrowByDoublingToTheDepth) {
  softrdma::testing::ConnectedPair pair;
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 64).ok());
  EXPECT_EQ(q.send_buffer_capacity(), SendQueue::kFirstSendChunk);
  std::vector<int> taken;
  std::vector<int> capacities;
  while (q.has_send_buffer()) {  // registers a chunk when none is free
    const int b = q.TakeSendBuffer();
    ASSERT_GE(b, 0);
    taken.push_back(b);
    if (capacities.empty() || capacities.back() != q.send_buffer_capacity()) {
      capacities.push_back(q.send_buffer_capacity());
    }
  }
  EXPECT_EQ(capacities, (std::vector<int>{4, 8, 16, 32, 64, 128, 256}));
  ASSERT_EQ(taken.size(), static_cast<size_t>(SendQueue::kDepth));
  EXPECT_EQ(q.TakeSendBuffer(), -1);
  // Every index once, each buffer its own bytes in a registered chunk.
  std::sort(taken.begin(), taken.end());
  for (int i = 0; i < SendQueue::kDepth; ++i) EXPECT_EQ(taken[i], i);
  std::set<char*> addrs;
  for (int i = 0; i < SendQueue::kDepth; ++i) {
    addrs.insert(q.send_buffer(i));
    EXPECT_NE(q.send_lkey(i), 0u);
    q.send_buffer(i)[63] = static_cast<char>(i);  // in bounds (ASan)
  }
  EXPECT_EQ(addrs.size(), static_cast<size_t>(SendQueue::kDepth));
  // Chunks of 4, 4, 8, 16, ...: one registration (lkey) each.
  EXPECT_EQ(q.send_lkey(0), q.send_lkey(3));
  EXPECT_NE(q.send_lkey(3), q.send_lkey(4));
  EXPECT_EQ(q.send_lkey(8), q.send_lkey(15));
  EXPECT_NE(q.send_lkey(15), q.send_lkey(16));
}

TEST(SendQueue, LowOnSendBuffersSignals) {
  softrdma::testing::ConnectedPair pair;
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 64).ok());
  // Takes n buffers, then posts a WR: whether it was signalled. "Left to
  // take" counts the free buffers and those not registered yet.
  auto post_after_taking = [&q](int n) {
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(q.has_send_buffer());
      EXPECT_GE(q.TakeSendBuffer(), 0);
    }
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    q.PostWr(&wr, SqEntry{}, /*force_signal=*/false);
    return (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  };
  // kSignalEvery left: not yet low (and the run is 1 long).
  EXPECT_FALSE(post_after_taking(SendQueue::kDepth - SendQueue::kSignalEvery));
  // One fewer: low.
  EXPECT_TRUE(post_after_taking(1));
}

TEST(SendQueue, LeanQueueSignalsWhenHalfItsBuffersAreOut) {
  softrdma::testing::ConnectedPair pair;
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  const bool lean = true;
  q.set_lean(&lean);
  ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 64).ok());
  ASSERT_EQ(q.send_buffer_capacity(), SendQueue::kFirstSendChunk);
  // Taking the first of four leaves three free: unsignalled; the second
  // leaves two (half): signalled.
  bool first = true;
  bool second = false;
  PostHoldingABuffer(&q, &first);
  PostHoldingABuffer(&q, &second);
  EXPECT_FALSE(first);
  EXPECT_TRUE(second);
}

// A connection with one message in flight whose completion is polled
// before its next send: lean, it never needs more than kFirstSendChunk
// buffers (every second WR is signalled and brings both back); otherwise
// it grows to kSignalEvery and signals one WR in kSignalEvery.
TEST(SendQueue, ACallAtATimeGrowsToTheIntervalUnlessLean) {
  softrdma::testing::ConnectedPair pair;
  ASSERT_TRUE(pair.ok());
  for (const bool lean : {true, false}) {
    SCOPED_TRACE(lean ? "lean" : "not lean");
    SendQueue q;
    q.set_lean(&lean);
    ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 64).ok());
    int signalled = 0;
    for (int i = 0; i < 160; ++i) {
      bool was_signalled = false;
      const uint64_t seq = PostHoldingABuffer(&q, &was_signalled);
      if (was_signalled) {
        ++signalled;
        q.RetireThrough(seq, [](const SqEntry&) {});
      }
    }
    EXPECT_EQ(q.send_buffer_capacity(),
              lean ? SendQueue::kFirstSendChunk : SendQueue::kSignalEvery);
    EXPECT_EQ(signalled, lean ? 80 : 160 / SendQueue::kSignalEvery);
  }
}

TEST(SendQueue, DoorbellPostsOneChain) {
  softrdma::testing::PairOptions opt;
  opt.max_send_wr = SendQueue::kDepth;
  softrdma::testing::ConnectedPair pair(opt);
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  q.set_qp(pair.client->qp);
  constexpr int kWrs = 5;
  uint64_t last = 0;
  for (int i = 0; i < kWrs; ++i) {
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    last = q.PostWr(&wr, SqEntry{}, /*force_signal=*/i == kWrs - 1);
  }
  softrdma::ResetStats();
  int unposted = 0;
  EXPECT_EQ(q.Doorbell([&](uint64_t, const SqEntry&) { ++unposted; }), 0);
  EXPECT_EQ(softrdma::GetStats().post_send_calls, 1u);
  EXPECT_EQ(unposted, 0);
  EXPECT_EQ(q.batched(), 0u);
  // An empty batch rings nothing.
  EXPECT_EQ(q.Doorbell([&](uint64_t, const SqEntry&) { ++unposted; }), 0);
  EXPECT_EQ(softrdma::GetStats().post_send_calls, 1u);
  // Only the last WR was signalled: its one completion retires all five.
  ibv_wc wc{};
  ASSERT_TRUE(softrdma::testing::PollOne(pair.client_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, last);
  q.RetireThrough(wc.wr_id, [](const SqEntry&) {});
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(softrdma::testing::Drain(pair.client_cq, 50).empty());
}

TEST(SendQueue, DrainMarkerRetiresUnsignalledWrs) {
  softrdma::testing::PairOptions opt;
  opt.max_send_wr = SendQueue::kDepth;
  softrdma::testing::ConnectedPair pair(opt);
  ASSERT_TRUE(pair.ok());
  SendQueue q;
  q.set_qp(pair.client->qp);
  EXPECT_FALSE(q.PostDrainMarker());  // nothing outstanding
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge;
    ibv_send_wr wr = ZeroLengthWrite(&sge);
    q.PostWr(&wr, SqEntry{}, /*force_signal=*/false);
  }
  ASSERT_EQ(q.Doorbell([](uint64_t, const SqEntry&) {}), 0);
  // The QP goes to ERROR (as after rdma_disconnect): a signalled marker's
  // flush is the one completion that retires what went before.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(softrdma::modify_qp(pair.client->qp, &attr, IBV_QP_STATE), 0);
  const uint64_t marker = q.next_seq();
  ASSERT_TRUE(q.PostDrainMarker());
  uint64_t last = 0;
  for (const ibv_wc& wc : softrdma::testing::Drain(pair.client_cq, 500)) last = wc.wr_id;
  EXPECT_EQ(last, marker);
  q.RetireThrough(last, [](const SqEntry&) {});
  EXPECT_TRUE(q.empty());
}

// The engine's counters follow every path: posted, undone by a refused
// doorbell, retired, released with the QP.
TEST(SendQueue, CountsWrsDoorbellsAndBuffersAndUndoesARefusedPost) {
  softrdma::testing::PairOptions opt;
  opt.max_send_wr = 2;  // the third WR of a chain is refused
  softrdma::testing::ConnectedPair pair(opt);
  ASSERT_TRUE(pair.ok());
  EngineStats stats;
  {
    SendQueue q;
    q.set_stats(&stats);
    ASSERT_TRUE(q.CreateSendSlab(pair.client_pd, 64).ok());
    q.set_qp(pair.client->qp);
    EXPECT_EQ(stats.send_buffers_capacity.Get(), SendQueue::kFirstSendChunk);
    for (int i = 0; i < 3; ++i) {
      ibv_sge sge;
      ibv_send_wr wr = ZeroLengthWrite(&sge);
      SqEntry e;
      e.send_buffer = q.TakeSendBuffer();
      q.PostWr(&wr, e, /*force_signal=*/i == 1);
    }
    const int kWrite = static_cast<int>(WrOpcode::kRdmaWrite);
    EXPECT_EQ(stats.wrs_posted[kWrite].Get(), 3);
    EXPECT_EQ(stats.send_buffers_taken.Get(), 3);
    int unposted = 0;
    EXPECT_NE(q.Doorbell([&](uint64_t, const SqEntry&) { ++unposted; }), 0);
    EXPECT_EQ(unposted, 1);
    EXPECT_EQ(stats.send_doorbells.Get(), 1);
    // The refused WR is not counted, and its buffer came back.
    EXPECT_EQ(stats.wrs_posted[kWrite].Get(), 2);
    EXPECT_EQ(stats.signalled_send_wrs.Get(), 1);
    EXPECT_EQ(stats.send_buffers_returned.Get(), 1);
    // The QP goes away with two WRs outstanding: their buffers count as
    // returned and the slab leaves the capacity.
    q.Release([](const SqEntry&) {});
    EXPECT_EQ(stats.send_buffers_returned.Get(), stats.send_buffers_taken.Get());
    EXPECT_EQ(stats.send_buffers_capacity.Get(), 0);
  }
  EXPECT_EQ(stats.send_buffers_capacity.Get(), 0);  // the destructor counts nothing twice
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
