// route_guide_client: calls each of a route_guide_server's four methods once
// and prints what came back.
//
//   route_guide_client --server=HOST:PORT [--timeout_ms=10000]
//
// The calls, against the map of feature_db.h:
//   GetFeature    at grid point (3, 7), then at a point between grid points;
//   ListFeatures  over the rectangle from grid point (2, 3) to (4, 6): 12 features;
//   RecordRoute   12 points: row 5's ten features, then two empty points;
//   RouteChat     6 notes, two at each of 3 points: the server sends back the
//                 first note of each point when the second arrives (3 notes on
//                 a server no other client has chatted with).
// Exit status: 0 when every call returned OK, 1 otherwise (the last line on
// stderr is "route_guide: <STATUS_CODE> <METHOD> <message>").
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "feature_db.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "route_guide.pb.h"
#include "route_guide.rdmarpc.pb.h"

DEFINE_string(server, "127.0.0.1:7200", "route_guide_server address, HOST:PORT");
DEFINE_int64(timeout_ms, 10000, "Deadline of each call, in milliseconds; 0 = none");

namespace {

namespace rg = rdmarpc::examples::routeguide;
using routeguide::FormatPoint;
using routeguide::GridPoint;

void SetDeadline(rdmarpc::ClientContext* context) {
  if (FLAGS_timeout_ms > 0) context->set_timeout(absl::Milliseconds(FLAGS_timeout_ms));
}

absl::Status Annotate(absl::string_view method, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(method, " ", status.message()));
}

absl::Status GetFeature(rg::RouteGuide::Stub& stub, const rg::Point& point) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  rg::Feature feature;
  absl::Status status = stub.GetFeature(&context, point, &feature);
  if (!status.ok()) return Annotate("GetFeature", status);
  if (feature.name().empty()) {
    printf("GetFeature %s: no feature\n", FormatPoint(point).c_str());
  } else {
    printf("GetFeature %s: \"%s\"\n", FormatPoint(point).c_str(), feature.name().c_str());
  }
  return absl::OkStatus();
}

absl::Status ListFeatures(rg::RouteGuide::Stub& stub, const rg::Rectangle& rect) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<rdmarpc::ClientReaderInterface<rg::Feature>> reader =
      stub.ListFeatures(&context, rect);
  rg::Feature feature;
  int count = 0;
  while (reader->Read(&feature)) {
    ++count;
    printf("ListFeatures: \"%s\" at %s\n", feature.name().c_str(),
           FormatPoint(feature.location()).c_str());
  }
  absl::Status status = reader->Finish();
  if (!status.ok()) return Annotate("ListFeatures", status);
  printf("ListFeatures %s to %s: %d features\n", FormatPoint(rect.lo()).c_str(),
         FormatPoint(rect.hi()).c_str(), count);
  return absl::OkStatus();
}

absl::Status RecordRoute(rg::RouteGuide::Stub& stub, const std::vector<rg::Point>& route) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  rg::RouteSummary summary;
  std::unique_ptr<rdmarpc::ClientWriterInterface<rg::Point>> writer =
      stub.RecordRoute(&context, &summary);
  for (const rg::Point& point : route) {
    if (!writer->Write(point)) break;  // the stream ended; Finish says why
  }
  writer->WritesDone();
  absl::Status status = writer->Finish();
  if (!status.ok()) return Annotate("RecordRoute", status);
  printf("RecordRoute: point_count=%d feature_count=%d distance=%d elapsed_time=%d\n",
         summary.point_count(), summary.feature_count(), summary.distance(),
         summary.elapsed_time());
  return absl::OkStatus();
}

absl::Status RouteChat(rg::RouteGuide::Stub& stub, const std::vector<rg::RouteNote>& notes) {
  rdmarpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<rdmarpc::ClientReaderWriterInterface<rg::RouteNote, rg::RouteNote>> stream =
      stub.RouteChat(&context);
  // One thread writes while this one reads, as sync_stream.h allows: the
  // server may answer before it has read every note.
  std::thread writer([&] {
    for (const rg::RouteNote& note : notes) {
      if (!stream->Write(note)) return;  // the stream ended; Finish says why
    }
    stream->WritesDone();
  });
  rg::RouteNote in;
  int received = 0;
  while (stream->Read(&in)) {
    ++received;
    printf("RouteChat: got \"%s\" at %s\n", in.message().c_str(),
           FormatPoint(in.location()).c_str());
  }
  writer.join();
  absl::Status status = stream->Finish();
  if (!status.ok()) return Annotate("RouteChat", status);
  printf("RouteChat: sent %zu notes, received %d\n", notes.size(), received);
  return absl::OkStatus();
}

absl::Status RunAll(rg::RouteGuide::Stub& stub) {
  absl::Status status = GetFeature(stub, GridPoint(3, 7));
  if (!status.ok()) return status;
  rg::Point between = GridPoint(3, 7);
  between.set_latitude(between.latitude() + routeguide::kGridStepE7 / 2);
  status = GetFeature(stub, between);
  if (!status.ok()) return status;

  rg::Rectangle rect;
  *rect.mutable_lo() = GridPoint(2, 3);
  *rect.mutable_hi() = GridPoint(4, 6);
  status = ListFeatures(stub, rect);
  if (!status.ok()) return status;

  std::vector<rg::Point> route;
  for (int column = 0; column < routeguide::kGridColumns; ++column) {
    route.push_back(GridPoint(5, column));
  }
  for (int i = 1; i <= 2; ++i) {
    rg::Point empty = GridPoint(5, routeguide::kGridColumns - 1);
    empty.set_latitude(empty.latitude() + i * routeguide::kGridStepE7 / 2 + 1);
    route.push_back(empty);
  }
  status = RecordRoute(stub, route);
  if (!status.ok()) return status;

  std::vector<rg::RouteNote> notes;
  const char* const kMessages[] = {"First", "Second", "Third", "Fourth", "Fifth", "Sixth"};
  for (int i = 0; i < 6; ++i) {
    rg::RouteNote& note = notes.emplace_back();
    *note.mutable_location() = GridPoint(0, i % 3);
    note.set_message(kMessages[i]);
  }
  return RouteChat(stub, notes);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("route_guide_client --server=HOST:PORT [--timeout_ms=N]");
  // Quiet unless something goes wrong; set before parsing so --minloglevel=0
  // still brings the INFO lines back.
  FLAGS_minloglevel = google::GLOG_WARNING;
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (argc != 1) {
    fprintf(stderr, "route_guide_client: unexpected argument \"%s\"\n", argv[1]);
    return 2;
  }

  // --rdmarpc_admin_listen=HOST:PORT serves /metrics, /statusz and /healthz
  // while the client runs (rdmarpc/admin.h).
  absl::StatusOr<std::unique_ptr<rdmarpc::AdminServer>> admin =
      rdmarpc::AdminServer::StartFromFlags();
  if (!admin.ok()) {
    fprintf(stderr, "%s: %s\n", argv[0], admin.status().ToString().c_str());
    return 2;
  }

  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(FLAGS_server, rdmarpc::ChannelOptions());
  absl::Status status = channel.status();
  if (status.ok()) {
    std::unique_ptr<rg::RouteGuide::Stub> stub = rg::RouteGuide::NewStub(*channel);
    status = RunAll(*stub);
  }
  fflush(stdout);
  if (!status.ok()) {
    fprintf(stderr, "route_guide: %s %s\n", absl::StatusCodeToString(status.code()).c_str(),
            std::string(status.message()).c_str());
    return 1;
  }
  printf("route_guide_client: all 4 methods OK\n");
  return 0;
}
