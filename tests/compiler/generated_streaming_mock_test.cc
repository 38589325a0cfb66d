// User code unit-tested with the generated gMock stubs of streaming methods
// (golden/streaming_mock.rdmarpc.pb.h): the mock's streaming methods return
// readers and writers the test defines, through Return(ByMove(...)) or an
// action, and code that takes a RouteGuide::StubInterface* reads, writes and
// finishes them as it would a real call.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "golden/streaming_mock.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::route::Feature;
using ::golden::route::MockRelayStub;
using ::golden::route::MockRouteGuideStub;
using ::golden::route::Point;
using ::golden::route::Rectangle;
using ::golden::route::RouteGuide;
using ::golden::route::RouteNote;
using ::golden::route::RouteSummary;
using ::testing::_;
using ::testing::ByMove;
using ::testing::NotNull;
using ::testing::Property;
using ::testing::Return;
using ::testing::StrictMock;

// ---- the test's own readers and writers -----------------------------------

// Reads `messages`, then finishes with `status`.
template <class R>
class FakeReader final : public rdmarpc::ClientReaderInterface<R> {
 public:
  FakeReader(std::vector<R> messages, absl::Status status)
      : messages_(std::move(messages)), status_(std::move(status)) {}
  bool Read(R* message) override {
    if (next_ == messages_.size()) return false;
    *message = messages_[next_++];
    return true;
  }
  absl::Status Finish() override { return status_; }

 private:
  std::vector<R> messages_;
  size_t next_ = 0;
  absl::Status status_;
};

// Keeps what is written in `*written`; Finish stores `answer` in the
// response the stub method was given.
template <class W, class Resp>
class FakeWriter final : public rdmarpc::ClientWriterInterface<W> {
 public:
  FakeWriter(std::vector<W>* written, Resp* response, Resp answer)
      : written_(written), response_(response), answer_(std::move(answer)) {}
  bool Write(const W& message) override {
    written_->push_back(message);
    return true;
  }
  bool WritesDone() override { return true; }
  absl::Status Finish() override {
    *response_ = answer_;
    return absl::OkStatus();
  }

 private:
  std::vector<W>* written_;
  Resp* response_;
  Resp answer_;
};

// Answers each message written with one whose text is "re: " and the
// written one's.
class FakeChat final : public rdmarpc::ClientReaderWriterInterface<RouteNote, RouteNote> {
 public:
  bool Write(const RouteNote& message) override {
    RouteNote reply = message;
    reply.set_message("re: " + message.message());
    replies_.push_back(std::move(reply));
    return true;
  }
  bool WritesDone() override { return true; }
  bool Read(RouteNote* message) override {
    if (next_ == replies_.size()) return false;
    *message = replies_[next_++];
    return true;
  }
  absl::Status Finish() override { return absl::OkStatus(); }

 private:
  std::vector<RouteNote> replies_;
  size_t next_ = 0;
};

// ---- the code under test: it only knows StubInterface ----------------------

// The names of the features in `rect`, or the call's error.
absl::StatusOr<std::vector<std::string>> FeatureNames(RouteGuide::StubInterface* stub,
                                                      int lo_latitude) {
  rdmarpc::ClientContext context;
  Rectangle rect;
  rect.mutable_lo()->set_latitude(lo_latitude);
  std::unique_ptr<rdmarpc::ClientReaderInterface<Feature>> reader =
      stub->ListFeatures(&context, rect);
  std::vector<std::string> names;
  Feature feature;
  while (reader->Read(&feature)) names.push_back(feature.name());
  absl::Status status = reader->Finish();
  if (!status.ok()) return status;
  return names;
}

// Records a route of `points` points and returns the server's count.
absl::StatusOr<int> RecordPoints(RouteGuide::StubInterface* stub, int points) {
  rdmarpc::ClientContext context;
  RouteSummary summary;
  auto writer = stub->RecordRoute(&context, &summary);
  Point point;
  for (int i = 0; i < points; ++i) {
    point.set_latitude(i);
    if (!writer->Write(point)) break;
  }
  writer->WritesDone();
  absl::Status status = writer->Finish();
  if (!status.ok()) return status;
  return summary.point_count();
}

