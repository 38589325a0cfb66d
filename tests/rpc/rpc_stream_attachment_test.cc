// rpc_stream_attachment_test: rdmarpc::Buffer attachments on stream
// messages, end to end over softrdma: every byte of every message, in
// order, inline and pulled by RDMA READ, on client-, server- and
// bidirectional-streaming calls, blocking and with reactors; a
// server-streaming call's request attachment; what the runtime copies;
// and the errors.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/transport/transport_stats.h"
#include "tests/rpc/attachment_pattern.h"
#include "tests/rpc/raw_peer.h"
#include "tests/rpc/rpc_fixture.h"

DECLARE_bool(rdmarpc_memory_windows);

namespace rdmarpc {
namespace test {
namespace {

constexpr char kCollectMethod[] = "/rdmarpc.test.StreamAttachments/Collect";
constexpr char kFanMethod[] = "/rdmarpc.test.StreamAttachments/Fan";
constexpr char kChatMethod[] = "/rdmarpc.test.StreamAttachments/Chat";
constexpr char kReactorChatMethod[] = "/rdmarpc.test.StreamAttachments/ReactorChat";
constexpr char kStoreMethod[] = "/rdmarpc.test.StreamAttachments/Store";
constexpr char kReactorCollectMethod[] = "/rdmarpc.test.StreamAttachments/ReactorCollect";

// "none" without an attachment, "ok/<size>" when `b` is Pattern(size,
// seed), else "bad@<first differing index>/<size>".
std::string Describe(const Buffer& b, int seed) {
  if (!b) return "none";
  for (size_t i = 0; i < b.size(); ++i) {
    if (static_cast<uint8_t>(b.data()[i]) != PatternByte(i, seed)) {
      return absl::StrCat("bad@", i, "/", b.size());
    }
  }
  return absl::StrCat("ok/", b.size());
}
std::string Expected(size_t n) { return n == 0 ? "none" : absl::StrCat("ok/", n); }

// Sizes either side of the eager limit (8 KiB: inline below, pulled
// above), a piece boundary (64 KiB) and the bulk pieces (4 MiB).
const std::vector<size_t> kSizes = {0, 1, 100, 8000, 8192, 9000, 65536 + 3, 1 << 20,
                                    (5 << 20) + 5};

// Collect (client streaming): message i's text is its seed; answers with
// Describe of each message's attachment, joined by ",", and a response
// attachment of Pattern(1000 bytes per message, 77).
// Fan (server streaming): the request's text lists sizes; message i
// carries Pattern(size i, i) and text = i. Answers first with a message
// whose text describes the request's own attachment (seed 5); with text
// "hold" it then waits until the call is cancelled ("hold with headers":
// with initial metadata before that message).
// Chat (bidirectional, blocking) and ReactorChat (a reactor): each message
// goes back with the attachment it came with, the same Buffer.
// Store (client streaming): keeps every attachment (as a store keeps
// values) and answers with how many it holds.
// ReactorCollect (client streaming, a reactor): as Collect.
class StreamAttachments final : public Service {
 public:
  StreamAttachments() : Service("rdmarpc.test.StreamAttachments") {
    AddMethod(std::make_unique<internal::ClientStreamingMethodHandler<StreamAttachments,
                                                                      EchoRequest, EchoResponse>>(
        kCollectMethod, this, &StreamAttachments::Collect));
    AddMethod(std::make_unique<internal::ServerStreamingMethodHandler<StreamAttachments,
                                                                      EchoRequest, EchoResponse>>(
        kFanMethod, this, &StreamAttachments::Fan));
    AddMethod(std::make_unique<
              internal::BidiStreamingMethodHandler<StreamAttachments, EchoRequest, EchoResponse>>(
        kChatMethod, this, &StreamAttachments::Chat));
    AddMethod(std::make_unique<internal::ClientStreamingMethodHandler<StreamAttachments,
                                                                      EchoRequest, EchoResponse>>(
        kStoreMethod, this, &StreamAttachments::Store));
    AddMethod(std::make_unique<internal::CallbackClientStreamingMethodHandler<
                  StreamAttachments, EchoRequest, EchoResponse>>(
        kReactorCollectMethod, this, &StreamAttachments::ReactorCollect));
    AddMethod(std::make_unique<internal::CallbackBidiStreamingMethodHandler<
                  StreamAttachments, EchoRequest, EchoResponse>>(
        kReactorChatMethod, this, &StreamAttachments::ReactorChat));
  }

