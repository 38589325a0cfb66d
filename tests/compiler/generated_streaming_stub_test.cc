// The client side of generated streaming code (golden/streaming.proto), over
// a fake of the runtime's stream (fake_stream_call.h): each Stub method opens
// a stream of its kind to its wire name, sends the request with the opening
// frame only for server streaming, applies the default deadline from
// rdmarpc/options.proto only when the caller set none, and hands out a
// reader or writer whose calls reach that stream.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fake_stream_call.h"
#include "golden/streaming.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::route::Feature;
using ::golden::route::Point;
using ::golden::route::Rectangle;
using ::golden::route::Relay;
using ::golden::route::RouteGuide;
using ::golden::route::RouteNote;
using ::golden::route::RouteSummary;
using ::rdmarpc::internal::RpcKind;

// Stubs only pass the channel through; the fake never dereferences it.
std::shared_ptr<rdmarpc::Channel> NoChannel() { return nullptr; }

Point MakePoint(int latitude, int longitude) {
  Point point;
  point.set_latitude(latitude);
  point.set_longitude(longitude);
  return point;
}

Feature MakeFeature(const std::string& name) {
  Feature feature;
  feature.set_name(name);
  return feature;
}

RouteNote MakeNote(const std::string& message) {
  RouteNote note;
  note.set_message(message);
  return note;
}

TEST(GeneratedStreamingStub, ServerStreamingSendsRequestAndReadsResponses) {
  fake_stream::Reset({MakeFeature("a").SerializeAsString(), MakeFeature("b").SerializeAsString()},
                     absl::OkStatus());
  std::unique_ptr<RouteGuide::Stub> stub = RouteGuide::NewStub(NoChannel());
  rdmarpc::ClientContext context;
  Rectangle rect;
  *rect.mutable_lo() = MakePoint(1, 2);
  *rect.mutable_hi() = MakePoint(3, 4);
  const absl::Time before = absl::Now();
  std::unique_ptr<rdmarpc::ClientReaderInterface<Feature>> reader =
      stub->ListFeatures(&context, rect);
  const absl::Time after = absl::Now();
  ASSERT_NE(reader, nullptr);

  const fake_stream::RecordedStream& stream = fake_stream::LastStream();
  EXPECT_EQ(stream.opened, 1);
  EXPECT_EQ(stream.channel, nullptr);
  EXPECT_EQ(stream.method, "/golden.route.RouteGuide/ListFeatures");
  EXPECT_EQ(stream.kind, RpcKind::kServerStreaming);
  EXPECT_TRUE(stream.has_first);
  EXPECT_EQ(stream.first, rect.SerializeAsString());
  // (rdmarpc.method).default_timeout_ms = 500 on ListFeatures.
  EXPECT_GE(stream.deadline, before + absl::Milliseconds(500));
  EXPECT_LE(stream.deadline, after + absl::Milliseconds(500));
  EXPECT_EQ(context.deadline(), stream.deadline);

  Feature feature;
  ASSERT_TRUE(reader->Read(&feature));
  EXPECT_EQ(feature.name(), "a");
  ASSERT_TRUE(reader->Read(&feature));
  EXPECT_EQ(feature.name(), "b");
  EXPECT_FALSE(reader->Read(&feature));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(stream.reads, 2);
  EXPECT_EQ(stream.finishes, 1);
  reader.reset();
  EXPECT_FALSE(stream.destroyed_unfinished);
}

TEST(GeneratedStreamingStub, CallerDeadlineWinsOverStreamingDefault) {
  fake_stream::Reset({}, absl::OkStatus());
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  const absl::Time deadline = absl::FromUnixSeconds(4102444800);  // 2100-01-01
  context.set_deadline(deadline);
  auto reader = stub.ListFeatures(&context, Rectangle());
  EXPECT_EQ(fake_stream::LastStream().deadline, deadline);
  EXPECT_EQ(context.deadline(), deadline);
}

