// rpc_attachment_test: rdmarpc::Buffer attachments on unary calls, end to
// end over softrdma: every byte, both ways, inline and pulled by RDMA READ
// (with and without memory windows), beside small and large messages and
// metadata; what the runtime copies; lifetimes; and the errors.
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/transport/transport_stats.h"
#include "tests/rpc/attachment_pattern.h"
#include "tests/rpc/rpc_fixture.h"

DECLARE_bool(rdmarpc_memory_windows);

namespace rdmarpc {
namespace test {
namespace {

constexpr char kTransformMethod[] = "/rdmarpc.test.AttachmentService/Transform";
constexpr char kBounceMethod[] = "/rdmarpc.test.AttachmentService/Bounce";
constexpr char kAttachMethod[] = "/rdmarpc.test.AttachmentService/Attach";
constexpr char kKeepMethod[] = "/rdmarpc.test.AttachmentService/Keep";
constexpr char kFlakyMethod[] = "/rdmarpc.test.AttachmentService/Flaky";

// The first index where `b` differs from Pattern(n, seed) (plus one each
// byte when `plus_one`), or -1 when it matches and has n bytes.
int64_t FirstMismatch(const Buffer& b, size_t n, int seed, bool plus_one) {
  if (b.size() != n) return -2;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = static_cast<uint8_t>(PatternByte(i, seed) + (plus_one ? 1 : 0));
    if (static_cast<uint8_t>(b.data()[i]) != want) return static_cast<int64_t>(i);
  }
  return -1;
}

// Transform: checks nothing, answers with each attachment byte plus one in
// a new Buffer and text = "<attachment size>:<request text>"; "fail"
// answers NOT_FOUND (with an attachment set, which must not travel).
// Bounce: sends the request's attachment back as it is (no copy).
class AttachmentService final : public Service {
 public:
  AttachmentService() : Service("rdmarpc.test.AttachmentService") {
    using Method = absl::Status (AttachmentService::*)(ServerContext*, const EchoRequest&,
                                                        EchoResponse*);
    const std::pair<const char*, Method> methods[] = {
        {kTransformMethod, &AttachmentService::Transform},
        {kBounceMethod, &AttachmentService::Bounce},
        {kAttachMethod, &AttachmentService::Attach},
        {kKeepMethod, &AttachmentService::Keep},
        {kFlakyMethod, &AttachmentService::Flaky}};
    for (const auto& [name, method] : methods) {
      AddMethod(std::make_unique<
                internal::UnaryMethodHandler<AttachmentService, EchoRequest, EchoResponse>>(
          name, this, method));
    }
  }
  absl::Status Transform(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    const Buffer& in = ctx->request_attachment();
    had_attachment = static_cast<bool>(in);
    Buffer out = Buffer::Allocate(in.size());
    for (size_t i = 0; i < in.size(); ++i) out.data()[i] = static_cast<char>(in.data()[i] + 1);
    ctx->set_response_attachment(out);
    if (req.text() == "fail") return absl::NotFoundError("asked to fail");
    resp->set_text(absl::StrCat(in.size(), ":", req.text()));
    resp->set_data(req.data());
    auto md = ctx->client_metadata().find("k-bin");
    if (md != ctx->client_metadata().end()) ctx->AddTrailingMetadata("k-bin", md->second);
    return absl::OkStatus();
  }
  absl::Status Bounce(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    ctx->set_response_attachment(ctx->request_attachment());
    resp->set_text(req.text());
    return absl::OkStatus();
  }
  // Attach: echoes the message and always attaches Pattern(65536, 9).
  absl::Status Attach(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    ctx->set_response_attachment(Pattern(65536, 9));
    resp->set_text(req.text());
    resp->set_data(req.data());
    return absl::OkStatus();
  }
  // Keep: stores the request's attachment (as kvstore stores values) and
  // answers with how many are stored.
  absl::Status Keep(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    absl::MutexLock lock(&kept_mu);
    kept.push_back(ctx->request_attachment());
    resp->set_text(absl::StrCat(kept.size(), ":", req.text()));
    return absl::OkStatus();
  }
  // Flaky: the first attempt of each request text fails UNAVAILABLE; a
  // later one answers as Transform does. Records the attachment each
  // attempt arrived with: -3 when none, else its first mismatch against
  // Pattern(its size, seed = the text's length), -1 when whole.
  absl::Status Flaky(ServerContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    const Buffer& in = ctx->request_attachment();
    {
      absl::MutexLock lock(&kept_mu);
      flaky_attempts.push_back(
          in.empty() ? -3
                     : FirstMismatch(in, in.size(), static_cast<int>(req.text().size()), false));
      if (flaky_seen.insert(req.text()).second) return absl::UnavailableError("try again");
    }
    return Transform(ctx, req, resp);
  }
  std::atomic<bool> had_attachment{false};
  absl::Mutex kept_mu;
  std::vector<int64_t> flaky_attempts ABSL_GUARDED_BY(kept_mu);
  std::set<std::string> flaky_seen ABSL_GUARDED_BY(kept_mu);
  std::vector<Buffer> kept ABSL_GUARDED_BY(kept_mu);
};

// A callback (reactor) service: Bounce answers with the request's
// attachment from a thread of its own, after the method returned.
constexpr char kCallbackBounceMethod[] = "/rdmarpc.test.CallbackAttachments/Bounce";
class CallbackAttachments final : public Service {
 public:
  CallbackAttachments() : Service("rdmarpc.test.CallbackAttachments") {
    AddMethod(std::make_unique<
              internal::CallbackUnaryMethodHandler<CallbackAttachments, EchoRequest, EchoResponse>>(
        kCallbackBounceMethod, this, &CallbackAttachments::Bounce));
  }
  ~CallbackAttachments() override {
    absl::MutexLock lock(&mu_);
    for (auto& t : finishers_) t.join();
  }
  ServerUnaryReactor* Bounce(CallbackServerContext* ctx, const EchoRequest* req,
                             EchoResponse* resp) {
    resp->set_text(req->text());
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::MutexLock lock(&mu_);
    finishers_.emplace_back([ctx, reactor] {
      ctx->set_response_attachment(ctx->request_attachment());
      reactor->Finish(absl::OkStatus());
    });
    return reactor;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::thread> finishers_ ABSL_GUARDED_BY(mu_);
};

using AttachmentFixture = ServiceFixture<AttachmentService>;

absl::Status Call(Channel* ch, const char* method, ClientContext* ctx, const EchoRequest& req,
                  EchoResponse* resp) {
  return internal::BlockingUnaryCall(ch, method, ctx, req, resp);
}

// Sizes either side of the eager limit (8 KiB: inline below, pulled
// above), a piece boundary (64 KiB) and the bulk pieces (4 MiB).
const std::vector<size_t> kSizes = {0, 1, 100, 8000, 8192, 9000, 65536 + 3, 1 << 20,
                                    (16 << 20) + 5};

void RoundTripEverySize(AttachmentFixture& f) {
  for (size_t n : kSizes) {
    SCOPED_TRACE(absl::StrCat("attachment of ", n, " bytes"));
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(n, 7));
    EchoRequest req;
    req.set_text("hi");
    EchoResponse resp;
    ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
    EXPECT_EQ(resp.text(), absl::StrCat(n, ":hi"));
    // 0 bytes are not sent: the client sees no attachment, of 0 bytes.
    EXPECT_EQ(static_cast<bool>(ctx.response_attachment()), n > 0);
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), n, 7, /*plus_one=*/true), -1);
  }
}