  absl::Status Collect(ServerContext* ctx, ServerReader<EchoRequest>* reader,
                       EchoResponse* resp) {
    std::vector<std::string> seen;
    EchoRequest req;
    Buffer attachment = Pattern(10, 0);  // Read must empty it when none came
    while (reader->Read(&req, &attachment)) {
      int seed = 0;
      if (!absl::SimpleAtoi(req.text(), &seed)) return absl::InvalidArgumentError(req.text());
      seen.push_back(Describe(attachment, seed));
    }
    resp->set_text(absl::StrJoin(seen, ","));
    // The response's own attachment: as many bytes as messages came.
    ctx->set_response_attachment(Pattern(seen.size() * 1000, 77));
    return absl::OkStatus();
  }

  absl::Status Store(ServerContext* /*ctx*/, ServerReader<EchoRequest>* reader,
                     EchoResponse* resp) {
    EchoRequest req;
    Buffer attachment;
    while (reader->Read(&req, &attachment)) {
      absl::MutexLock lock(&kept_mu);
      kept.push_back(std::move(attachment));
    }
    absl::MutexLock lock(&kept_mu);
    resp->set_text(absl::StrCat(kept.size()));
    return absl::OkStatus();
  }

  absl::Status Fan(ServerContext* ctx, const EchoRequest& req, ServerWriter<EchoResponse>* w) {
    EchoResponse resp;
    resp.set_text(Describe(ctx->request_attachment(), 5));
    if (req.text() == "hold with headers") ctx->AddInitialMetadata("k", "v");
    if (!w->Write(resp)) return absl::CancelledError("first write");
    if (absl::StartsWith(req.text(), "hold")) {  // until the client cancels
      while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(1));
      return absl::CancelledError("held until cancelled");
    }
    int i = 0;
    for (absl::string_view part : absl::StrSplit(req.text(), ',', absl::SkipEmpty())) {
      size_t n = 0;
      if (!absl::SimpleAtoi(part, &n)) return absl::InvalidArgumentError(part);
      resp.set_text(absl::StrCat(i));
      if (!w->Write(resp, Pattern(n, i))) return absl::CancelledError("write");
      ++i;
    }
    return absl::OkStatus();
  }

  absl::Status Chat(ServerContext* /*ctx*/,
                    ServerReaderWriter<EchoResponse, EchoRequest>* stream) {
    EchoRequest req;
    Buffer attachment;
    while (stream->Read(&req, &attachment)) {
      EchoResponse resp;
      resp.set_text(req.text());
      resp.set_data(req.data());
      if (!stream->Write(resp, attachment)) break;
    }
    return absl::OkStatus();
  }

  class ChatReactor final : public ServerBidiReactor<EchoRequest, EchoResponse> {
   public:
    ChatReactor() { StartRead(&req_, &in_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(absl::OkStatus());
        return;
      }
      resp_.set_text(req_.text());
      StartWrite(&resp_, in_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(absl::CancelledError("write"));
        return;
      }
      StartRead(&req_, &in_);
    }
    void OnDone() override { delete this; }

   private:
    EchoRequest req_;
    EchoResponse resp_;
    Buffer in_;
  };
  ServerBidiReactor<EchoRequest, EchoResponse>* ReactorChat(CallbackServerContext* /*ctx*/) {
    return new ChatReactor();
  }

  class CollectReactor final : public ServerReadReactor<EchoRequest> {
   public:
    CollectReactor(CallbackServerContext* ctx, EchoResponse* resp) : ctx_(ctx), resp_(resp) {
      StartRead(&req_, &in_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        resp_->set_text(absl::StrJoin(seen_, ","));
        ctx_->set_response_attachment(Pattern(seen_.size() * 1000, 77));
        Finish(absl::OkStatus());
        return;
      }
      int seed = 0;
      if (!absl::SimpleAtoi(req_.text(), &seed)) seed = -1;
      seen_.push_back(Describe(in_, seed));
      StartRead(&req_, &in_);
    }
    void OnDone() override { delete this; }

