// A server whose workers receive from one shared receive queue each
// (ServerOptions::receive_queue = kShared): many connections share it with
// no receiver-not-ready retry, a client that floods its connection borrows
// only its share while another client's calls go on, a client that
// pipelines grows its window, and the server's connections say so in their
// status. The same on the client side (ChannelOptions::receive_queue =
// kShared): one channel's connections to several servers receive from one
// queue per engine thread. Values read from softrdma's counters and the
// connections' snapshots (what /statusz shows).
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/connection_snapshot.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/stream_service.h"
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

// One side's established connections (this process holds both sides).
std::vector<internal::ConnectionStatus> Connections(bool client) {
  std::vector<internal::ConnectionStatus> out;
  for (const internal::EngineSnapshot& e : internal::SnapshotConnections(absl::Seconds(5))) {
    EXPECT_TRUE(e.answered) << e.engine;
    for (const internal::ConnectionStatus& c : e.connections) {
      if (c.is_client == client && c.state == "established") out.push_back(c);
    }
  }
  return out;
}
std::vector<internal::ConnectionStatus> ServerConnections() { return Connections(false); }
std::vector<internal::ConnectionStatus> ClientConnections() { return Connections(true); }

ChannelOptions ClientSharedQueue(int shared_buffers, int recv_depth = 64) {
  ChannelOptions co;
  co.engine_threads = 1;
  co.receive_queue = ChannelOptions::ReceiveQueue::kShared;
  co.srq_shared_buffers = shared_buffers;
  co.recv_depth = recv_depth;
  return co;
}

// One Echo of `text` and `data` on `channel`, with a 10 s deadline: the
// call's status, or DATA_LOSS when an OK response did not carry both back.
absl::Status EchoBack(Channel* channel, const std::string& text, const std::string& data = "") {
  EchoRequest req;
  req.set_text(text);
  req.set_data(data);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_deadline(absl::Now() + absl::Seconds(10));
  const absl::Status s = Echo(channel, &ctx, req, &resp);
  if (s.ok() && (resp.text() != text || resp.data() != data)) {
    return absl::DataLossError(absl::StrCat("sent '", text, "' and ", data.size(),
                                            " bytes, got '", resp.text(), "' and ",
                                            resp.data().size()));
  }
  return s;
}

// 8 threads each make `calls` Echo calls on `channel`, requests of 32,
// 6000 and 20000 bytes in turn (eager small and large, and rendezvous);
// with `vary_replies` the responses take those sizes too, in another order
// (else they echo the request). Returns the calls that failed or came back
// wrong.
int CallsOfEverySizeFrom8Threads(Channel* channel, int calls, bool vary_replies) {
  const std::vector<size_t> sizes = {32, 6000, 20000};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        EchoRequest req;
        req.set_text(absl::StrCat("t", t, "-", i));
        req.set_data(std::string(sizes[i % sizes.size()], static_cast<char>('a' + t)));
        if (vary_replies) req.set_reply_bytes(static_cast<int64_t>(sizes[(i / 3) % sizes.size()]));
        EchoResponse resp;
        ClientContext ctx;
        ctx.set_deadline(absl::Now() + absl::Seconds(20));
        const absl::Status s = Echo(channel, &ctx, req, &resp);
        const bool data_ok = vary_replies
                                 ? resp.data().size() == static_cast<size_t>(req.reply_bytes())
                                 : resp.data() == req.data();
        if (!s.ok() || resp.text() != req.text() || !data_ok) {
          ADD_FAILURE() << s << " for " << req.text() << ": " << resp.data().size() << " bytes";
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return wrong.load();
}

TEST(SharedReceiveQueue, ManyConnectionsShareOneQueueWithoutRnr) {
  ChannelOptions co;
  co.pool_size = 8;
  EchoFixture f(SharedQueue(/*shared_buffers=*/32), co);
  softrdma::ResetStats();
  // On 8 connections.
  EXPECT_EQ(CallsOfEverySizeFrom8Threads(f.channel.get(), 300, /*vary_replies=*/false), 0);
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
    const absl::Status s = EchoBack(quiet->get(), absl::StrCat("quiet-", i));
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) ++quiet_ok;
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
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "ServerOptions: srq_shared_buffers 0 (1..65535)");
  so = SharedQueue(/*shared_buffers=*/65536);
  Server too_many(so);
  s = too_many.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "ServerOptions: srq_shared_buffers 65536 (1..65535)");
  so = SharedQueue(/*shared_buffers=*/512);
  so.srq_min_credits = 2;
  Server small_floor(so);
  s = small_floor.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "ServerOptions: srq_min_credits 2 (3..65535)");
  so.srq_min_credits = 65536;
  Server big_floor(so);
  s = big_floor.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "ServerOptions: srq_min_credits 65536 (3..65535)");
  // Only checked for a shared queue.
  so.receive_queue = ServerOptions::ReceiveQueue::kPerConnection;
  Server per_connection(so);
  s = per_connection.Start("127.0.0.1:0");
  EXPECT_TRUE(s.ok()) << s;
  per_connection.Shutdown();
}

