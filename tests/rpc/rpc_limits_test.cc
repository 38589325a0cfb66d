// Limits and edges of the data path, end to end: the eager limit and
// max_message_bytes at ±1 byte, empty messages, responses above the client's
// limit on each of the three response paths (eager, pushed, pulled), the
// smallest receive rings, teardown under load, and connect/disconnect cycles
// that must leave nothing behind.
#include <dirent.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/header.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

constexpr size_t kMethodBytes = sizeof(kEchoMethod) - 1;

// A request carrying only `data`, of exactly `bytes` serialised bytes.
EchoRequest RequestOfSize(size_t bytes) {
  EchoRequest req;
  // 1 tag byte + varint length + data; try the data sizes near the target.
  for (size_t n = bytes > 8 ? bytes - 8 : 0; n <= bytes; ++n) {
    req.set_data(std::string(n, 'x'));
    if (req.ByteSizeLong() == bytes) return req;
  }
  ADD_FAILURE() << "no EchoRequest of exactly " << bytes << " bytes";
  return req;
}

// reply_bytes that make the EchoResponse exactly `bytes` serialised bytes.
int64_t ReplyBytesForResponseSize(size_t bytes) {
  EchoResponse resp;
  for (size_t n = bytes > 8 ? bytes - 8 : 0; n <= bytes; ++n) {
    resp.set_data(std::string(n, 'r'));
    if (resp.ByteSizeLong() == bytes) return static_cast<int64_t>(n);
  }
  ADD_FAILURE() << "no EchoResponse of exactly " << bytes << " bytes";
  return 0;
}

int CountOpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

int CountThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

absl::Status EchoWithin(Channel* ch, const EchoRequest& req, EchoResponse* resp,
                        absl::Duration timeout = absl::Seconds(30)) {
  ClientContext ctx;
  ctx.set_timeout(timeout);
  return Echo(ch, &ctx, req, resp);
}

TEST(EagerLimit, RequestAtTheLimitIsEagerAndOneByteMoreIsRead) {
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  EchoResponse resp;
  ASSERT_TRUE(EchoWithin(f.channel.get(), EchoRequest(), &resp).ok());  // connect first
  // Client eager limit 8192 = min(its eager_limit_bytes, server receive buffers).
  const size_t at_limit = 8192 - internal::kWireHeaderBytes - kMethodBytes;

  softrdma::ResetStats();
  EchoRequest req = RequestOfSize(at_limit);
  absl::Status s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.data(), req.data());
  EXPECT_EQ(softrdma::GetStats().rdma_read, 0u);
  EXPECT_EQ(softrdma::GetStats().max_send_bytes, 8192u);

  softrdma::ResetStats();
  req = RequestOfSize(at_limit + 1);
  s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.data(), req.data());
  EXPECT_EQ(softrdma::GetStats().rdma_read, 1u);  // the server pulled the request
  EXPECT_LT(softrdma::GetStats().max_send_bytes, 8192u);
}

TEST(EagerLimit, ResponseAtTheLimitIsEagerAndOneByteMoreIsPulled) {
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  EchoResponse resp;
  ASSERT_TRUE(EchoWithin(f.channel.get(), EchoRequest(), &resp).ok());
  const size_t at_limit = 8192 - internal::kWireHeaderBytes;  // no status message

  softrdma::ResetStats();
  EchoRequest req;
  req.set_reply_bytes(ReplyBytesForResponseSize(at_limit));
  absl::Status s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), at_limit);
  EXPECT_EQ(resp.data(), std::string(static_cast<size_t>(req.reply_bytes()), 'r'));
  EXPECT_EQ(softrdma::GetStats().rdma_read, 0u);
  EXPECT_EQ(softrdma::GetStats().max_send_bytes, 8192u);

  softrdma::ResetStats();
  req.set_reply_bytes(ReplyBytesForResponseSize(at_limit + 1));
  s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), at_limit + 1);
  EXPECT_EQ(resp.data(), std::string(static_cast<size_t>(req.reply_bytes()), 'r'));
  EXPECT_EQ(softrdma::GetStats().rdma_read, 1u);  // the client pulled the response
}

TEST(EagerLimit, EverySizeAroundTheLimitEchoesExactly) {
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  const size_t at_limit = 8192 - internal::kWireHeaderBytes - kMethodBytes;
  for (size_t size = at_limit - 40; size <= at_limit + 40; ++size) {
    EchoRequest req = RequestOfSize(size);
    for (char& c : *req.mutable_data()) c = static_cast<char>('a' + size % 26);
    EchoResponse resp;
    absl::Status s = EchoWithin(f.channel.get(), req, &resp);
    ASSERT_TRUE(s.ok()) << size << ": " << s;
    ASSERT_EQ(resp.data(), req.data()) << size;
  }
}