TEST(Attachment, EveryByteArrivesBothWaysAtEverySize) {
  AttachmentFixture f;
  RoundTripEverySize(f);
}

TEST(Attachment, EveryByteArrivesBothWaysWithoutMemoryWindows) {
  FLAGS_rdmarpc_memory_windows = false;
  {
    AttachmentFixture f;
    RoundTripEverySize(f);
  }
  FLAGS_rdmarpc_memory_windows = true;
}

TEST(Attachment, ABouncedAttachmentIsNeverCopiedByTheRuntime) {
  AttachmentFixture f;
  constexpr size_t kBytes = 1 << 20;
  Buffer value = Pattern(kBytes, 3);
  EchoRequest req;
  req.set_text("k");
  for (int i = 0; i < 3; ++i) {  // the first call registers the Buffer
    ClientContext ctx;
    ctx.set_request_attachment(value);
    EchoResponse resp;
    const uint64_t copied_before = internal::GetTransportStats().payload_bytes_copied;
    ASSERT_TRUE(Call(f.channel.get(), kBounceMethod, &ctx, req, &resp).ok());
    const uint64_t copied = internal::GetTransportStats().payload_bytes_copied - copied_before;
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), kBytes, 3, false), -1);
    // Only the response message ("k" as field 1: 3 bytes) is copied, into
    // the send buffer; neither megabyte is.
    EXPECT_EQ(copied, resp.ByteSizeLong());
    EXPECT_EQ(resp.ByteSizeLong(), 3u);
  }
}