TEST(SharedReceiveQueue, PerConnectionRingsStillWork) {
  ServerOptions so;
  so.num_workers = 1;
  so.receive_queue = ServerOptions::ReceiveQueue::kPerConnection;
  ChannelOptions one;
  one.pool_size = 1;
  EchoFixture f(so, one);
  for (int i = 0; i < 100; ++i) {
    const absl::Status s = EchoBack(f.channel.get(), absl::StrCat("ring-", i));
    ASSERT_TRUE(s.ok()) << s;
  }
  const std::vector<internal::ConnectionStatus> conns = ServerConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_FALSE(conns[0].shared_receive_queue);
  EXPECT_EQ(conns[0].local_recv_depth, 64);
}

// Several servers, each with a pool of 4 connections from one channel on
// one engine thread: all 16 receive from the thread's one queue, with
// eager and rendezvous messages both ways and no receiver-not-ready.
TEST(ClientSharedReceiveQueue, OneChannelsConnectionsToManyServersShareOneQueue) {
  ServerOptions per_connection;
  per_connection.num_workers = 1;
  per_connection.receive_queue = ServerOptions::ReceiveQueue::kPerConnection;
  std::vector<std::unique_ptr<EchoFixture>> servers;
  std::string target;
  for (int i = 0; i < 4; ++i) {
    // Half the servers have per-connection rings, half an SRQ of their own.
    servers.push_back(std::make_unique<EchoFixture>(i % 2 == 0 ? per_connection
                                                               : SharedQueue(64)));
    absl::StrAppend(&target, i == 0 ? "" : ",", "127.0.0.1:", servers.back()->server.port());
  }
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/32);
  co.pool_size = 4;
  absl::StatusOr<std::shared_ptr<Channel>> channel = CreateChannel(target, co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  softrdma::ResetStats();
  EXPECT_EQ(CallsOfEverySizeFrom8Threads(channel->get(), 160, /*vary_replies=*/true), 0);
  int calls = 0;
  for (const auto& s : servers) calls += s->service.calls();
  EXPECT_EQ(calls, 8 * 160);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
  // The fixtures' own channels made no call: only ours are established.
  const std::vector<internal::ConnectionStatus> clients = ClientConnections();
  ASSERT_EQ(clients.size(), 16u);
  for (const internal::ConnectionStatus& c : clients) {
    EXPECT_TRUE(c.shared_receive_queue) << c.peer;
    EXPECT_GE(c.local_recv_depth, 4) << c.peer;
    EXPECT_LE(c.local_recv_depth, 64) << c.peer;
  }
  // Each server was offered the client's floor at the handshake.
  const std::vector<internal::ConnectionStatus> server_side = ServerConnections();
  ASSERT_EQ(server_side.size(), 16u);
  for (const internal::ConnectionStatus& c : server_side) {
    EXPECT_EQ(c.peer_recv_depth, 4) << c.peer;
  }
}