TEST(EmptyMessage, EmptyRequestGetsEmptyResponse) {
  EchoFixture f;
  EchoResponse resp;
  resp.set_text("stale");
  absl::Status s = EchoWithin(f.channel.get(), EchoRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), 0u);
  EXPECT_EQ(f.service.calls(), 1);
}

TEST(MaxMessageBytes, RequestAtTheLimitPassesAndOneByteMoreIsRefusedNamingSizes) {
  constexpr size_t kMax = 300000;
  ServerOptions so;
  so.max_message_bytes = kMax;
  ChannelOptions co;
  co.max_message_bytes = kMax;
  EchoFixture f(so, co);
  EchoRequest req = RequestOfSize(kMax);
  EchoResponse resp;
  absl::Status s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.data(), req.data());  // the response is kMax bytes too

  req = RequestOfSize(kMax + 1);
  s = EchoWithin(f.channel.get(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), "request of 300001 bytes exceeds max_message_bytes 300000");
  EXPECT_EQ(f.service.calls(), 1);
}

TEST(MaxMessageBytes, AboveWhatProtobufSerialisesIsRefusedNamingBothValues) {
  ChannelOptions co;
  co.max_message_bytes = kMaxProtobufMessageBytes;
  EXPECT_TRUE(CreateChannel("127.0.0.1:9", co).ok());
  co.max_message_bytes = kMaxProtobufMessageBytes + 1;
  auto ch = CreateChannel("127.0.0.1:9", co);
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ch.status().message(),
            "ChannelOptions: max_message_bytes 2147483648 exceeds 2147483647, the largest "
            "message protobuf serialises");
  ServerOptions so;
  so.max_message_bytes = size_t{4} << 30;
  Server server(so);
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "ServerOptions: max_message_bytes 4294967296 exceeds 2147483647, the largest "
            "message protobuf serialises");
}

TEST(MaxMessageBytes, ServerRefusesItsOwnResponseOneByteAboveItsLimit) {
  constexpr size_t kMax = 300000;
  ServerOptions so;
  so.max_message_bytes = kMax;
  EchoFixture f(so);
  EchoRequest req;
  req.set_reply_bytes(ReplyBytesForResponseSize(kMax));
  EchoResponse resp;
  absl::Status s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), kMax);

  req.set_reply_bytes(ReplyBytesForResponseSize(kMax + 1));
  s = EchoWithin(f.channel.get(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), "response of 300001 bytes exceeds max_message_bytes 300000");
}

// A response above the client's max_message_bytes fails the call with
// RESOURCE_EXHAUSTED naming both sizes on each response path, and the
// connection stays usable.
TEST(MaxMessageBytes, ResponseAboveClientLimitIsResourceExhaustedOnEveryPath) {
  constexpr size_t kMax = 300000;
  ChannelOptions co;
  co.pool_size = 1;
  co.max_message_bytes = kMax;
  EchoFixture f(ServerOptions(), co);
  EchoResponse resp;
  ASSERT_TRUE(EchoWithin(f.channel.get(), EchoRequest(), &resp).ok());
  const std::string want = "response of 300001 bytes exceeds max_message_bytes 300000";

  // Pulled: a small request has no reply buffer; the server exposes.
  softrdma::ResetStats();
  EchoRequest small;
  small.set_reply_bytes(ReplyBytesForResponseSize(kMax + 1));
  absl::Status s = EchoWithin(f.channel.get(), small, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), want);
  EXPECT_EQ(softrdma::GetStats().rdma_write_with_imm, 0u);

  // Pushed: a large request advertises a reply buffer big enough (64 KiB
  // multiples) for the response, which the server writes into it.
  softrdma::ResetStats();
  EchoRequest large;
  large.set_data(std::string(280000, 'L'));
  large.set_reply_bytes(ReplyBytesForResponseSize(kMax + 1));
  s = EchoWithin(f.channel.get(), large, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), want);
  EXPECT_EQ(softrdma::GetStats().rdma_write_with_imm, 1u);

  // At the limit both work.
  small.set_reply_bytes(ReplyBytesForResponseSize(kMax));
  s = EchoWithin(f.channel.get(), small, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), kMax);
  large.set_reply_bytes(ReplyBytesForResponseSize(kMax));
  s = EchoWithin(f.channel.get(), large, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), kMax);
  EXPECT_EQ(f.service.calls(), 5);
}

