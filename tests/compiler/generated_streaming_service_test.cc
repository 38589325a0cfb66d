// The server side of generated streaming code (golden/streaming.proto):
// S::Service registers each streaming method with the handler of its kind
// under its full name, never inline; methods not overridden return
// UNIMPLEMENTED; overrides -- under mangled names too -- are reached through
// MethodHandler::InvokeStream as the runtime calls it, over a fake
// ServerStream (fake_stream_call.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
using ::rdmarpc::internal::ServerStreamState;

std::vector<std::string> MethodNames(const rdmarpc::Service& service) {
  std::vector<std::string> names;
  for (const auto& handler : service.methods()) names.push_back(handler->full_name());
  return names;
}

std::vector<RpcKind> Kinds(const rdmarpc::Service& service) {
  std::vector<RpcKind> kinds;
  for (const auto& handler : service.methods()) kinds.push_back(handler->kind());
  return kinds;
}

std::vector<bool> RunInline(const rdmarpc::Service& service) {
  std::vector<bool> run_inline;
  for (const auto& handler : service.methods()) run_inline.push_back(handler->run_inline());
  return run_inline;
}

// Runs handler `index` of `service` over a stream on `state`, as the runtime
// does for a streaming call.
absl::Status InvokeStream(const rdmarpc::Service& service, size_t index,
                          ServerStreamState* state) {
  rdmarpc::ServerContext context;
  rdmarpc::internal::ServerStream stream(state);
  return service.methods().at(index)->InvokeStream(&context, &stream);
}

Point MakePoint(int latitude, int longitude) {
  Point point;
  point.set_latitude(latitude);
  point.set_longitude(longitude);
  return point;
}

template <class M>
M Parse(const std::string& bytes) {
  M message;
  EXPECT_TRUE(message.ParseFromString(bytes));
  return message;
}

TEST(GeneratedStreamingService, HandlersOfEachKindInProtoOrder) {
  RouteGuide::Service guide;
  EXPECT_EQ(guide.full_name(), "golden.route.RouteGuide");
  EXPECT_EQ(MethodNames(guide),
            (std::vector<std::string>{"/golden.route.RouteGuide/GetFeature",
                                      "/golden.route.RouteGuide/ListFeatures",
                                      "/golden.route.RouteGuide/RecordRoute",
                                      "/golden.route.RouteGuide/RouteChat"}));
  EXPECT_EQ(Kinds(guide), (std::vector<RpcKind>{RpcKind::kUnary, RpcKind::kServerStreaming,
                                                RpcKind::kClientStreaming,
                                                RpcKind::kBidiStreaming}));
  EXPECT_EQ(RunInline(guide), (std::vector<bool>{false, false, false, false}));

  Relay::Service relay;
  EXPECT_EQ(MethodNames(relay),
            (std::vector<std::string>{"/golden.route.Relay/Ping", "/golden.route.Relay/Watch",
                                      "/golden.route.Relay/Upload", "/golden.route.Relay/Chat",
                                      "/golden.route.Relay/async", "/golden.route.Relay/delete",
                                      "/golden.route.Relay/Stub"}));
  EXPECT_EQ(Kinds(relay),
            (std::vector<RpcKind>{RpcKind::kUnary, RpcKind::kServerStreaming,
                                  RpcKind::kClientStreaming, RpcKind::kBidiStreaming,
                                  RpcKind::kBidiStreaming, RpcKind::kClientStreaming,
                                  RpcKind::kServerStreaming}));
}

TEST(GeneratedStreamingService, ServiceRunInlineAppliesToUnaryMethodsOnly) {
  // Relay sets (rdmarpc.service).run_inline = true.
  Relay::Service relay;
  EXPECT_EQ(RunInline(relay),
            (std::vector<bool>{true, false, false, false, false, false, false}));
}

TEST(GeneratedStreamingService, DefaultStreamingMethodsReturnUnimplementedNamingTheMethod) {
  RouteGuide::Service guide;
  Relay::Service relay;
  for (const rdmarpc::Service* service : {static_cast<const rdmarpc::Service*>(&guide),
                                          static_cast<const rdmarpc::Service*>(&relay)}) {
    for (size_t i = 0; i < service->methods().size(); ++i) {
      const rdmarpc::internal::MethodHandler& handler = *service->methods()[i];
      if (handler.kind() == RpcKind::kUnary) continue;
      ServerStreamState state;
      // A server-streaming handler reads its request before calling the method.
      state.incoming.push_back(MakePoint(1, 1).SerializeAsString());
      absl::Status status = InvokeStream(*service, i, &state);
      EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << handler.full_name();
      EXPECT_EQ(status.message(),
                "method " + handler.full_name() + " is not implemented by this server");
      // A client-streaming handler sends no response after an error.
      EXPECT_TRUE(state.written.empty()) << handler.full_name();
    }
  }
}

class RouteGuideImpl final : public RouteGuide::Service {
 public:
  absl::Status ListFeatures(rdmarpc::ServerContext*, const Rectangle& rect,
                            rdmarpc::ServerWriter<Feature>* writer) override {
    for (int latitude = rect.lo().latitude(); latitude <= rect.hi().latitude(); ++latitude) {
      Feature feature;
      feature.set_name("feature at " + std::to_string(latitude));
      *feature.mutable_location() = MakePoint(latitude, 0);
      if (!writer->Write(feature)) return absl::CancelledError("write failed");
    }
    return absl::OkStatus();
  }
  absl::Status RecordRoute(rdmarpc::ServerContext*, rdmarpc::ServerReader<Point>* reader,
                           RouteSummary* response) override {
    Point point;
    int distance = 0;
    while (reader->Read(&point)) {
      response->set_point_count(response->point_count() + 1);
      distance += point.latitude();
    }
    response->set_distance(distance);
    if (response->point_count() == 0) return absl::InvalidArgumentError("empty route");
    return absl::OkStatus();
  }
  absl::Status RouteChat(rdmarpc::ServerContext*,
                         rdmarpc::ServerReaderWriter<RouteNote, RouteNote>* stream) override {
    RouteNote note;
    while (stream->Read(&note)) {
      note.set_message("echo: " + note.message());
      if (!stream->Write(note)) break;
    }
    return absl::OkStatus();
  }
};