// A server that streams fast to the client grows its window on the
// client's queue from the floor, up to recv_depth; the messages arrive
// whole and in order.
TEST(ClientSharedReceiveQueue, AStreamingServerGrowsItsWindowUpToRecvDepth) {
  ServiceFixture<StreamService> f(ServerOptions(), [] {
    ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/64, /*recv_depth=*/24);
    co.pool_size = 1;
    return co;
  }());
  softrdma::ResetStats();
  ClientContext ctx;
  ctx.set_deadline(absl::Now() + absl::Seconds(30));
  EchoRequest req;
  req.set_tag(3000);
  req.set_reply_bytes(40);
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  int n = 0;
  int most = 0;
  while (reader.Read(&resp)) {
    ASSERT_EQ(resp.text(), absl::StrCat(n));
    ASSERT_EQ(resp.data(), PatternBytes(n, 40));
    ++n;
    if (n % 500 == 0) {
      const std::vector<internal::ConnectionStatus> c = ClientConnections();
      ASSERT_EQ(c.size(), 1u);
      most = std::max(most, c[0].local_recv_depth);
      EXPECT_LE(c[0].local_recv_depth, 24);
    }
  }
  const absl::Status s = reader.Finish();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(n, 3000);
  EXPECT_GT(most, 4);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
}

// A server with the echo and the stream service, on 127.0.0.1:`port`.
struct EchoAndStreams {
  explicit EchoAndStreams(int port = 0) {
    EXPECT_TRUE(server.AddService(&echo).ok());
    EXPECT_TRUE(server.AddService(&streams).ok());
    const absl::Status s = server.Start(absl::StrCat("127.0.0.1:", port));
    EXPECT_TRUE(s.ok()) << s;
  }
  EchoService echo;
  StreamService streams;
  Server server;
};

// Server streams flood the client (it reads them with no pause) while
// unary calls go on beside them on the same channel, to both servers: the
// connection of the stream borrows beyond its floor, but only its share of
// the queue, and the calls beside it do not wait on receiver-not-ready.
TEST(ClientSharedReceiveQueue, AFloodingServerBorrowsOnlyItsShare) {
  EchoAndStreams a;
  EchoAndStreams b;
  // 16 shared round up to one slab of 256 receives; two connections leave
  // 248 beyond their floors of 4, and recv_depth does not cap a share.
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/16, /*recv_depth=*/10000);
  co.pool_size = 1;
  absl::StatusOr<std::shared_ptr<Channel>> channel = CreateChannel(
      absl::StrCat("127.0.0.1:", a.server.port(), ",127.0.0.1:", b.server.port()), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  softrdma::ResetStats();
  std::atomic<bool> stop{false};
  std::atomic<int> messages{0};
  std::atomic<int> streams_failed{0};
  std::thread flooder([&] {
    while (!stop.load()) {
      ClientContext ctx;
      ctx.set_deadline(absl::Now() + absl::Seconds(30));
      EchoRequest req;
      req.set_tag(2000);
      req.set_reply_bytes(32);
      ClientReader<EchoResponse> reader(channel->get(), kExpandMethod, &ctx, req);
      EchoResponse resp;
      int n = 0;
      while (reader.Read(&resp)) {
        if (resp.text() != absl::StrCat(n)) break;
        ++n;
        messages.fetch_add(1);
      }
      const absl::Status s = reader.Finish();
      if (!s.ok() || n != 2000) {
        ADD_FAILURE() << s << " after " << n << " messages";
        streams_failed.fetch_add(1);
      }
    }
  });
  while (messages.load() < 3000) absl::SleepFor(absl::Milliseconds(1));
  int quiet_ok = 0;
  int most = 0;
  int least = 1 << 30;
  for (int i = 0; i < 50; ++i) {
    const absl::Status s = EchoBack(channel->get(), absl::StrCat("quiet-", i));
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) ++quiet_ok;
    if (i % 10 == 0) {
      for (const internal::ConnectionStatus& c : ClientConnections()) {
        most = std::max(most, c.local_recv_depth);
        least = std::min(least, c.local_recv_depth);
      }
    }
  }
  stop.store(true);
  flooder.join();
  EXPECT_EQ(quiet_ok, 50);
  EXPECT_EQ(streams_failed.load(), 0);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
  // Never past a share (4 + 248 with nobody else borrowing), never below a
  // floor; the stream's connection grew.
  EXPECT_GT(most, 4);
  EXPECT_LE(most, 4 + 248);
  EXPECT_GE(least, 4);
}