TEST(MaxMessageBytes, EagerResponseAboveClientLimitIsResourceExhausted) {
  ChannelOptions co;
  co.max_message_bytes = 1000;
  EchoFixture f(ServerOptions(), co);
  EchoRequest req;
  req.set_reply_bytes(ReplyBytesForResponseSize(1001));  // fits one eager SEND
  EchoResponse resp;
  absl::Status s = EchoWithin(f.channel.get(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), "response of 1001 bytes exceeds max_message_bytes 1000");
  req.set_reply_bytes(ReplyBytesForResponseSize(1000));
  s = EchoWithin(f.channel.get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.ByteSizeLong(), 1000u);
}

// Two receives each way (one of them reserved for credit returns) with
// several threads sending large and small requests that get large and small
// responses: every call completes, nothing provokes RNR.
TEST(Credits, TwoReceivesEachWayMixedSizesNeverDeadlock) {
  ServerOptions so;
  so.recv_depth = 2;
  so.num_workers = 1;
  ChannelOptions co;
  co.recv_depth = 2;
  co.pool_size = 1;
  EchoFixture f(so, co);
  softrdma::ResetStats();
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(77 + t);
      for (int i = 0; i < 40; ++i) {
        EchoRequest req;
        const size_t size = rng() % 2 ? rng() % 200000 : rng() % 5000;
        req.set_data(std::string(size, static_cast<char>('a' + i % 26)));
        req.set_text(absl::StrCat(t, "/", i));
        if (rng() % 3 == 0) req.set_reply_bytes(static_cast<int64_t>(rng() % 150000) + 1);
        EchoResponse resp;
        absl::Status s = EchoWithin(f.channel.get(), req, &resp, absl::Seconds(60));
        const bool right = s.ok() && resp.text() == req.text() &&
                           (req.reply_bytes() > 0
                                ? resp.data() == std::string(req.reply_bytes(), 'r')
                                : resp.data() == req.data());
        if (!right) {
          ADD_FAILURE() << t << "/" << i << ": " << s;
          return;  // a stuck connection would fail every later call slowly
        }
        ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 160);
  EXPECT_EQ(f.service.calls(), 160);
  EXPECT_EQ(softrdma::GetStats().rnr_retries, 0u);
}

