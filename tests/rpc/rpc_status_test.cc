// Status codes a client sees: DEADLINE_EXCEEDED, UNAVAILABLE, UNIMPLEMENTED,
// RESOURCE_EXHAUSTED, INTERNAL, and the server's own codes.
#include <dirent.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/transport.h"
#include "tests/testing/server_test_hooks.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

TEST(Status, ServerErrorCodeAndMessageReachClient) {
  EchoFixture f;
  EchoRequest req;
  req.set_text("fail");
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "asked to fail");
}

TEST(Status, UnknownMethodIsUnimplementedNamingIt) {
  EchoFixture f;
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = internal::BlockingUnaryCall(f.channel.get(), "/rdmarpc.test.EchoService/Nope",
                                               &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("/rdmarpc.test.EchoService/Nope"), absl::string_view::npos) << s;
}

TEST(Status, MethodNameOverOneKiBIsInvalidArgumentNamingItsLength) {
  EchoFixture f;
  EchoRequest req;
  EchoResponse resp;
  const std::string at_limit = "/" + std::string(1023, 'm');
  const std::string too_long = "/" + std::string(1024, 'm');
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  // 1024 bytes go to the server, which has no such method.
  EXPECT_EQ(internal::BlockingUnaryCall(f.channel.get(), at_limit, &ctx, req, &resp).code(),
            absl::StatusCode::kUnimplemented);
  ClientContext ctx2;
  ctx2.set_timeout(absl::Seconds(10));
  absl::Status s = internal::BlockingUnaryCall(f.channel.get(), too_long, &ctx2, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("method name of 1025 bytes"), absl::string_view::npos) << s;
  absl::Status async_status;
  ClientContext ctx3;
  ctx3.set_timeout(absl::Seconds(10));
  internal::AsyncUnaryCall(f.channel.get(), too_long, &ctx3, req, &resp,
                           [&](absl::Status st) { async_status = std::move(st); });
  // Refused inline, before anything is sent.
  EXPECT_EQ(async_status.code(), absl::StatusCode::kInvalidArgument) << async_status;
  EXPECT_EQ(f.service.calls(), 0);
}

TEST(Status, OversizedRequestIsResourceExhaustedWithBothSizes) {
  EchoFixture f;
  EchoRequest req;
  // 70000000 bytes encoded: data field tag (1) + length varint (4) + payload.
  req.set_data(std::string(70000000 - 5, 'z'));
  ASSERT_EQ(req.ByteSizeLong(), 70000000u);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "request of 70000000 bytes exceeds max_message_bytes 67108864");
  EXPECT_EQ(f.service.calls(), 0);
}

TEST(Status, ServerRefusesRequestAboveItsOwnLimit) {
  ServerOptions so;
  so.max_message_bytes = 100000;
  EchoFixture f(so);
  EchoRequest req;
  req.set_data(std::string(200000, 'z'));
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("exceeds max_message_bytes 100000"), absl::string_view::npos) << s;
  EXPECT_EQ(f.service.calls(), 0);
}