// A connection whose floor the queue cannot hold any more fails its calls
// RESOURCE_EXHAUSTED naming the numbers; the channel's other connection
// carries on.
TEST(ClientSharedReceiveQueue, AConnectionBeyondTheQueuesRoomFailsResourceExhausted) {
  EchoFixture f;
  // Floors of 20,000 receives: one connection fits in softrdma's
  // max_srq_wr (32767), two do not. 256-byte buffers keep it small.
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/1, /*recv_depth=*/20000);
  co.srq_min_credits = 20000;
  co.eager_limit_bytes = 256;
  co.pool_size = 2;
  absl::StatusOr<std::shared_ptr<Channel>> channel =
      CreateChannel(absl::StrCat("127.0.0.1:", f.server.port()), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  int ok = 0;
  std::vector<absl::Status> failed;
  for (int i = 0; i < 6; ++i) {
    const absl::Status s = EchoBack(channel->get(), absl::StrCat("call-", i));
    if (s.ok()) {
      ++ok;
    } else {
      failed.push_back(s);
    }
  }
  EXPECT_GE(ok, 3);
  ASSERT_FALSE(failed.empty());
  for (const absl::Status& s : failed) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("shared receive queue full"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("shared receive queue full: 40001 receives needed, at most 32512 "
                               "fit (the device's max_srq_wr 32767 in slabs of 256); it holds 1 "
                               "connection x 20000 srq_min_credits + 1 srq_shared_buffers"),
              absl::string_view::npos)
        << s;
  }
}