TEST(GeneratedStreamingStub, ServerStreamingFinishReturnsTheStreamsStatus) {
  fake_stream::Reset({}, absl::DeadlineExceededError("fake: too late"));
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  auto reader = stub.ListFeatures(&context, Rectangle());
  Feature feature;
  EXPECT_FALSE(reader->Read(&feature));
  EXPECT_EQ(reader->Finish(), absl::DeadlineExceededError("fake: too late"));
}

TEST(GeneratedStreamingStub, ClientStreamingWritesRequestsAndFinishFillsResponse) {
  RouteSummary answer;
  answer.set_point_count(2);
  answer.set_distance(77);
  fake_stream::Reset({answer.SerializeAsString()}, absl::OkStatus());
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  RouteSummary summary;
  std::unique_ptr<rdmarpc::ClientWriterInterface<Point>> writer =
      stub.RecordRoute(&context, &summary);
  ASSERT_NE(writer, nullptr);

  const fake_stream::RecordedStream& stream = fake_stream::LastStream();
  EXPECT_EQ(stream.method, "/golden.route.RouteGuide/RecordRoute");
  EXPECT_EQ(stream.kind, RpcKind::kClientStreaming);
  EXPECT_FALSE(stream.has_first);
  // RouteGuide and RecordRoute set no default deadline.
  EXPECT_EQ(stream.deadline, absl::InfiniteFuture());

  EXPECT_TRUE(writer->Write(MakePoint(1, 1)));
  EXPECT_TRUE(writer->Write(MakePoint(2, 2)));
  EXPECT_EQ(stream.written, (std::vector<std::string>{MakePoint(1, 1).SerializeAsString(),
                                                      MakePoint(2, 2).SerializeAsString()}));
  EXPECT_TRUE(summary.SerializeAsString().empty());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(stream.writes_done, 1);
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_EQ(summary.point_count(), 2);
  EXPECT_EQ(summary.distance(), 77);
}

TEST(GeneratedStreamingStub, ClientStreamingFinishPassesTheErrorThrough) {
  fake_stream::Reset({}, absl::ResourceExhaustedError("fake: full"));
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  RouteSummary summary;
  auto writer = stub.RecordRoute(&context, &summary);
  EXPECT_TRUE(writer->WritesDone());
  EXPECT_FALSE(writer->Write(MakePoint(1, 1)));
  EXPECT_EQ(writer->Finish(), absl::ResourceExhaustedError("fake: full"));
  EXPECT_TRUE(fake_stream::LastStream().written.empty());
}

TEST(GeneratedStreamingStub, BidiStreamingWritesAndReads) {
  fake_stream::Reset({MakeNote("from server").SerializeAsString()}, absl::AbortedError("done"));
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  std::unique_ptr<rdmarpc::ClientReaderWriterInterface<RouteNote, RouteNote>> chat =
      stub.RouteChat(&context);
  ASSERT_NE(chat, nullptr);

  const fake_stream::RecordedStream& stream = fake_stream::LastStream();
  EXPECT_EQ(stream.method, "/golden.route.RouteGuide/RouteChat");
  EXPECT_EQ(stream.kind, RpcKind::kBidiStreaming);
  EXPECT_FALSE(stream.has_first);
  EXPECT_EQ(stream.deadline, absl::InfiniteFuture());

  EXPECT_TRUE(chat->Write(MakeNote("from client")));
  RouteNote note;
  ASSERT_TRUE(chat->Read(&note));
  EXPECT_EQ(note.message(), "from server");
  EXPECT_FALSE(chat->Read(&note));
  EXPECT_TRUE(chat->WritesDone());
  EXPECT_EQ(chat->Finish(), absl::AbortedError("done"));
  EXPECT_EQ(stream.written,
            (std::vector<std::string>{MakeNote("from client").SerializeAsString()}));
  EXPECT_EQ(stream.writes_done, 1);
}