   private:
    CallbackServerContext* const ctx_;
    EchoResponse* const resp_;
    EchoRequest req_;
    Buffer in_;
    std::vector<std::string> seen_;
  };
  ServerReadReactor<EchoRequest>* ReactorCollect(CallbackServerContext* ctx, EchoResponse* resp) {
    return new CollectReactor(ctx, resp);
  }

  absl::Mutex kept_mu;
  std::vector<Buffer> kept ABSL_GUARDED_BY(kept_mu);
};

using Fixture = ServiceFixture<StreamAttachments>;

// One message to Chat and back: `data_bytes` of its own and an attachment
// of Pattern(n, seed); every byte checked.
void ExpectChatRoundTrip(Channel* channel, size_t n, int seed, size_t data_bytes = 0) {
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> stream(channel, kChatMethod, &ctx);
  EchoRequest req;
  req.set_text(absl::StrCat(seed));
  req.mutable_data()->assign(data_bytes, 'd');
  ASSERT_TRUE(stream.Write(req, Pattern(n, seed)));
  EchoResponse resp;
  Buffer back;
  ASSERT_TRUE(stream.Read(&resp, &back));
  EXPECT_EQ(resp.text(), req.text());
  EXPECT_EQ(resp.data(), req.data());
  EXPECT_EQ(Describe(back, seed), Expected(n));
  ASSERT_TRUE(stream.WritesDone());
  EXPECT_TRUE(stream.Finish().ok());
}

TEST(StreamAttachment, ClientStreamingDeliversEveryByteOfEveryMessageInOrder) {
  Fixture f;
  ClientContext ctx;
  EchoResponse resp;
  ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
  std::vector<std::string> want;
  int seed = 0;
  // Twice the sizes: more messages than the stream's window, large pulls
  // among small frames of the same stream.
  for (int round = 0; round < 2; ++round) {
    for (size_t n : kSizes) {
      EchoRequest req;
      req.set_text(absl::StrCat(seed));
      ASSERT_TRUE(writer.Write(req, Pattern(n, seed))) << n;
      want.push_back(Expected(n));
      ++seed;
      req.set_text(absl::StrCat(seed));  // a message without one between
      ASSERT_TRUE(writer.Write(req));
      want.push_back("none");
      ++seed;
    }
  }
  absl::Status s = writer.Finish();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), absl::StrJoin(want, ","));
  // The response carries the handler's response attachment.
  EXPECT_EQ(Describe(ctx.response_attachment(), 77), Expected(want.size() * 1000));
}

TEST(StreamAttachment, ServerStreamingCarriesTheRequestsAndEveryMessagesAttachment) {
  Fixture f;
  for (size_t request_bytes : {size_t{0}, size_t{300}, size_t{3 << 20}}) {
    SCOPED_TRACE(absl::StrCat("request attachment of ", request_bytes, " bytes"));
    ClientContext ctx;
    ctx.set_request_attachment(Pattern(request_bytes, 5));
    EchoRequest req;
    req.set_text(absl::StrJoin(kSizes, ","));
    ClientReader<EchoResponse> reader(f.channel.get(), kFanMethod, &ctx, req);
    EchoResponse resp;
    Buffer attachment = Pattern(10, 0);
    ASSERT_TRUE(reader.Read(&resp, &attachment));
    EXPECT_EQ(resp.text(), Expected(request_bytes));
    EXPECT_FALSE(attachment);  // that message came without one
    std::vector<std::string> got;
    while (reader.Read(&resp, &attachment)) {
      int seed = 0;
      ASSERT_TRUE(absl::SimpleAtoi(resp.text(), &seed)) << resp.text();
      EXPECT_EQ(seed, static_cast<int>(got.size()));
      got.push_back(Describe(attachment, seed));
    }
    absl::Status s = reader.Finish();
    ASSERT_TRUE(s.ok()) << s;
    std::vector<std::string> want;
    for (size_t n : kSizes) want.push_back(Expected(n));
    EXPECT_EQ(got, want);
  }
}