TEST(Attachment, LargeMessageAndLargeAttachmentBothArrive) {
  AttachmentFixture f;
  ClientContext ctx;
  ctx.set_request_attachment(Pattern(3 << 20, 11));
  EchoRequest req;
  req.set_text("big");
  req.mutable_data()->assign(200 * 1024, 'd');  // the message goes by rendezvous too
  EchoResponse resp;
  ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
  EXPECT_EQ(resp.text(), absl::StrCat(3 << 20, ":big"));
  EXPECT_EQ(resp.data(), req.data());
  EXPECT_EQ(FirstMismatch(ctx.response_attachment(), 3 << 20, 11, true), -1);
}

TEST(Attachment, TravelsWithMetadataSmallAndTooLargeForThePrefix) {
  AttachmentFixture f;
  for (size_t md_bytes : {size_t{10}, size_t{6000}}) {
    for (size_t n : {size_t{50}, size_t{100000}}) {
      SCOPED_TRACE(absl::StrCat(md_bytes, " bytes of metadata, attachment of ", n));
      ClientContext ctx;
      const std::string value(md_bytes, '\x01');
      ctx.AddMetadata("k-bin", value);
      ctx.set_request_attachment(Pattern(n, 5));
      EchoRequest req;
      req.set_text("m");
      EchoResponse resp;
      ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
      EXPECT_EQ(resp.text(), absl::StrCat(n, ":m"));
      EXPECT_EQ(FirstMismatch(ctx.response_attachment(), n, 5, true), -1);
      auto it = ctx.GetServerTrailingMetadata().find("k-bin");
      ASSERT_NE(it, ctx.GetServerTrailingMetadata().end());
      EXPECT_EQ(it->second, value);
    }
  }
}

TEST(Attachment, NoneSentNoneReceived) {
  AttachmentFixture f;
  ClientContext ctx;
  EchoRequest req;
  req.set_text("x");
  EchoResponse resp;
  // Transform always sets one, of the request's size: here 0 bytes, which
  // are not sent.
  ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
  EXPECT_FALSE(f.service.had_attachment.load());
  EXPECT_EQ(resp.text(), "0:x");
  EXPECT_FALSE(static_cast<bool>(ctx.response_attachment()));
  EXPECT_EQ(ctx.response_attachment().size(), 0u);
  // A 0-byte attachment beside a message too large for one SEND (pulled
  // by RDMA READ) is not sent either: nothing of 0 bytes is exposed.
  ClientContext large;
  large.set_request_attachment(Buffer::Allocate(0));
  EchoRequest big;
  big.set_text("y");
  big.set_data(std::string(100000, 'd'));
  ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &large, big, &resp).ok());
  EXPECT_FALSE(f.service.had_attachment.load());
  EXPECT_EQ(resp.text(), "0:y");
  EXPECT_EQ(resp.data(), big.data());
  EXPECT_FALSE(static_cast<bool>(large.response_attachment()));
  // Bounce of no attachment sends none back.
  ClientContext ctx2;
  ASSERT_TRUE(Call(f.channel.get(), kBounceMethod, &ctx2, req, &resp).ok());
  EXPECT_FALSE(static_cast<bool>(ctx2.response_attachment()));
}

TEST(Attachment, AMessagePulledAheadOfItsAttachmentIsReadWhole) {
  // Attach answers a large message with a 64 KiB attachment that the
  // client did not ask for: both are pulled by RDMA READ into one buffer,
  // the message first, and the message is parsed from that buffer while
  // the attachment holds it.
  AttachmentFixture f;
  for (int i = 0; i < 4; ++i) {
    ClientContext ctx;
    EchoRequest req;
    req.set_text("keep");
    req.set_data(std::string(200000, static_cast<char>('k' + i)));
    EchoResponse resp;
    absl::Status s = Call(f.channel.get(), kAttachMethod, &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.text(), "keep");
    EXPECT_EQ(resp.data(), req.data());
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), 65536, 9, false), -1);
  }
}