TEST(GeneratedStreamingStub, DestroyingAReaderBeforeFinishEndsItsStream) {
  fake_stream::Reset({}, absl::OkStatus());
  RouteGuide::Stub stub(NoChannel());
  rdmarpc::ClientContext context;
  auto chat = stub.RouteChat(&context);
  EXPECT_FALSE(fake_stream::LastStream().destroyed_unfinished);
  chat.reset();
  EXPECT_TRUE(fake_stream::LastStream().destroyed_unfinished);
}

TEST(GeneratedStreamingStub, ServiceDefaultDeadlineAndMangledNamesOfEveryKind) {
  Relay::Stub stub(NoChannel());
  struct Expected {
    const char* method;
    RpcKind kind;
  };
  auto check = [](const Expected& expected, absl::Time before, absl::Time after) {
    const fake_stream::RecordedStream& stream = fake_stream::LastStream();
    EXPECT_EQ(stream.method, expected.method);
    EXPECT_EQ(stream.kind, expected.kind) << expected.method;
    // (rdmarpc.service).default_timeout_ms = 100 on Relay.
    EXPECT_GE(stream.deadline, before + absl::Milliseconds(100)) << expected.method;
    EXPECT_LE(stream.deadline, after + absl::Milliseconds(100)) << expected.method;
  };
  Point point;
  RouteSummary summary;
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto reader = stub.Watch(&context, point);
    check({"/golden.route.Relay/Watch", RpcKind::kServerStreaming}, before, absl::Now());
  }
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto writer = stub.Upload(&context, &summary);
    check({"/golden.route.Relay/Upload", RpcKind::kClientStreaming}, before, absl::Now());
  }
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto chat = stub.Chat(&context);
    check({"/golden.route.Relay/Chat", RpcKind::kBidiStreaming}, before, absl::Now());
  }
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto chat = stub.async_(&context);
    check({"/golden.route.Relay/async", RpcKind::kBidiStreaming}, before, absl::Now());
  }
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto writer = stub.delete_(&context, &point);
    check({"/golden.route.Relay/delete", RpcKind::kClientStreaming}, before, absl::Now());
  }
  {
    fake_stream::Reset({}, absl::OkStatus());
    rdmarpc::ClientContext context;
    const absl::Time before = absl::Now();
    auto reader = stub.Stub_(&context, point);
    check({"/golden.route.Relay/Stub", RpcKind::kServerStreaming}, before, absl::Now());
  }
}

TEST(GeneratedStreamingStub, StreamsOpenedThroughStubInterface) {
  std::unique_ptr<RouteGuide::Stub> owned = RouteGuide::NewStub(NoChannel());
  RouteGuide::StubInterface* stub = owned.get();
  rdmarpc::ClientContext c1, c2, c3;
  RouteSummary summary;
  fake_stream::Reset({}, absl::OkStatus());
  auto reader = stub->ListFeatures(&c1, Rectangle());
  EXPECT_EQ(fake_stream::LastStream().method, "/golden.route.RouteGuide/ListFeatures");
  auto writer = stub->RecordRoute(&c2, &summary);
  EXPECT_EQ(fake_stream::LastStream().method, "/golden.route.RouteGuide/RecordRoute");
  auto chat = stub->RouteChat(&c3);
  EXPECT_EQ(fake_stream::LastStream().method, "/golden.route.RouteGuide/RouteChat");
  EXPECT_EQ(fake_stream::LastStream().opened, 3);
}


// ---- reactor forms of stub->async() ---------------------------------------------

class NoteChat final : public rdmarpc::ClientBidiReactor<RouteNote, RouteNote> {};
class FeatureReader final : public rdmarpc::ClientReadReactor<Feature> {};
class RouteWriter final : public rdmarpc::ClientWriteReactor<Point> {};