TEST(StreamAttachment, AServerStreamingRequestsAttachmentIsLetGoOnceTheServerAnswers) {
  // The server pulled the request's attachment (and a large request with
  // it) before its handler ran: once a frame of the stream arrived (its
  // initial metadata, or a message), the client's runtime no longer holds
  // the Buffer, though the stream goes on. With memory windows and with a
  // registration of its own.
  for (bool windows : {true, false}) {
    for (bool headers_first : {false, true}) {
      SCOPED_TRACE(absl::StrCat(windows ? "windows" : "no windows",
                                headers_first ? ", initial metadata first" : ""));
      FLAGS_rdmarpc_memory_windows = windows;
      Fixture f;
      constexpr size_t kBytes = 300 * 1024;
      std::atomic<int> released{0};
      auto bytes = std::make_shared<std::string>(kBytes, '\0');
      for (size_t i = 0; i < kBytes; ++i) (*bytes)[i] = static_cast<char>(PatternByte(i, 5));
      ClientContext ctx;
      ctx.set_request_attachment(
          Buffer::Wrap(bytes->data(), kBytes, [bytes, &released] { released.fetch_add(1); }));
      EchoRequest req;
      req.set_text(headers_first ? "hold with headers" : "hold");
      if (headers_first) req.mutable_data()->assign(200 * 1024, 'r');  // pulled too
      ClientReader<EchoResponse> reader(f.channel.get(), kFanMethod, &ctx, req);
      EchoResponse resp;
      ASSERT_TRUE(reader.Read(&resp));
      EXPECT_EQ(resp.text(), Expected(kBytes));
      EXPECT_EQ(ctx.GetServerInitialMetadata().size(), headers_first ? 1u : 0u);
      // The request went out before that message came (the same loop
      // thread sent it): the context's copy is the last one outside the
      // runtime.
      ctx.set_request_attachment(Buffer());
      for (int i = 0; i < 1000 && released.load() == 0; ++i) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      EXPECT_EQ(released.load(), 1);
      ctx.TryCancel();
      EXPECT_FALSE(reader.Read(&resp));
      EXPECT_EQ(reader.Finish().code(), absl::StatusCode::kCancelled);
      EXPECT_EQ(released.load(), 1);
    }
  }
  FLAGS_rdmarpc_memory_windows = true;
}

// Writes every size from one thread while this one reads the echoes.
void ChatEverySize(Channel* channel, const char* method) {
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> stream(channel, method, &ctx);
  std::thread writer([&] {
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const int seed = round * 100 + static_cast<int>(i);
        EchoRequest req;
        req.set_text(absl::StrCat(seed));
        if (!stream.Write(req, Pattern(kSizes[i], seed))) return;
      }
    }
    stream.WritesDone();
  });
  int read = 0;
  EchoResponse resp;
  Buffer attachment;
  while (stream.Read(&resp, &attachment)) {
    const int round = read / static_cast<int>(kSizes.size());
    const size_t i = static_cast<size_t>(read) % kSizes.size();
    const int seed = round * 100 + static_cast<int>(i);
    EXPECT_EQ(resp.text(), absl::StrCat(seed));
    EXPECT_EQ(Describe(attachment, seed), Expected(kSizes[i])) << "message " << read;
    ++read;
  }
  writer.join();
  absl::Status s = stream.Finish();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(read, 3 * static_cast<int>(kSizes.size()));
}

TEST(StreamAttachment, BidiStreamingBouncesEveryByteBothWays) {
  Fixture f;
  ChatEverySize(f.channel.get(), kChatMethod);
}

TEST(StreamAttachment, AServerReactorReadsAndWritesThem) {
  Fixture f;
  ChatEverySize(f.channel.get(), kReactorChatMethod);
}

TEST(StreamAttachment, ABouncedAttachmentIsNeverCopiedByTheRuntime) {
  Fixture f;
  constexpr size_t kBytes = 1 << 20;
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
  Buffer value = Pattern(kBytes, 3);
  EchoRequest req;
  req.set_text("k");
  for (int i = 0; i < 3; ++i) {  // the first message registers the Buffer
    const uint64_t copied_before = internal::GetTransportStats().payload_bytes_copied;
    ASSERT_TRUE(stream.Write(req, value));
    EchoResponse resp;
    Buffer back;
    ASSERT_TRUE(stream.Read(&resp, &back));
    const uint64_t copied = internal::GetTransportStats().payload_bytes_copied - copied_before;
    EXPECT_EQ(Describe(back, 3), Expected(kBytes));
    // Only the two messages ("k" as field 1: 3 bytes each) are copied, into
    // send buffers; neither megabyte is.
    EXPECT_EQ(copied, 2 * req.ByteSizeLong());
    EXPECT_EQ(req.ByteSizeLong(), 3u);
  }
  ASSERT_TRUE(stream.WritesDone());
  EXPECT_TRUE(stream.Finish().ok());
}