TEST(Status, UnparsableRequestIsInternal) {
  EchoFixture f;
  RawRequest raw;
  raw.set_text(std::string("\xff\xfe\xfd", 3));  // invalid UTF-8 for a proto3 string
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = internal::BlockingUnaryCall(f.channel.get(), kEchoMethod, &ctx, raw, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_EQ(f.service.calls(), 0);
}

TEST(Status, SlowHandlerGivesDeadlineExceededThenLateResponseIsDropped) {
  EchoFixture f;
  EchoRequest req;
  req.set_text("slow");
  // The handler outlives the deadline by far, so that the bound below
  // (returned before the handler finished) holds on a loaded sanitizer build.
  req.set_sleep_ms(2000);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
  EXPECT_EQ(resp.text(), "");
  // The connection keeps working after the late response arrives.
  absl::SleepFor(absl::Now() - start < absl::Milliseconds(2100)
                     ? absl::Milliseconds(2100) - (absl::Now() - start)
                     : absl::ZeroDuration());
  EchoRequest req2;
  req2.set_text("next");
  EchoResponse resp2;
  ClientContext ctx2;
  ctx2.set_timeout(absl::Seconds(10));
  ASSERT_TRUE(Echo(f.channel.get(), &ctx2, req2, &resp2).ok());
  EXPECT_EQ(resp2.text(), "next");
}

TEST(Status, ServerSeesClientDeadline) {
  EchoFixture f;
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  const absl::Time deadline = ctx.deadline();
  ASSERT_TRUE(Echo(f.channel.get(), &ctx, req, &resp).ok());
  EXPECT_LE(absl::AbsDuration(f.service.last_deadline() - deadline), absl::Milliseconds(500));
  ClientContext none;
  ASSERT_TRUE(Echo(f.channel.get(), &none, req, &resp).ok());
  EXPECT_EQ(f.service.last_deadline(), absl::InfiniteFuture());
}

TEST(Deadline, ExpiredLargeRequestIsSkippedByTheServerAndKeepsTheConnection) {
  ChannelOptions co;
  co.pool_size = 1;  // every call below shares one connection
  EchoFixture f(ServerOptions(), co);
  EchoRequest warm;
  EchoResponse r;
  ClientContext c;
  c.set_timeout(absl::Seconds(30));
  ASSERT_TRUE(Echo(f.channel.get(), &c, warm, &r).ok());
  softrdma::ResetStats();
  // The server would post the READ of the first large request 600 ms late;
  // the call's deadline passes first, the client sends kCancel, and the
  // server skips the READ instead of reading a buffer that may be reused.
  internal::SetServerRequestReadDelay(absl::Milliseconds(600), 1);
  EchoRequest first;
  first.set_data(std::string(100000, '1'));
  first.set_tag(1);
  EchoResponse resp1;
  ClientContext ctx1;
  ctx1.set_timeout(absl::Milliseconds(150));
  absl::Status s1 = Echo(f.channel.get(), &ctx1, first, &resp1);
  EXPECT_EQ(s1.code(), absl::StatusCode::kDeadlineExceeded) << s1;
  // Same size, same connection: the first call's buffer is still held back
  // (the server has not answered its cancel yet), so this one gets another.
  EchoRequest second;
  second.set_data(std::string(100000, '2'));
  second.set_tag(2);
  EchoResponse resp2;
  ClientContext ctx2;
  ctx2.set_timeout(absl::Seconds(10));
  absl::Status s2 = Echo(f.channel.get(), &ctx2, second, &resp2);
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_EQ(resp2.data(), second.data());
  // Past the delayed READ's time: it was skipped, not posted.
  absl::SleepFor(absl::Milliseconds(800));
  internal::SetServerRequestReadDelay(absl::ZeroDuration(), 0);
  EXPECT_EQ(softrdma::GetStats().rem_access_errors, 0u);
  // The second request's pull only (in kRendezvousChunkBytes pieces).
  EXPECT_EQ(softrdma::GetStats().rdma_read,
            (second.ByteSizeLong() + internal::kRendezvousChunkBytes - 1) /
                internal::kRendezvousChunkBytes);
  EXPECT_EQ(f.service.calls_with_tag(1), 0);
  EXPECT_EQ(f.service.calls_with_tag(2), 1);
  // The connection lived on: more large and small calls on it succeed.
  for (int i = 0; i < 20; ++i) {
    EchoRequest req;
    req.set_data(std::string(i % 2 == 0 ? 100000 : 10, static_cast<char>('a' + i)));
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    absl::Status s = Echo(f.channel.get(), &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_EQ(resp.data(), req.data());
  }
}

TEST(Deadline, LateLargeResponseLeavesTheConnectionWorking) {
  ChannelOptions co;
  co.pool_size = 1;
  EchoFixture f(ServerOptions(), co);
  {
    EchoRequest warm;  // connect first (see above)
    EchoResponse r;
    ClientContext c;
    c.set_timeout(absl::Seconds(30));
    ASSERT_TRUE(Echo(f.channel.get(), &c, warm, &r).ok());
  }
  softrdma::ResetStats();
  EchoRequest slow;
  slow.set_data(std::string(100000, 's'));  // rendezvous, with a reply buffer
  slow.set_sleep_ms(300);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(100));
  EXPECT_EQ(Echo(f.channel.get(), &ctx, slow, &resp).code(),
            absl::StatusCode::kDeadlineExceeded);
  // Calls made while the late response is still being written, and after.
  for (int i = 0; i < 6; ++i) {
    EchoRequest req;
    req.set_data(std::string(100000, static_cast<char>('a' + i)));
    EchoResponse r;
    ClientContext c;
    c.set_timeout(absl::Seconds(10));
    absl::Status s = Echo(f.channel.get(), &c, req, &r);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_EQ(r.data(), req.data());
    absl::SleepFor(absl::Milliseconds(60));
  }
  EXPECT_EQ(softrdma::GetStats().rem_access_errors, 0u);
  EXPECT_EQ(f.service.calls(), 8);  // warm-up, slow, six
}

TEST(Unavailable, NoListenerFailsBeforeDeadlineAndLeavesNothingBehind) {
  const int port = PortWithNoListener();
  const softrdma::Stats before = softrdma::GetStats();
  const int fds_before = CountOpenFds();
  {
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(ch.ok()) << ch.status();
    EchoRequest req;
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(3));
    const absl::Time start = absl::Now();
    absl::Status s = Echo(ch->get(), &ctx, req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find(absl::StrCat("no server listening on 127.0.0.1:", port)),
              absl::string_view::npos)
        << s;
    EXPECT_LT(absl::Now(), start + absl::Seconds(3));
    EXPECT_EQ(ctx.peer(), "");  // no server served it
  }
  const softrdma::Stats after = softrdma::GetStats();
  EXPECT_EQ(after.live_cm_ids, before.live_cm_ids);
  EXPECT_EQ(after.live_qps, before.live_qps);
  EXPECT_EQ(after.live_cqs, before.live_cqs);
  EXPECT_EQ(after.live_mrs, before.live_mrs);
  EXPECT_EQ(after.live_pds, before.live_pds);
  EXPECT_EQ(CountOpenFds(), fds_before);
}