// A connection that died gives its floor back: with floors so large that
// the queue holds one connection, the channel reconnects to a server that
// restarted on its port three times over, and each time calls go through.
TEST(ClientSharedReceiveQueue, AReconnectedConnectionReusesTheFloorTheDeadOneGaveBack) {
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/1, /*recv_depth=*/20000);
  co.srq_min_credits = 20000;
  co.eager_limit_bytes = 256;
  co.pool_size = 1;
  auto server = std::make_unique<EchoAndStreams>();
  const int port = server->server.port();
  absl::StatusOr<std::shared_ptr<Channel>> channel =
      CreateChannel(absl::StrCat("127.0.0.1:", port), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  for (int life = 0; life < 4; ++life) {
    if (life > 0) {
      server.reset();  // its connection to us dies with it
      server = std::make_unique<EchoAndStreams>(port);
    }
    // Calls that meet the dead connection fail UNAVAILABLE; the reconnect
    // (backoff about 1 s, then 1.6 s, ±20%) brings them back.
    absl::Status last;
    const absl::Time until = absl::Now() + absl::Seconds(15);
    bool ok = false;
    while (!ok && absl::Now() < until) {
      last = EchoBack(channel->get(), absl::StrCat("life-", life));
      ok = last.ok();
      if (!ok) {
        EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    ASSERT_TRUE(ok) << "server life " << life << ": " << last;
    const std::vector<internal::ConnectionStatus> clients = ClientConnections();
    ASSERT_EQ(clients.size(), 1u);
    EXPECT_TRUE(clients[0].shared_receive_queue);
    EXPECT_EQ(clients[0].local_recv_depth, 20000);
  }
}

// A channel to 8 servers with one connection each over 4 engine threads:
// the pools spread over the threads, two connections on each thread's
// queue, so raising engine_threads spreads the receives too.
TEST(ClientSharedReceiveQueue, AStaticTargetsServersSpreadOverTheEngineThreads) {
  std::vector<std::unique_ptr<EchoFixture>> servers;
  std::string target;
  for (int i = 0; i < 8; ++i) {
    servers.push_back(std::make_unique<EchoFixture>());
    absl::StrAppend(&target, i == 0 ? "" : ",", "127.0.0.1:", servers.back()->server.port());
  }
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/16);
  co.engine_threads = 4;
  co.pool_size = 1;
  absl::StatusOr<std::shared_ptr<Channel>> channel = CreateChannel(target, co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  for (int i = 0; i < 16; ++i) {  // round robin: two calls to each server
    const absl::Status s = EchoBack(channel->get(), absl::StrCat("call-", i));
    ASSERT_TRUE(s.ok()) << s;
  }
  for (const auto& s : servers) EXPECT_EQ(s->service.calls(), 2);
  std::map<std::string, int> per_engine;
  for (const internal::ConnectionStatus& c : ClientConnections()) {
    EXPECT_TRUE(c.shared_receive_queue) << c.peer;
    ++per_engine[c.engine];
  }
  EXPECT_EQ(per_engine, (std::map<std::string, int>{{"rdmarpc-client-0", 2},
                                                    {"rdmarpc-client-1", 2},
                                                    {"rdmarpc-client-2", 2},
                                                    {"rdmarpc-client-3", 2}}));
}

// A device without shared receive queues (ibv_create_srq fails
// EOPNOTSUPP): a server and a channel that ask for them get receive rings
// of their own per connection instead, and calls work. Each side's one
// loop asks the device once: two failures cover both connections of each
// side (a second ask would get an SRQ).
TEST(SharedReceiveQueue, ADeviceWithoutThemGivesEveryConnectionItsOwnRing) {
  softrdma::FailNext(softrdma::FaultOp::kCreateSrq, 2, EOPNOTSUPP);
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/16);
  co.pool_size = 2;
  EchoFixture f(SharedQueue(/*shared_buffers=*/16), co);
  for (int i = 0; i < 20; ++i) {  // eager and rendezvous
    const absl::Status s = EchoBack(f.channel.get(), absl::StrCat("ring-", i),
                                    std::string(i % 2 == 0 ? 32 : 20000, 'r'));
    ASSERT_TRUE(s.ok()) << s;
  }
  const std::vector<internal::ConnectionStatus> servers = ServerConnections();
  const std::vector<internal::ConnectionStatus> clients = ClientConnections();
  softrdma::FailNext(softrdma::FaultOp::kCreateSrq, 0, 0);
  ASSERT_EQ(servers.size(), 2u);
  ASSERT_EQ(clients.size(), 2u);
  for (const auto* side : {&servers, &clients}) {
    for (const internal::ConnectionStatus& c : *side) {
      EXPECT_FALSE(c.shared_receive_queue) << c.peer;
      EXPECT_EQ(c.local_recv_depth, 64) << c.peer;
      EXPECT_EQ(c.peer_recv_depth, 64) << c.peer;
    }
  }
}

TEST(ClientSharedReceiveQueue, OptionsOutOfRangeFailCreateChannel) {
  ChannelOptions co = ClientSharedQueue(/*shared_buffers=*/0);
  absl::StatusOr<std::shared_ptr<Channel>> ch = CreateChannel("127.0.0.1:1", co);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(), "ChannelOptions: srq_shared_buffers 0 (1..65535)");
  co = ClientSharedQueue(/*shared_buffers=*/1);
  co.srq_min_credits = 2;
  ch = CreateChannel("127.0.0.1:1", co);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(), "ChannelOptions: srq_min_credits 2 (3..65535)");
  // Only checked for a shared queue.
  co.receive_queue = ChannelOptions::ReceiveQueue::kPerConnection;
  ch = CreateChannel("127.0.0.1:1", co);
  EXPECT_TRUE(ch.ok()) << ch.status();
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