TEST(Attachment, ARetryingChannelSendsItWithEveryAttemptAndReturnsTheWinners) {
  ChannelOptions co;
  co.service_config_json =
      R"({"methodConfig": [{"name": [{"service": "rdmarpc.test.AttachmentService"}],
          "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.005s",
          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})";
  AttachmentFixture f(ServerOptions(), co);
  // Flaky fails each text's first attempt: the second carries the same
  // bytes and its answer's attachment reaches the caller.
  const std::vector<std::pair<size_t, std::string>> cases = {{100, "r"}, {1 << 20, "rr"}};
  for (const auto& [n, text] : cases) {
    SCOPED_TRACE(absl::StrCat("attachment of ", n, " bytes"));
    const int seed = static_cast<int>(text.size());
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(n, seed));
    EchoRequest req;
    req.set_text(text);
    EchoResponse resp;
    absl::Status s = Call(f.channel.get(), kFlakyMethod, &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.text(), absl::StrCat(n, ":", text));
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), n, seed, /*plus_one=*/true), -1);
    auto previous = ctx.GetServerTrailingMetadata().find("grpc-previous-rpc-attempts");
    ASSERT_NE(previous, ctx.GetServerTrailingMetadata().end());
    EXPECT_EQ(previous->second, "1");
  }
  absl::MutexLock lock(&f.service.kept_mu);
  // Two attempts per call, each with the whole attachment.
  EXPECT_EQ(f.service.flaky_attempts, (std::vector<int64_t>{-1, -1, -1, -1}));
}

TEST(Attachment, AttachmentsAServerKeepsLeaveItsLargeBufferPoolLimit) {
  // 24 values of 1 MiB kept by the handler, three times the server's 8 MiB
  // pool: each pulled attachment counts against the limit while its call
  // runs only, so every Put and a large call after them still succeed.
  ServerOptions so;
  so.large_buffer_pool_bytes = 8 << 20;
  AttachmentFixture f(so);
  for (int i = 0; i < 24; ++i) {
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(1 << 20, i));
    EchoRequest req;
    req.set_text("v");
    EchoResponse resp;
    absl::Status s = Call(f.channel.get(), kKeepMethod, &ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << "value " << i << ": " << s;
    EXPECT_EQ(resp.text(), absl::StrCat(i + 1, ":v"));
  }
  {
    absl::MutexLock lock(&f.service.kept_mu);
    ASSERT_EQ(f.service.kept.size(), 24u);
    for (int i = 0; i < 24; ++i) {
      EXPECT_EQ(FirstMismatch(f.service.kept[i], 1 << 20, i, false), -1) << "value " << i;
    }
  }
  ClientContext ctx;
  ctx.set_request_attachment(Pattern(3 << 20, 4));
  EchoRequest req;
  req.set_text("after");
  EchoResponse resp;
  ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
  EXPECT_EQ(FirstMismatch(ctx.response_attachment(), 3 << 20, 4, true), -1);
  // Dropped, the kept buffers go back to the pool (ASan and the pool's
  // exit check see none lost).
  absl::MutexLock lock(&f.service.kept_mu);
  f.service.kept.clear();
}

TEST(Attachment, ACallbackHandlerSendsOneBackFromAnotherThread) {
  CallbackAttachments service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (size_t n : {size_t{100}, size_t{1 << 20}}) {
    SCOPED_TRACE(absl::StrCat("attachment of ", n, " bytes"));
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(n, 6));
    EchoRequest req;
    req.set_text("cb");
    EchoResponse resp;
    ASSERT_TRUE(Call(ch->get(), kCallbackBounceMethod, &ctx, req, &resp).ok());
    EXPECT_EQ(resp.text(), "cb");
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), n, 6, /*plus_one=*/false), -1);
  }
}

TEST(Attachment, AnErrorStatusCarriesNoAttachment) {
  AttachmentFixture f;
  for (size_t n : {size_t{10}, size_t{1 << 20}}) {
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(n, 1));
    EchoRequest req;
    req.set_text("fail");
    EchoResponse resp;
    absl::Status s = Call(f.channel.get(), kTransformMethod, &ctx, req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_FALSE(static_cast<bool>(ctx.response_attachment()));
  }
}

TEST(Attachment, AReceivedBufferOutlivesItsChannelAndServer) {
  Buffer kept;
  {
    AttachmentFixture f;
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(2 << 20, 9));
    EchoRequest req;
    EchoResponse resp;
    ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
    kept = ctx.response_attachment();
  }
  EXPECT_EQ(FirstMismatch(kept, 2 << 20, 9, true), -1);
}

TEST(Attachment, AWrappedBufferIsReleasedOnceAfterItsCall) {
  AttachmentFixture f;
  constexpr size_t kBytes = 256 * 1024;
  std::vector<char> memory(kBytes);
  for (size_t i = 0; i < kBytes; ++i) memory[i] = static_cast<char>(PatternByte(i, 4));
  std::atomic<int> released{0};
  {
    ClientContext ctx;
    ctx.set_request_attachment(Buffer::Wrap(memory.data(), kBytes, [&] { released++; }));
    EchoRequest req;
    EchoResponse resp;
    ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ctx, req, &resp).ok());
    EXPECT_EQ(FirstMismatch(ctx.response_attachment(), kBytes, 4, true), -1);
    EXPECT_EQ(released.load(), 0);  // the context still holds it
  }
  // The channel keeps the registration until the region dies: that is
  // when the context let go, so the release ran by now.
  EXPECT_EQ(released.load(), 1);
}