TEST(Unavailable, ThousandsOfCallsToNoListenerAllFailUnavailableAndLeaveNothing) {
  const int port = PortWithNoListener();
  const softrdma::Stats before = softrdma::GetStats();
  {
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(ch.ok()) << ch.status();
    // Each call finds no connection and makes one, which is refused: the
    // refused ones must give their QP and CQ entries back at once, or the
    // CQ's room runs out (RESOURCE_EXHAUSTED) long before the calls do.
    constexpr int kThreads = 8;
    constexpr int kCallsPerThread = 150;
    constexpr int kCalls = kThreads * kCallsPerThread;
    absl::Mutex mu;
    std::map<absl::StatusCode, int> codes;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kCallsPerThread; ++i) {
          EchoRequest req;
          EchoResponse resp;
          ClientContext ctx;
          ctx.set_timeout(absl::Seconds(3));
          const absl::StatusCode code = Echo(ch->get(), &ctx, req, &resp).code();
          absl::MutexLock lock(&mu);
          ++codes[code];
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(codes[absl::StatusCode::kUnavailable], kCalls);
    EXPECT_EQ(codes.size(), 1u);
    // What a connection holds while it dies is bounded: softrdma counts live QPs.
    EXPECT_LE(softrdma::GetStats().live_qps - before.live_qps, 4);
  }
  const softrdma::Stats after = softrdma::GetStats();
  EXPECT_EQ(after.live_cm_ids, before.live_cm_ids);
  EXPECT_EQ(after.live_qps, before.live_qps);
  EXPECT_EQ(after.live_mrs, before.live_mrs);
}

TEST(Unavailable, UnreachableAddressFailsWithinConnectTimeout) {
  ChannelOptions co;
  co.connect_timeout = absl::Milliseconds(300);
  // TEST-NET-1 (RFC 5737): never routed; the connect fails or times out.
  auto ch = CreateChannel("192.0.2.1:7000", co);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  const absl::Time start = absl::Now();
  absl::Status s = Echo(ch->get(), &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_NE(s.message().find("192.0.2.1:7000"), absl::string_view::npos) << s;
}

TEST(Unavailable, ServerShutdownFailsCallsInFlight) {
  auto f = std::make_unique<EchoFixture>();
  // Park four large requests: their READs are delayed past the shutdown.
  internal::SetServerRequestReadDelay(absl::Seconds(3), 4);
  constexpr int kCalls = 4;
  std::vector<EchoRequest> reqs(kCalls);
  std::vector<EchoResponse> resps(kCalls);
  std::vector<std::unique_ptr<ClientContext>> ctxs;
  std::vector<absl::Status> results(kCalls);
  absl::BlockingCounter done(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    reqs[i].set_data(std::string(50000, 'p'));
    ctxs.push_back(std::make_unique<ClientContext>());
    ctxs.back()->set_timeout(absl::Seconds(20));
    internal::AsyncUnaryCall(f->channel.get(), kEchoMethod, ctxs.back().get(), reqs[i], &resps[i],
                             [&, i](absl::Status s) {
                               results[i] = s;
                               done.DecrementCount();
                             });
  }
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  f->server.Shutdown(absl::Milliseconds(100));
  f->server.Wait();
  done.Wait();
  internal::SetServerRequestReadDelay(absl::ZeroDuration(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kUnavailable) << i << ": " << results[i];
  }
  EXPECT_EQ(f->service.calls(), 0);
  // A new call on the channel also fails UNAVAILABLE (no server any more).
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(5));
  EXPECT_EQ(Echo(f->channel.get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