TEST(StreamAttachment, ALargeMessageAndItsAttachmentBothArrive) {
  Fixture f;
  ExpectChatRoundTrip(f.channel.get(), 2 << 20, 8, 300 * 1024);
}

// What both client reactors below share: they write messages 0..n-1,
// message i with Pattern(SizeOf(i), i), then half-close, and record the
// call's end. `Reactor` is ClientBidiReactor or ClientWriteReactor.
template <class Reactor>
class PatternWriter : public Reactor {
 public:
  void OnWriteDone(bool ok) override {
    if (ok) NextWrite();
  }
  void OnDone(const absl::Status& s) override {
    status = s;
    done.Notify();
  }
  static size_t SizeOf(int i) { return kSizes[static_cast<size_t>(i) % kSizes.size()]; }

  absl::Status status;
  absl::Notification done;

 protected:
  explicit PatternWriter(int n) : n_(n) {}
  void NextWrite() {
    if (written_ == n_) {
      this->StartWritesDone();
      return;
    }
    req_.set_text(absl::StrCat(written_));
    out_ = Pattern(SizeOf(written_), written_);
    ++written_;
    this->StartWrite(&req_, out_);
  }

 private:
  const int n_;
  int written_ = 0;
  EchoRequest req_;
  Buffer out_;
};

// Chats n messages and describes what comes back.
class ChatReactorClient final
    : public PatternWriter<ClientBidiReactor<EchoRequest, EchoResponse>> {
 public:
  ChatReactorClient(Channel* ch, ClientContext* ctx, int n) : PatternWriter(n) {
    internal::ClientCallbackStream::Bind(this, ch, kChatMethod, ctx,
                                         internal::RpcKind::kBidiStreaming, nullptr, nullptr);
    StartRead(&resp_, &in_);
    NextWrite();
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const int i = static_cast<int>(got.size());
    got.push_back(resp_.text() == absl::StrCat(i) ? Describe(in_, i) : "out of order");
    StartRead(&resp_, &in_);
  }

  std::vector<std::string> got;  // the reactions run one at a time

 private:
  EchoResponse resp_;
  Buffer in_;
};

