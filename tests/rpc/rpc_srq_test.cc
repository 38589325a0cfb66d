// A server whose workers receive from one shared receive queue each
// (ServerOptions::receive_queue = kShared): many connections share it with
// no receiver-not-ready retry, a client that floods its connection borrows
// only its share while another client's calls go on, a client that
// pipelines grows its window, and the server's connections say so in their
// status. Values read from softrdma's counters and the connections'
// snapshots (what /statusz shows).
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/connection_snapshot.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

ServerOptions SharedQueue(int shared_buffers, int recv_depth = 64) {
  ServerOptions so;
  so.num_workers = 1;
  so.receive_queue = ServerOptions::ReceiveQueue::kShared;
  so.srq_shared_buffers = shared_buffers;
  so.recv_depth = recv_depth;
  return so;
}

// The server side's connections (this process holds both sides).
std::vector<internal::ConnectionStatus> ServerConnections() {
  std::vector<internal::ConnectionStatus> out;
  for (const internal::EngineSnapshot& e : internal::SnapshotConnections(absl::Seconds(5))) {
    EXPECT_TRUE(e.answered) << e.engine;
    for (const internal::ConnectionStatus& c : e.connections) {
      if (!c.is_client && c.state == "established") out.push_back(c);
    }
  }
  return out;
}

TEST(SharedReceiveQueue, ManyConnectionsShareOneQueueWithoutRnr) {
  ChannelOptions co;
  co.pool_size = 8;
  EchoFixture f(SharedQueue(/*shared_buffers=*/32), co);
  softrdma::ResetStats();
  // Eager small and large messages and rendezvous ones, on 8 connections.
  const std::vector<size_t> sizes = {32, 6000, 20000};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        EchoRequest req;
        req.set_text(absl::StrCat("t", t, "-", i));
        req.set_data(std::string(sizes[i % sizes.size()], static_cast<char>('a' + t)));
        EchoResponse resp;
        ClientContext ctx;
        ctx.set_deadline(absl::Now() + absl::Seconds(20));
        const absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
        if (!s.ok() || resp.text() != req.text() || resp.data() != req.data()) {
          ADD_FAILURE() << s << " for " << req.text();
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(f.service.calls(), 8 * 300);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
  const std::vector<internal::ConnectionStatus> conns = ServerConnections();
  ASSERT_EQ(conns.size(), 8u);
  for (const internal::ConnectionStatus& c : conns) {
    EXPECT_TRUE(c.shared_receive_queue);
    // Between the floor (srq_min_credits) and recv_depth.
    EXPECT_GE(c.local_recv_depth, 4) << c.peer;
    EXPECT_LE(c.local_recv_depth, 64) << c.peer;
  }
}

TEST(SharedReceiveQueue, AFloodingClientBorrowsOnlyItsShare) {
  // 16 shared round up to one slab of 256 receives; two connections leave
  // 248 beyond their floors of 4, and recv_depth does not cap a share.
  ServerOptions so = SharedQueue(/*shared_buffers=*/16, /*recv_depth=*/10000);
  so.handler_threads = 4;
  ChannelOptions one;
  one.pool_size = 1;
  EchoFixture flood(so, one);
  auto quiet = CreateChannel(absl::StrCat("127.0.0.1:", flood.server.port()), one);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  softrdma::ResetStats();
  // The flooder keeps 400 slow calls (2 ms each on 4 handler threads) in
  // flight on one connection: far more than any share of credits.
  std::atomic<bool> stop{false};
  std::atomic<int> flood_done{0};
  std::atomic<int> flood_failed{0};
  std::atomic<int> in_flight{0};
  struct Call {
    ClientContext ctx;
    EchoResponse resp;
  };
  std::vector<std::unique_ptr<Call>> calls;  // the flooder's thread only
  std::thread flooder([&] {
    EchoRequest req;
    req.set_text("flood");
    req.set_sleep_ms(2);
    while (!stop.load()) {
      if (in_flight.load() >= 400) {
        absl::SleepFor(absl::Microseconds(200));
        continue;
      }
      in_flight.fetch_add(1);
      // Kept until the end: a call's context and response outlive it.
      calls.push_back(std::make_unique<Call>());
      Call* c = calls.back().get();
      internal::AsyncUnaryCall(flood.channel.get(), kEchoMethod, &c->ctx, req, &c->resp,
                               [&](absl::Status s) {
                                 if (!s.ok()) flood_failed.fetch_add(1);
                                 flood_done.fetch_add(1);
                                 in_flight.fetch_sub(1);
                               });
    }
  });
  // Let the flood take what it can.
  while (flood_done.load() < 500) absl::SleepFor(absl::Milliseconds(1));
  // The other client's calls go through beside it.
  int quiet_ok = 0;
  for (int i = 0; i < 50; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("quiet-", i));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(10));
    const absl::Status s = Echo(quiet->get(), &ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok() && resp.text() == req.text()) ++quiet_ok;
  }
  EXPECT_EQ(quiet_ok, 50);
  const std::vector<internal::ConnectionStatus> conns = ServerConnections();
  stop.store(true);
  flooder.join();
  while (in_flight.load() > 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(flood_failed.load(), 0);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
  ASSERT_EQ(conns.size(), 2u);
  int most = 0;
  int least = 1 << 30;
  for (const internal::ConnectionStatus& c : conns) {
    most = std::max(most, c.local_recv_depth);
    least = std::min(least, c.local_recv_depth);
  }
  // The flooder borrowed beyond its floor but never past its share (the
  // quiet client never asked for extras: 4 + 248); the quiet one kept at
  // least its floor.
  EXPECT_GT(most, 4);
  EXPECT_LE(most, 4 + 248);
  EXPECT_GE(least, 4);
}

TEST(SharedReceiveQueue, OptionsOutOfRangeFailStart) {
  ServerOptions so = SharedQueue(/*shared_buffers=*/0);
  Server server(so);
  const absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("srq_shared_buffers 0"), absl::string_view::npos) << s;
}

TEST(SharedReceiveQueue, PerConnectionRingsStillWork) {
  ServerOptions so;
  so.num_workers = 1;
  so.receive_queue = ServerOptions::ReceiveQueue::kPerConnection;
  ChannelOptions one;
  one.pool_size = 1;
  EchoFixture f(so, one);
  for (int i = 0; i < 100; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("ring-", i));
    EchoResponse resp;
    ClientContext ctx;
    ASSERT_TRUE(Echo(f.channel.get(), &ctx, req, &resp).ok());
    EXPECT_EQ(resp.text(), req.text());
  }
  const std::vector<internal::ConnectionStatus> conns = ServerConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_FALSE(conns[0].shared_receive_queue);
  EXPECT_EQ(conns[0].local_recv_depth, 64);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
