// rpc_stream_test.cc: the three streaming kinds end to end over softrdma:
// order and bytes (eager and rendezvous messages mixed), statuses with
// details, per-stream flow control next to unary calls, cancellation,
// deadlines, and refusals.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

struct Fixture {
  explicit Fixture(ChannelOptions co = ChannelOptions()) {
    EXPECT_TRUE(server.AddService(&streams).ok());
    EXPECT_TRUE(server.AddService(&echo).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  StreamService streams;
  EchoService echo;
  Server server;
  std::shared_ptr<Channel> channel;
};

TEST(ServerStreaming, DeliversEveryMessageInOrderByteExact) {
  Fixture f;
  EchoRequest req;
  req.set_tag(100);
  req.set_reply_bytes(100);
  req.set_sleep_ms(100000);  // every 10th message is 100 KB: pulled by RDMA READ
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  int i = 0;
  while (reader.Read(&resp)) {
    ASSERT_EQ(resp.text(), absl::StrCat(i)) << i;
    ASSERT_EQ(resp.data(), PatternBytes(i, i % 10 == 9 ? 100000 : 100)) << i;
    ++i;
  }
  absl::Status s = reader.Finish();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(i, 100);
  EXPECT_EQ(ctx.peer(), absl::StrCat("127.0.0.1:", f.server.port()));
}

TEST(ServerStreaming, HandlerStatusAfterMessagesReachesTheClient) {
  Fixture f;
  EchoRequest req;
  req.set_tag(3);
  req.set_reply_bytes(10);
  req.set_text("fail");
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  int n = 0;
  while (reader.Read(&resp)) ++n;
  EXPECT_EQ(n, 3);
  absl::Status s = reader.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ(s.message(), "ran out");
}

TEST(ClientStreaming, ServerReadsEveryMessageInOrderAndAnswersOnce) {
  Fixture f;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
  std::string want;
  for (int i = 0; i < 50; ++i) {
    EchoRequest req;
    req.set_data(PatternBytes(i, i % 7 == 6 ? 50000 : 30));
    want += req.data();
    ASSERT_TRUE(writer.Write(req)) << i;
  }
  ASSERT_TRUE(writer.WritesDone());
  EXPECT_FALSE(writer.WritesDone());  // once only
  absl::Status s = writer.Finish();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), "50");
  EXPECT_EQ(resp.data(), want);
}

TEST(ClientStreaming, HandlerFailureWithDetailsEndsTheStream) {
  Fixture f;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
  EchoRequest req;
  req.set_text("ok");
  ASSERT_TRUE(writer.Write(req));
  req.set_text("fail");
  ASSERT_TRUE(writer.Write(req));
  absl::Status s = writer.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_EQ(s.message(), "failed after 2");
  ASSERT_TRUE(s.GetPayload("why").has_value());
  EXPECT_EQ(std::string(*s.GetPayload("why")), "because");
}

TEST(BidiStreaming, PingPongThenHalfCloseEndsOk) {
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
  for (int i = 0; i < 100; ++i) {
    EchoRequest req;
    req.set_text(absl::StrCat("ping ", i));
    req.set_data(PatternBytes(i, i % 25 == 24 ? 70000 : 8));
    ASSERT_TRUE(stream.Write(req)) << i;
    EchoResponse resp;
    ASSERT_TRUE(stream.Read(&resp)) << i;
    EXPECT_EQ(resp.text(), req.text());
    EXPECT_EQ(resp.data(), req.data());
  }
  ASSERT_TRUE(stream.WritesDone());
  EchoResponse extra;
  EXPECT_FALSE(stream.Read(&extra));
  absl::Status s = stream.Finish();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(BidiStreaming, ReaderAndWriterOnTwoThreads) {
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
  constexpr int kMessages = 2000;
  std::thread writer([&] {
    for (int i = 0; i < kMessages; ++i) {
      EchoRequest req;
      req.set_text(absl::StrCat(i));
      ASSERT_TRUE(stream.Write(req)) << i;
    }
    stream.WritesDone();
  });
  EchoResponse resp;
  int i = 0;
  while (stream.Read(&resp)) {
    ASSERT_EQ(resp.text(), absl::StrCat(i));
    ++i;
  }
  writer.join();
  EXPECT_EQ(i, kMessages);
  EXPECT_TRUE(stream.Finish().ok());
}

// The scenario: a client stops reading while the server writes
// 10,000 messages of 4 KiB; the server's writes stop after a bounded
// window; 1,000 unary calls on the same Channel (one connection) all
// complete meanwhile; the client then receives all 10,000, in order,
// byte-exact.
TEST(FlowControl, StalledReaderStopsOnlyItsWriterAndLosesNothing) {
  ChannelOptions co;
  co.pool_size = 1;
  Fixture f(co);
  constexpr int kMessages = 10000;
  EchoRequest req;
  req.set_tag(kMessages);
  req.set_reply_bytes(4096);
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(120));
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  ASSERT_TRUE(WaitFor([&] { return f.streams.written_.load() >= 1; }));
  absl::SleepFor(absl::Milliseconds(300));  // let the writer run into the window
  const int stalled_at = f.streams.written_.load();
  EXPECT_LE(stalled_at, static_cast<int>(internal::kStreamWindow) + 1);
  EXPECT_GE(stalled_at, static_cast<int>(internal::kStreamWindow) - 1);
  for (int i = 0; i < 1000; ++i) {
    EchoRequest ereq;
    ereq.set_text(absl::StrCat("unary ", i));
    EchoResponse eresp;
    ClientContext ectx;
    ectx.set_timeout(absl::Seconds(30));
    absl::Status s = Echo(f.channel.get(), &ectx, ereq, &eresp);
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    ASSERT_EQ(eresp.text(), ereq.text());
  }
  EXPECT_EQ(f.streams.written_.load(), stalled_at);  // still stopped
  EchoResponse resp;
  int i = 0;
  while (reader.Read(&resp)) {
    ASSERT_EQ(resp.text(), absl::StrCat(i));
    ASSERT_EQ(resp.data(), PatternBytes(i, 4096)) << i;
    ++i;
  }
  EXPECT_EQ(i, kMessages);
  EXPECT_TRUE(reader.Finish().ok());
}