TEST(GeneratedStreamingService, ServerStreamingOverrideGetsTheFirstMessageAsRequest) {
  RouteGuideImpl guide;
  Rectangle rect;
  *rect.mutable_lo() = MakePoint(3, 0);
  *rect.mutable_hi() = MakePoint(4, 0);
  ServerStreamState state;
  state.incoming.push_back(rect.SerializeAsString());
  ASSERT_TRUE(InvokeStream(guide, 1, &state).ok());
  ASSERT_EQ(state.written.size(), 2u);
  EXPECT_EQ(Parse<Feature>(state.written[0]).name(), "feature at 3");
  EXPECT_EQ(Parse<Feature>(state.written[1]).name(), "feature at 4");
  EXPECT_TRUE(state.incoming.empty());
}

TEST(GeneratedStreamingService, ServerStreamingWithoutRequestNeverReachesTheOverride) {
  RouteGuideImpl guide;
  ServerStreamState state;
  absl::Status status = InvokeStream(guide, 1, &state);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(state.written.empty());
}

TEST(GeneratedStreamingService, ClientStreamingResponseIsWrittenAfterOk) {
  RouteGuideImpl guide;
  ServerStreamState state;
  for (int latitude : {5, 6, 7}) {
    state.incoming.push_back(MakePoint(latitude, 0).SerializeAsString());
  }
  ASSERT_TRUE(InvokeStream(guide, 2, &state).ok());
  ASSERT_EQ(state.written.size(), 1u);
  const RouteSummary summary = Parse<RouteSummary>(state.written[0]);
  EXPECT_EQ(summary.point_count(), 3);
  EXPECT_EQ(summary.distance(), 18);
}

TEST(GeneratedStreamingService, ClientStreamingErrorWritesNoResponse) {
  RouteGuideImpl guide;
  ServerStreamState state;
  EXPECT_EQ(InvokeStream(guide, 2, &state), absl::InvalidArgumentError("empty route"));
  EXPECT_TRUE(state.written.empty());
}

TEST(GeneratedStreamingService, BidiStreamingOverrideReadsAndWrites) {
  RouteGuideImpl guide;
  ServerStreamState state;
  RouteNote note;
  note.set_message("one");
  state.incoming.push_back(note.SerializeAsString());
  note.set_message("two");
  state.incoming.push_back(note.SerializeAsString());
  ASSERT_TRUE(InvokeStream(guide, 3, &state).ok());
  ASSERT_EQ(state.written.size(), 2u);
  EXPECT_EQ(Parse<RouteNote>(state.written[0]).message(), "echo: one");
  EXPECT_EQ(Parse<RouteNote>(state.written[1]).message(), "echo: two");
}

class RelayImpl final : public Relay::Service {
 public:
  absl::Status async_(rdmarpc::ServerContext*,
                      rdmarpc::ServerReaderWriter<Point, Point>* stream) override {
    Point point;
    while (stream->Read(&point)) {
      point.set_longitude(point.longitude() + 1);
      stream->Write(point);
    }
    return absl::AbortedError("async_ called");
  }
  absl::Status delete_(rdmarpc::ServerContext*, rdmarpc::ServerReader<Point>* reader,
                       Point* response) override {
    Point point;
    while (reader->Read(&point)) *response = point;
    return absl::OkStatus();
  }
  absl::Status Stub_(rdmarpc::ServerContext*, const Point& request,
                     rdmarpc::ServerWriter<Point>* writer) override {
    writer->Write(request);
    writer->Write(request);
    return absl::DataLossError("Stub_ called");
  }
};

TEST(GeneratedStreamingService, MangledStreamingOverridesAreCalledForTheirWireNames) {
  RelayImpl relay;
  {
    ServerStreamState state;  // "async"
    state.incoming.push_back(MakePoint(1, 1).SerializeAsString());
    EXPECT_EQ(InvokeStream(relay, 4, &state), absl::AbortedError("async_ called"));
    ASSERT_EQ(state.written.size(), 1u);
    EXPECT_EQ(Parse<Point>(state.written[0]).longitude(), 2);
  }
  {
    ServerStreamState state;  // "delete"
    state.incoming.push_back(MakePoint(1, 1).SerializeAsString());
    state.incoming.push_back(MakePoint(9, 9).SerializeAsString());
    ASSERT_TRUE(InvokeStream(relay, 5, &state).ok());
    ASSERT_EQ(state.written.size(), 1u);
    EXPECT_EQ(Parse<Point>(state.written[0]).latitude(), 9);
  }
  {
    ServerStreamState state;  // "Stub"
    state.incoming.push_back(MakePoint(4, 4).SerializeAsString());
    EXPECT_EQ(InvokeStream(relay, 6, &state), absl::DataLossError("Stub_ called"));
    ASSERT_EQ(state.written.size(), 2u);
    EXPECT_EQ(Parse<Point>(state.written[1]).latitude(), 4);
  }
  // Not overridden: Watch, Upload, Chat.
  for (size_t index : {1u, 2u, 3u}) {
    ServerStreamState state;
    state.incoming.push_back(MakePoint(0, 0).SerializeAsString());
    EXPECT_EQ(InvokeStream(relay, index, &state).code(), absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