TEST(StreamAttachment, AClientReactorWritesAndReadsThem) {
  Fixture f;
  ClientContext ctx;
  constexpr int kMessages = 2 * 9;
  ChatReactorClient client(f.channel.get(), &ctx, kMessages);
  ASSERT_TRUE(client.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(client.status.ok()) << client.status;
  std::vector<std::string> want;
  for (int i = 0; i < kMessages; ++i) want.push_back(Expected(ChatReactorClient::SizeOf(i)));
  EXPECT_EQ(client.got, want);
}

// Uploads n messages to `method` and waits for the server's response.
class UploadReactorClient final : public PatternWriter<ClientWriteReactor<EchoRequest>> {
 public:
  UploadReactorClient(Channel* ch, ClientContext* ctx, const char* method, int n)
      : PatternWriter(n) {
    internal::ClientCallbackStream::Bind(this, ch, method, ctx,
                                         internal::RpcKind::kClientStreaming, nullptr, &resp);
    NextWrite();
    StartCall();
  }
  EchoResponse resp;
};

TEST(StreamAttachment, ClientStreamingReactorsCarryTheResponsesAttachment) {
  Fixture f;
  const int n = static_cast<int>(kSizes.size());
  std::vector<std::string> want;
  for (size_t size : kSizes) want.push_back(Expected(size));
  // A client reactor against a blocking handler, a blocking client against
  // a server reactor, and reactors on both sides.
  struct Case {
    const char* method;
    bool client_reactor;
  };
  for (const Case& c : {Case{kCollectMethod, true}, Case{kReactorCollectMethod, false},
                        Case{kReactorCollectMethod, true}}) {
    SCOPED_TRACE(absl::StrCat(c.method, c.client_reactor ? " from a reactor" : ""));
    ClientContext ctx;
    EchoResponse resp;
    if (c.client_reactor) {
      UploadReactorClient client(f.channel.get(), &ctx, c.method, n);
      ASSERT_TRUE(client.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
      ASSERT_TRUE(client.status.ok()) << client.status;
      resp = client.resp;
    } else {
      ClientWriter<EchoRequest> writer(f.channel.get(), c.method, &ctx, &resp);
      for (int i = 0; i < n; ++i) {
        EchoRequest req;
        req.set_text(absl::StrCat(i));
        ASSERT_TRUE(writer.Write(req, Pattern(kSizes[static_cast<size_t>(i)], i)));
      }
      absl::Status s = writer.Finish();
      ASSERT_TRUE(s.ok()) << s;
    }
    EXPECT_EQ(resp.text(), absl::StrJoin(want, ","));
    EXPECT_EQ(Describe(ctx.response_attachment(), 77), Expected(want.size() * 1000));
  }
}

TEST(StreamAttachment, LargerThanTheChannelsMaxMessageBytesEndsTheCall) {
  ChannelOptions co;
  co.max_message_bytes = 1 << 20;
  Fixture f(ServerOptions(), co);
  ClientContext ctx;
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
  EchoRequest req;
  req.set_text("x");
  EXPECT_FALSE(stream.Write(req, Pattern((1 << 20) + 1, 0)));  // checked at once
  EchoResponse resp;
  EXPECT_FALSE(stream.Read(&resp));
  absl::Status s = stream.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(), absl::StrCat("stream message attachment of ", (1 << 20) + 1,
                                      " bytes exceeds max_message_bytes ", 1 << 20));
  // The channel carries on.
  ExpectChatRoundTrip(f.channel.get(), 1 << 20, 2);
}

TEST(StreamAttachment, TheServersSmallerLimitEndsOnlyThatStream) {
  ServerOptions so;
  so.max_message_bytes = 1 << 20;
  Fixture f(so);
  ClientContext ctx;
  EchoResponse resp;
  ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
  EchoRequest req;
  req.set_text("0");
  ASSERT_TRUE(writer.Write(req, Pattern(2 << 20, 0)));
  absl::Status s = writer.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(absl::StrCat("stream message of 3 bytes with an attachment of ",
                                          2 << 20, " bytes from ")),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find(absl::StrCat("exceeds max_message_bytes ", 1 << 20)),
            absl::string_view::npos)
      << s;
  // The connection carries on: a stream within the limit on the same channel.
  ExpectChatRoundTrip(f.channel.get(), 1 << 20, 4);
}

TEST(StreamAttachment, AClientStreamingCallsOpeningRequestTakesNone) {
  Fixture f;
  ClientContext ctx;
  ctx.set_request_attachment(Pattern(100, 1));
  EchoResponse resp;
  ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
  absl::Status s = writer.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("carry attachments on their messages"), absl::string_view::npos)
      << s;
}