TEST(Attachment, SliceSendsOnlyItsBytes) {
  AttachmentFixture f;
  Buffer whole = Pattern(100000, 2);
  ClientContext ctx;
  ctx.set_request_attachment(whole.Slice(1000, 50000));
  EchoRequest req;
  EchoResponse resp;
  ASSERT_TRUE(Call(f.channel.get(), kBounceMethod, &ctx, req, &resp).ok());
  const Buffer& got = ctx.response_attachment();
  ASSERT_EQ(got.size(), 50000u);
  EXPECT_EQ(got.view(), whole.view().substr(1000, 50000));
}

// After a refused call the connection carries on: 1 MiB (a limit's
// worth) goes through both ways, every byte checked.
void ExpectAnAttachmentOfOneMebibyteGoesThrough(AttachmentFixture& f, int seed) {
  ClientContext ok;
  ok.set_request_attachment(Pattern(1 << 20, seed));
  EchoRequest req;
  req.set_text("abc");
  EchoResponse resp;
  ASSERT_TRUE(Call(f.channel.get(), kTransformMethod, &ok, req, &resp).ok());
  EXPECT_EQ(resp.text(), absl::StrCat(1 << 20, ":abc"));
  EXPECT_EQ(FirstMismatch(ok.response_attachment(), 1 << 20, seed, true), -1);
}

TEST(Attachment, LargerThanMaxMessageBytesFailsResourceExhausted) {
  ChannelOptions co;
  co.max_message_bytes = 1 << 20;
  AttachmentFixture f(ServerOptions(), co);
  ClientContext ctx;
  ctx.set_request_attachment(Pattern((1 << 20) + 1, 0));
  EchoRequest req;
  EchoResponse resp;
  absl::Status s = Call(f.channel.get(), kTransformMethod, &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("1048577"), absl::string_view::npos) << s;
  ExpectAnAttachmentOfOneMebibyteGoesThrough(f, 0);
}

TEST(Attachment, TheServersLimitRefusesALargerOneWithResourceExhausted) {
  // The client would send 2 MiB; the server takes at most 1 MiB: it
  // refuses before pulling anything, naming both sizes and its limit.
  ServerOptions so;
  so.max_message_bytes = 1 << 20;
  AttachmentFixture f(so);
  ClientContext ctx;
  ctx.set_request_attachment(Pattern(2 << 20, 0));
  EchoRequest req;
  req.set_text("abc");
  EchoResponse resp;
  absl::Status s = Call(f.channel.get(), kTransformMethod, &ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(),
            "request of 5 bytes with an attachment of 2097152 bytes exceeds max_message_bytes "
            "1048576");
  EXPECT_FALSE(f.service.had_attachment.load());
  ExpectAnAttachmentOfOneMebibyteGoesThrough(f, 2);
}

TEST(Attachment, ManyCallsAtOnceKeepTheirOwnBytes) {
  AttachmentFixture f;
  constexpr int kCalls = 24;
  std::vector<std::unique_ptr<ClientContext>> ctxs;
  std::vector<EchoRequest> reqs(kCalls);
  std::vector<EchoResponse> resps(kCalls);
  std::vector<absl::Status> results(kCalls);
  absl::Mutex mu;
  int done = 0;
  for (int i = 0; i < kCalls; ++i) {
    ctxs.push_back(std::make_unique<ClientContext>());
    ctxs.back()->set_request_attachment(Pattern(i % 2 == 0 ? 300000 + i : 500 + i, i));
    reqs[i].set_text(absl::StrCat(i));
    internal::AsyncUnaryCall(f.channel.get(), kTransformMethod, ctxs.back().get(), reqs[i],
                             &resps[i], [&, i](absl::Status s) {
                               absl::MutexLock lock(&mu);
                               results[i] = std::move(s);
                               ++done;
                             });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](int* d) { return *d == kCalls; }, &done));
  }
  for (int i = 0; i < kCalls; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(results[i].ok()) << results[i];
    const size_t n = i % 2 == 0 ? 300000 + i : 500 + i;
    EXPECT_EQ(resps[i].text(), absl::StrCat(n, ":", i));
    EXPECT_EQ(FirstMismatch(ctxs[i]->response_attachment(), n, i, true), -1);
  }
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