// Server Shutdown while clients stream 16 MiB calls: every call ends (OK or
// UNAVAILABLE) well before its deadline; none hangs.
TEST(Shutdown, WhileStreamingSixteenMiBCallsEveryCallEnds) {
  auto f = std::make_unique<EchoFixture>();
  EchoRequest req;
  req.set_data(std::string(16 << 20, 'S'));
  std::atomic<int> ok{0};
  std::atomic<int> unavailable{0};
  std::atomic<int> started{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        EchoResponse resp;
        started.fetch_add(1);
        absl::Status s = EchoWithin(f->channel.get(), req, &resp, absl::Seconds(60));
        if (s.ok()) {
          EXPECT_EQ(resp.data().size(), req.data().size());
          ok.fetch_add(1);
        } else {
          EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
          unavailable.fetch_add(1);
        }
      }
    });
  }
  // Let a few calls complete, then shut down with calls in flight.
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (ok.load() < 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_GE(ok.load(), 2);
  f->server.Shutdown(absl::Milliseconds(50));
  f->server.Wait();
  // After the shutdown every new call fails at once; stop the streams.
  while (unavailable.load() < 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_GE(unavailable.load(), 2);
  EXPECT_EQ(ok.load() + unavailable.load(), started.load());
}

// Many connect/call/disconnect cycles leave no QP, cm id, MR, CQ, fd or
// thread behind, on the client or the server.
TEST(Lifecycle, ConnectDisconnectCyclesLeakNothing) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const std::string target = absl::StrCat("127.0.0.1:", server.port());
  auto cycle = [&](int i) {
    auto ch = CreateChannel(target);
    ASSERT_TRUE(ch.ok()) << ch.status();
    EchoRequest req;
    req.set_text(absl::StrCat("cycle ", i));
    req.set_data(std::string(i % 2 ? 100000 : 10, 'c'));  // both paths
    EchoResponse resp;
    absl::Status s = EchoWithin(ch->get(), req, &resp);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_EQ(resp.text(), req.text());
    EXPECT_EQ(resp.data(), req.data());
  };
  // Warm up: the server's worker CQs and PD, its large-buffer pool.
  cycle(0);
  cycle(1);
  // The server tears its side down when it sees the disconnect (bounded by
  // the flush wait), on its worker thread: wait until no QP is left and the
  // other gauges have stopped moving before reading them.
  struct Snapshot {
    softrdma::Stats stats;
    int fds = 0;
    int threads = 0;
    bool operator==(const Snapshot& o) const {
      return stats.live_qps == o.stats.live_qps && stats.live_cm_ids == o.stats.live_cm_ids &&
             stats.live_mrs == o.stats.live_mrs && stats.live_cqs == o.stats.live_cqs &&
             stats.live_pds == o.stats.live_pds && fds == o.fds && threads == o.threads;
    }
  };
  auto quiet = [] {
    auto take = [] { return Snapshot{softrdma::GetStats(), CountOpenFds(), CountThreads()}; };
    const absl::Time until = absl::Now() + absl::Seconds(20);
    Snapshot last = take();
    while (absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(50));
      Snapshot now = take();
      if (now.stats.live_qps == 0 && now.stats.live_cm_ids == 1 && now == last) return now;
      last = now;
    }
    return last;
  };
  const Snapshot before = quiet();
  EXPECT_EQ(before.stats.live_qps, 0);
  EXPECT_EQ(before.stats.live_cm_ids, 1);  // the listener
  for (int i = 2; i < 32; ++i) cycle(i);
  const Snapshot after = quiet();
  EXPECT_EQ(after.stats.live_qps, 0);
  EXPECT_EQ(after.stats.live_cm_ids, 1);
  EXPECT_EQ(after.stats.live_mrs, before.stats.live_mrs);
  EXPECT_EQ(after.stats.live_cqs, before.stats.live_cqs);
  EXPECT_EQ(after.stats.live_pds, before.stats.live_pds);
  EXPECT_EQ(after.fds, before.fds);
  EXPECT_EQ(after.threads, before.threads);
  EXPECT_EQ(service.calls(), 32);
}

TEST(MaxConcurrentStreams, ACallOverTheCapFailsAndTheConnectionCarriesOn) {
  ServerOptions so;
  so.max_concurrent_streams = 4;
  so.handler_threads = 8;
  ChannelOptions co;
  co.pool_size = 1;  // one connection: all calls below share it
  EchoFixture f(so, co);
  // Four calls that hold their handlers for a while.
  absl::BlockingCounter slow_done(4);
  std::atomic<int> slow_ok{0};
  std::vector<std::unique_ptr<ClientContext>> contexts;
  std::vector<std::unique_ptr<EchoResponse>> responses;
  EchoRequest slow;
  slow.set_sleep_ms(1500);
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<ClientContext>());
    responses.push_back(std::make_unique<EchoResponse>());
    internal::AsyncUnaryCall(f.channel.get(), kEchoMethod, contexts.back().get(), slow,
                             responses.back().get(), [&](absl::Status s) {
                               if (s.ok()) slow_ok.fetch_add(1);
                               slow_done.DecrementCount();
                             });
  }
  for (int i = 0; i < 500 && f.service.calls() < 4; ++i) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(f.service.calls(), 4);
  // The fifth on that connection is refused at once, naming the cap.
  ClientContext ctx;
  EchoRequest req;
  req.set_text("fifth");
  EchoResponse resp;
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), "calls in progress, the server's max_concurrent_streams; "
                   "/rdmarpc.test.EchoService/Echo was not started"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), " has 4 calls")) << s;
  EXPECT_EQ(f.service.calls(), 4);
  // Another connection is not held up.
  auto other = CreateChannel(absl::StrCat("127.0.0.1:", f.server.port()), co);
  ASSERT_TRUE(other.ok());
  ClientContext other_ctx;
  EXPECT_TRUE(Echo(other->get(), &other_ctx, req, &resp).ok());
  // The four finish; then the first connection takes calls again.
  slow_done.Wait();
  EXPECT_EQ(slow_ok.load(), 4);
  ClientContext again;
  s = Echo(f.channel.get(), &again, req, &resp);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), "fifth");
}

TEST(MaxConcurrentStreams, ANegativeCapIsRefusedAtStart) {
  ServerOptions so;
  so.max_concurrent_streams = -1;
  Server server(so);
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "ServerOptions: max_concurrent_streams -1 (>= 0; 0 for no cap)");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