// Sends `notes` and returns the replies.
std::vector<std::string> Chat(RouteGuide::StubInterface* stub,
                              const std::vector<std::string>& notes) {
  rdmarpc::ClientContext context;
  auto stream = stub->RouteChat(&context);
  std::vector<std::string> replies;
  RouteNote note;
  for (const std::string& text : notes) {
    note.set_message(text);
    stream->Write(note);
  }
  stream->WritesDone();
  while (stream->Read(&note)) replies.push_back(note.message());
  EXPECT_TRUE(stream->Finish().ok());
  return replies;
}

Feature MakeFeature(const std::string& name) {
  Feature feature;
  feature.set_name(name);
  return feature;
}

// ---- tests --------------------------------------------------------------------

TEST(GeneratedStreamingMock, ServerStreamingReturnsTheReaderItWasGiven) {
  MockRouteGuideStub stub;
  EXPECT_CALL(stub, ListFeatures(NotNull(), Property(&Rectangle::lo,
                                                     Property(&Point::latitude, 10))))
      .WillOnce(Return(ByMove(std::make_unique<FakeReader<Feature>>(
          std::vector<Feature>{MakeFeature("well"), MakeFeature("mill")}, absl::OkStatus()))));
  absl::StatusOr<std::vector<std::string>> names = FeatureNames(&stub, 10);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"well", "mill"}));
}

TEST(GeneratedStreamingMock, ServerStreamingPassesTheReadersErrorThrough) {
  MockRouteGuideStub stub;
  EXPECT_CALL(stub, ListFeatures(_, _))
      .WillOnce(Return(ByMove(std::make_unique<FakeReader<Feature>>(
          std::vector<Feature>{}, absl::UnavailableError("no map")))));
  EXPECT_EQ(FeatureNames(&stub, 0).status(), absl::UnavailableError("no map"));
}

TEST(GeneratedStreamingMock, ClientStreamingWriterGetsTheResponsePointer) {
  MockRouteGuideStub stub;
  std::vector<Point> written;
  RouteSummary answer;
  answer.set_point_count(3);
  EXPECT_CALL(stub, RecordRoute(NotNull(), NotNull()))
      .WillOnce([&](rdmarpc::ClientContext*, RouteSummary* response)
                    -> std::unique_ptr<rdmarpc::ClientWriterInterface<Point>> {
        return std::make_unique<FakeWriter<Point, RouteSummary>>(&written, response, answer);
      });
  absl::StatusOr<int> count = RecordPoints(&stub, 3);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 3);
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[2].latitude(), 2);
}

TEST(GeneratedStreamingMock, BidiStreamingReturnsTheStreamItWasGiven) {
  StrictMock<MockRouteGuideStub> stub;
  EXPECT_CALL(stub, RouteChat(NotNull())).WillOnce(Return(ByMove(std::make_unique<FakeChat>())));
  EXPECT_EQ(Chat(&stub, {"hello", "bye"}), (std::vector<std::string>{"re: hello", "re: bye"}));
}

TEST(GeneratedStreamingMock, MangledStreamingMethodsAreMockedUnderTheirCppNames) {
  MockRelayStub relay;
  EXPECT_CALL(relay, Stub_(_, Property(&Point::latitude, 8)))
      .WillOnce(Return(ByMove(std::make_unique<FakeReader<Point>>(std::vector<Point>{},
                                                                   absl::AbortedError("Stub_")))));
  EXPECT_CALL(relay, async_(_)).WillOnce(Return(ByMove(nullptr)));
  golden::route::Relay::StubInterface* stub = &relay;
  rdmarpc::ClientContext c1, c2;
  Point point;
  point.set_latitude(8);
  EXPECT_EQ(stub->Stub_(&c1, point)->Finish(), absl::AbortedError("Stub_"));
  EXPECT_EQ(stub->async_(&c2), nullptr);
  // Unary methods keep their asynchronous mock; streaming ones have none.
  EXPECT_CALL(*relay.async(), Ping(_, _, _, ::testing::A<absl::AnyInvocable<void(absl::Status) &&>>()))
      .WillOnce([](auto*, const auto&, auto*, auto done) { std::move(done)(absl::OkStatus()); });
  rdmarpc::ClientContext c3;
  absl::Status result = absl::UnknownError("not run");
  stub->async()->Ping(&c3, point, &point, [&](absl::Status status) { result = status; });
  EXPECT_TRUE(result.ok());
}

}  // namespace