TEST(StreamCancel, TryCancelEndsTheStreamCancelledAndTheServerSeesIt) {
  Fixture f;
  EchoRequest req;
  req.set_tag(1000000);  // far more than will be read
  req.set_reply_bytes(16);
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(60));
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(reader.Read(&resp));
  ctx.TryCancel();
  while (reader.Read(&resp)) {
  }
  absl::Status s = reader.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  ASSERT_TRUE(WaitFor([&] { return f.streams.write_failed_.load() == 1; }));
  EXPECT_EQ(f.streams.saw_cancel_.load(), 1);
}

TEST(StreamCancel, DestroyingTheReaderBeforeFinishCancelsTheCall) {
  Fixture f;
  {
    EchoRequest req;
    req.set_tag(1000000);
    req.set_reply_bytes(16);
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(60));
    ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
    EchoResponse resp;
    ASSERT_TRUE(reader.Read(&resp));
  }  // reader, then context, destroyed
  ASSERT_TRUE(WaitFor([&] { return f.streams.write_failed_.load() == 1; }));
  EXPECT_EQ(f.streams.saw_cancel_.load(), 1);
  // The channel goes on.
  EchoRequest ereq;
  ereq.set_text("after");
  EchoResponse eresp;
  ClientContext ectx;
  ectx.set_timeout(absl::Seconds(30));
  ASSERT_TRUE(Echo(f.channel.get(), &ectx, ereq, &eresp).ok());
}

TEST(StreamDeadline, StreamThatOutlivesItsDeadlineEndsDeadlineExceeded) {
  Fixture f;
  EchoRequest req;
  req.set_tag(1000000);
  req.set_reply_bytes(16);
  ClientContext ctx;
  ctx.set_timeout(absl::Milliseconds(300));
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  ASSERT_TRUE(reader.Read(&resp));  // then stop reading: the window fills
  absl::SleepFor(absl::Milliseconds(500));
  while (reader.Read(&resp)) {
  }
  absl::Status s = reader.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  ASSERT_TRUE(WaitFor([&] { return f.streams.saw_cancel_.load() == 1; }));
}

TEST(StreamRefusals, UnknownStreamingMethodIsUnimplemented) {
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kUnknownStreamMethod,
                                                       &ctx);
  EchoResponse resp;
  EXPECT_FALSE(stream.Read(&resp));
  absl::Status s = stream.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

TEST(StreamRefusals, UnaryMethodCalledAsAStreamIsInternalNamingBoth) {
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  EchoRequest req;
  ClientReader<EchoResponse> reader(f.channel.get(), kEchoMethod, &ctx, req);
  EchoResponse resp;
  EXPECT_FALSE(reader.Read(&resp));
  absl::Status s = reader.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("is a unary method on this server but was called as a stream"),
            absl::string_view::npos)
      << s;
}

TEST(StreamRefusals, CancelledBeforeOpeningNeverReachesTheServer) {
  Fixture f;
  ClientContext ctx;
  ctx.TryCancel();
  EchoRequest req;
  req.set_tag(5);
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  EXPECT_FALSE(reader.Read(&resp));
  EXPECT_EQ(reader.Finish().code(), absl::StatusCode::kCancelled);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(f.streams.expand_started_.load(), 0);
}

TEST(StreamConcurrency, ManyStreamsAtOnceOnOneConnection) {
  ChannelOptions co;
  co.pool_size = 1;
  Fixture f(co);
  constexpr int kStreams = 16;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kStreams; ++t) {
    threads.emplace_back([&, t] {
      ClientContext ctx;
      ctx.set_timeout(absl::Seconds(60));
      ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
      for (int i = 0; i < 200; ++i) {
        EchoRequest req;
        req.set_text(absl::StrCat(t, "/", i));
        if (!stream.Write(req)) return;
        EchoResponse resp;
        if (!stream.Read(&resp) || resp.text() != req.text()) return;
      }
      stream.WritesDone();
      if (stream.Finish().ok()) ok.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kStreams);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