TEST(StreamAttachment, ACancelledStreamLetsGoOfItsAttachmentExactlyOnce) {
  Fixture f;
  for (size_t n : {size_t{100}, size_t{4 << 20}, size_t{16 << 20}}) {
    SCOPED_TRACE(absl::StrCat("attachment of ", n, " bytes"));
    std::atomic<int> released{0};
    auto bytes = std::make_shared<std::string>(n, 'c');
    {
      ClientContext ctx;
      ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
      EchoRequest req;
      req.set_text("0");
      ASSERT_TRUE(stream.Write(req, Buffer::Wrap(bytes->data(), n, [bytes, &released] {
        released.fetch_add(1);
      })));
      ctx.TryCancel();  // while the server may be pulling it
      EchoResponse resp;
      while (stream.Read(&resp)) {
      }
      EXPECT_EQ(stream.Finish().code(), absl::StatusCode::kCancelled);
    }
    // The runtime kept the bytes until the server was done with them, and
    // then let go of them exactly once.
    for (int i = 0; i < 1000 && released.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ(released.load(), 1);
  }
  // The connection carries on.
  ExpectChatRoundTrip(f.channel.get(), 1 << 20, 6);
}

TEST(StreamAttachment, AttachmentsAHandlerKeepsLeaveTheServersPoolLimitWhenItsCallEnds) {
  // 24 values of 1 MiB kept by the handler, three times the server's 8 MiB
  // pool, four per stream: each counts against the limit while its call
  // runs only, so every stream and a large echo after them succeed.
  ServerOptions so;
  so.large_buffer_pool_bytes = 8 << 20;
  Fixture f(so);
  int seed = 0;
  for (int call = 0; call < 6; ++call) {
    ClientContext ctx;
    EchoResponse resp;
    ClientWriter<EchoRequest> writer(f.channel.get(), kStoreMethod, &ctx, &resp);
    EchoRequest req;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(writer.Write(req, Pattern(1 << 20, seed++)));
    absl::Status s = writer.Finish();
    ASSERT_TRUE(s.ok()) << "stream " << call << ": " << s;
    EXPECT_EQ(resp.text(), absl::StrCat(4 * (call + 1)));
  }
  {
    absl::MutexLock lock(&f.service.kept_mu);
    ASSERT_EQ(f.service.kept.size(), 24u);
    for (int i = 0; i < 24; ++i) {
      EXPECT_EQ(Describe(f.service.kept[i], i), Expected(1 << 20)) << "value " << i;
    }
  }
  ExpectChatRoundTrip(f.channel.get(), 3 << 20, 7);
  // Dropped, the kept buffers go back to the pool (ASan and the pool's
  // exit check see none lost).
  absl::MutexLock lock(&f.service.kept_mu);
  f.service.kept.clear();
}

TEST(StreamAttachment, AFullServerPoolEndsOnlyThatStream) {
  // The handler keeps values within one call: its 8 MiB pool runs out and
  // that stream ends RESOURCE_EXHAUSTED; the connection carries on.
  ServerOptions so;
  so.large_buffer_pool_bytes = 8 << 20;
  Fixture f(so);
  ClientContext ctx;
  EchoResponse resp;
  ClientWriter<EchoRequest> writer(f.channel.get(), kStoreMethod, &ctx, &resp);
  EchoRequest req;
  for (int i = 0; i < 16; ++i) {
    if (!writer.Write(req, Pattern(1 << 20, i))) break;
  }
  absl::Status s = writer.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("no registered buffer to pull a stream message"),
            absl::string_view::npos)
      << s;
  {
    absl::MutexLock lock(&f.service.kept_mu);
    f.service.kept.clear();
  }
  ExpectChatRoundTrip(f.channel.get(), 1 << 20, 9);
}

TEST(StreamAttachment, AServerWithoutStreamAttachmentsFailsTheCallFailedPrecondition) {
  // A server of an rdmarpc that takes attachments on unary calls only.
  RawPeer server;
  int port = 0;
  ASSERT_TRUE(server.Listen(&port));
  ChannelOptions co;
  co.pool_size = 1;  // both calls on the one connection the peer accepts
  auto channel = CreateChannel(absl::StrCat("127.0.0.1:", port), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  absl::Status bidi;
  absl::Status server_streaming;
  std::thread client([&] {
    ClientContext ctx;
    ctx.set_deadline(absl::Now() + absl::Seconds(20));
    ClientReaderWriter<EchoRequest, EchoResponse> stream(channel->get(), kChatMethod, &ctx);
    EchoRequest req;
    req.set_text("x");
    stream.Write(req, Pattern(100, 1));  // fails on the channel's loop
    bidi = stream.Finish();
    ClientContext ctx2;
    ctx2.set_deadline(absl::Now() + absl::Seconds(20));
    ctx2.set_request_attachment(Pattern(100, 2));
    ClientReader<EchoResponse> reader(channel->get(), kFanMethod, &ctx2, req);
    server_streaming = reader.Finish();
  });
  ASSERT_TRUE(server.Accept(absl::Seconds(10),
                            internal::kFeatureDrain | internal::kFeatureAttachment));
  client.join();
  EXPECT_EQ(bidi.code(), absl::StatusCode::kFailedPrecondition) << bidi;
  EXPECT_NE(bidi.message().find("stream message attachment of 100 bytes: server "),
            absl::string_view::npos)
      << bidi;
  EXPECT_NE(bidi.message().find("does not take attachments on streams"), absl::string_view::npos)
      << bidi;
  EXPECT_EQ(server_streaming.code(), absl::StatusCode::kFailedPrecondition) << server_streaming;
  EXPECT_NE(server_streaming.message().find("does not take attachments on streams"),
            absl::string_view::npos)
      << server_streaming;
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