TEST(GeneratedStreamingStub, ReactorCallsBindTheirKindAndDefaultDeadline) {
  fake_stream::Reset({}, absl::OkStatus());
  auto stub = RouteGuide::NewStub(NoChannel());
  {
    rdmarpc::ClientContext ctx;
    Rectangle rect;
    *rect.mutable_lo() = MakePoint(1, 2);
    FeatureReader reader;
    const absl::Time before = absl::Now();
    stub->async()->ListFeatures(&ctx, &rect, &reader);
    const fake_stream::RecordedStream& s = fake_stream::LastStream();
    EXPECT_TRUE(s.reactor);
    EXPECT_EQ(s.method, "/golden.route.RouteGuide/ListFeatures");
    EXPECT_EQ(s.kind, RpcKind::kServerStreaming);
    ASSERT_TRUE(s.has_first);
    EXPECT_EQ(s.first, rect.SerializeAsString());
    EXPECT_GE(s.deadline, before + absl::Milliseconds(500));  // default_timeout_ms
    EXPECT_EQ(s.start_calls, 0);  // nothing is sent before StartCall
    reader.StartCall();
    EXPECT_EQ(fake_stream::LastStream().start_calls, 1);
  }
  {
    rdmarpc::ClientContext ctx;
    RouteSummary summary;
    RouteWriter writer;
    stub->async()->RecordRoute(&ctx, &summary, &writer);
    const fake_stream::RecordedStream& s = fake_stream::LastStream();
    EXPECT_EQ(s.kind, RpcKind::kClientStreaming);
    EXPECT_FALSE(s.has_first);
    EXPECT_EQ(s.response_target, &summary);
    EXPECT_EQ(s.deadline, absl::InfiniteFuture());
    const Point p = MakePoint(7, 8);
    writer.StartWrite(&p);
    writer.StartWritesDone();
    ASSERT_EQ(fake_stream::LastStream().written.size(), 1u);
    EXPECT_EQ(fake_stream::LastStream().written[0], p.SerializeAsString());
    EXPECT_EQ(fake_stream::LastStream().writes_done, 1);
  }
  {
    rdmarpc::ClientContext ctx;
    NoteChat chat;
    stub->async()->RouteChat(&ctx, &chat);
    EXPECT_EQ(fake_stream::LastStream().kind, RpcKind::kBidiStreaming);
    EXPECT_EQ(fake_stream::LastStream().method, "/golden.route.RouteGuide/RouteChat");
    EXPECT_EQ(fake_stream::LastStream().response_target, nullptr);
  }
}

TEST(GeneratedStreamingStub, CallbackServiceRegistersCallbackHandlersOfEachKind) {
  RouteGuide::CallbackService service;
  ASSERT_EQ(service.methods().size(), 4u);
  const RpcKind kinds[] = {RpcKind::kUnary, RpcKind::kServerStreaming,
                           RpcKind::kClientStreaming, RpcKind::kBidiStreaming};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(service.methods()[i]->callback()) << i;
    EXPECT_EQ(service.methods()[i]->kind(), kinds[i]) << i;
  }
  EXPECT_EQ(service.full_name(), "golden.route.RouteGuide");
  EXPECT_EQ(service.methods()[0]->full_name(), "/golden.route.RouteGuide/GetFeature");
  // Methods left alone return no reactor: the runtime answers UNIMPLEMENTED.
  rdmarpc::CallbackServerContext ctx;
  Point request;
  Feature response;
  EXPECT_EQ(service.methods()[0]->InvokeCallback(&ctx, &request, &response), nullptr);
  EXPECT_EQ(service.methods()[3]->InvokeCallback(&ctx, nullptr, nullptr), nullptr);
  // Relay's unary Ping keeps the service's run_inline.
  golden::route::Relay::CallbackService relay;
  EXPECT_TRUE(relay.methods()[0]->run_inline());
  EXPECT_FALSE(relay.methods()[1]->run_inline());
}

}  // namespace
