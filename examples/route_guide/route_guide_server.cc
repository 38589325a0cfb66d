// route_guide_server: serves rdmarpc.examples.routeguide.RouteGuide (and
// grpc.health.v1.Health) over the built-in map of feature_db.h until SIGINT
// or SIGTERM.
//
//   route_guide_server --listen=127.0.0.1:7200 [--workers=2] [--callback]
//
// --callback serves the same methods with RouteGuide::CallbackService, the
// reactor form (rdmarpc/server_callback.h): no handler thread is held while
// a stream waits for its client.
//
// Prints "listening on HOST:PORT" on stdout once it accepts calls (port 0
// picks a free port).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "feature_db.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health/health_check_service.h"
#include "rdmarpc/rdmarpc.h"
#include "route_guide.pb.h"
#include "route_guide.rdmarpc.pb.h"

DEFINE_string(listen, "127.0.0.1:7200", "Address to listen on, HOST:PORT (port 0 picks a free one)");
DEFINE_int32(workers, 2, "Server worker threads, each owning one completion queue");
DEFINE_bool(callback, false, "Serve RouteGuide with reactors (RouteGuide::CallbackService)");

namespace {

namespace rg = rdmarpc::examples::routeguide;

using PointKey = std::pair<int32_t, int32_t>;  // latitude, longitude

PointKey KeyOf(const rg::Point& point) { return {point.latitude(), point.longitude()}; }

class RouteGuideImpl final : public rg::RouteGuide::Service {
 public:
  explicit RouteGuideImpl(std::vector<rg::Feature> features) : features_(std::move(features)) {
    for (const rg::Feature& feature : features_) by_point_[KeyOf(feature.location())] = &feature;
  }

  absl::Status GetFeature(rdmarpc::ServerContext* /*context*/, const rg::Point& point,
                          rg::Feature* feature) override {
    *feature->mutable_location() = point;
    if (const rg::Feature* found = Find(point)) feature->set_name(found->name());
    return absl::OkStatus();
  }

  absl::Status ListFeatures(rdmarpc::ServerContext* /*context*/, const rg::Rectangle& rect,
                            rdmarpc::ServerWriter<rg::Feature>* writer) override {
    const int32_t lat_lo = std::min(rect.lo().latitude(), rect.hi().latitude());
    const int32_t lat_hi = std::max(rect.lo().latitude(), rect.hi().latitude());
    const int32_t lon_lo = std::min(rect.lo().longitude(), rect.hi().longitude());
    const int32_t lon_hi = std::max(rect.lo().longitude(), rect.hi().longitude());
    for (const rg::Feature& feature : features_) {
      const rg::Point& p = feature.location();
      if (p.latitude() < lat_lo || p.latitude() > lat_hi || p.longitude() < lon_lo ||
          p.longitude() > lon_hi) {
        continue;
      }
      // False: the client went away or cancelled; the call is over.
      if (!writer->Write(feature)) return absl::CancelledError("ListFeatures: stream ended");
    }
    return absl::OkStatus();
  }

  absl::Status RecordRoute(rdmarpc::ServerContext* /*context*/,
                           rdmarpc::ServerReader<rg::Point>* reader,
                           rg::RouteSummary* summary) override {
    rg::Point point;
    rg::Point previous;
    int32_t point_count = 0;
    int32_t feature_count = 0;
    double distance = 0;
    const absl::Time start = absl::Now();
    while (reader->Read(&point)) {
      ++point_count;
      if (Find(point) != nullptr) ++feature_count;
      if (point_count > 1) distance += routeguide::DistanceMetres(previous, point);
      previous = point;
    }
    summary->set_point_count(point_count);
    summary->set_feature_count(feature_count);
    summary->set_distance(static_cast<int32_t>(distance));
    summary->set_elapsed_time(
        static_cast<int32_t>(absl::ToInt64Seconds(absl::Now() - start)));
    return absl::OkStatus();
  }

  absl::Status RouteChat(rdmarpc::ServerContext* /*context*/,
                         rdmarpc::ServerReaderWriter<rg::RouteNote, rg::RouteNote>* stream) override {
    rg::RouteNote note;
    while (stream->Read(&note)) {
      std::vector<rg::RouteNote> earlier;
      {
        absl::MutexLock lock(&notes_mu_);
        std::vector<rg::RouteNote>& at_point = notes_[KeyOf(note.location())];
        earlier = at_point;
        at_point.push_back(note);
      }
      // Written outside the lock: a Write blocks while the client's window is
      // full, and must not hold up other calls' notes.
      for (const rg::RouteNote& old : earlier) {
        if (!stream->Write(old)) return absl::CancelledError("RouteChat: stream ended");
      }
    }
    return absl::OkStatus();
  }

 private:
  const rg::Feature* Find(const rg::Point& point) const {
    auto it = by_point_.find(KeyOf(point));
    return it == by_point_.end() ? nullptr : it->second;
  }

  const std::vector<rg::Feature> features_;
  // Points into features_, which never changes.
  absl::flat_hash_map<PointKey, const rg::Feature*> by_point_;

  absl::Mutex notes_mu_;
  absl::flat_hash_map<PointKey, std::vector<rg::RouteNote>> notes_ ABSL_GUARDED_BY(notes_mu_);
};

// The same service with reactors. Each reaction runs on the worker that owns
// the call's connection and never blocks.
class RouteGuideCallbackImpl final : public rg::RouteGuide::CallbackService {
 public:
  explicit RouteGuideCallbackImpl(std::vector<rg::Feature> features)
      : features_(std::move(features)) {
    for (const rg::Feature& feature : features_) by_point_[KeyOf(feature.location())] = &feature;
  }

  rdmarpc::ServerUnaryReactor* GetFeature(rdmarpc::CallbackServerContext* context,
                                          const rg::Point* point,
                                          rg::Feature* feature) override {
    *feature->mutable_location() = *point;
    if (const rg::Feature* found = Find(*point)) feature->set_name(found->name());
    rdmarpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(absl::OkStatus());
    return reactor;
  }

  rdmarpc::ServerWriteReactor<rg::Feature>* ListFeatures(
      rdmarpc::CallbackServerContext* /*context*/, const rg::Rectangle* rect) override {
    class Lister final : public rdmarpc::ServerWriteReactor<rg::Feature> {
     public:
      Lister(const std::vector<rg::Feature>& features, const rg::Rectangle& rect)
          : features_(features),
            lat_lo_(std::min(rect.lo().latitude(), rect.hi().latitude())),
            lat_hi_(std::max(rect.lo().latitude(), rect.hi().latitude())),
            lon_lo_(std::min(rect.lo().longitude(), rect.hi().longitude())),
            lon_hi_(std::max(rect.lo().longitude(), rect.hi().longitude())) {
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(absl::CancelledError("ListFeatures: stream ended"));
          return;
        }
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        while (next_ < features_.size()) {
          const rg::Feature& feature = features_[next_++];
          const rg::Point& p = feature.location();
          if (p.latitude() >= lat_lo_ && p.latitude() <= lat_hi_ && p.longitude() >= lon_lo_ &&
              p.longitude() <= lon_hi_) {
            StartWrite(&feature);  // features_ outlives the call
            return;
          }
        }
        Finish(absl::OkStatus());
      }
      const std::vector<rg::Feature>& features_;
      const int32_t lat_lo_, lat_hi_, lon_lo_, lon_hi_;
      size_t next_ = 0;
    };
    return new Lister(features_, *rect);
  }

  rdmarpc::ServerReadReactor<rg::Point>* RecordRoute(rdmarpc::CallbackServerContext* /*context*/,
                                                     rg::RouteSummary* summary) override {
    class Recorder final : public rdmarpc::ServerReadReactor<rg::Point> {
     public:
      Recorder(const RouteGuideCallbackImpl* guide, rg::RouteSummary* summary)
          : guide_(guide), summary_(summary), start_(absl::Now()) {
        StartRead(&point_);
      }
      void OnReadDone(bool ok) override {
        if (ok) {
          ++point_count_;
          if (guide_->Find(point_) != nullptr) ++feature_count_;
          if (point_count_ > 1) distance_ += routeguide::DistanceMetres(previous_, point_);
          previous_ = point_;
          StartRead(&point_);
          return;
        }
        summary_->set_point_count(point_count_);
        summary_->set_feature_count(feature_count_);
        summary_->set_distance(static_cast<int32_t>(distance_));
        summary_->set_elapsed_time(
            static_cast<int32_t>(absl::ToInt64Seconds(absl::Now() - start_)));
        Finish(absl::OkStatus());
      }
      void OnDone() override { delete this; }

     private:
      const RouteGuideCallbackImpl* guide_;
      rg::RouteSummary* summary_;
      const absl::Time start_;
      rg::Point point_;
      rg::Point previous_;
      int32_t point_count_ = 0;
      int32_t feature_count_ = 0;
      double distance_ = 0;
    };
    return new Recorder(this, summary);
  }

  rdmarpc::ServerBidiReactor<rg::RouteNote, rg::RouteNote>* RouteChat(
      rdmarpc::CallbackServerContext* /*context*/) override {
    class Chatter final : public rdmarpc::ServerBidiReactor<rg::RouteNote, rg::RouteNote> {
     public:
      explicit Chatter(RouteGuideCallbackImpl* guide) : guide_(guide) { StartRead(&note_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(absl::OkStatus());
          return;
        }
        {
          absl::MutexLock lock(&guide_->notes_mu_);
          std::vector<rg::RouteNote>& at_point = guide_->notes_[KeyOf(note_.location())];
          earlier_ = at_point;
          at_point.push_back(note_);
        }
        next_ = 0;
        WriteNextOrRead();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(absl::CancelledError("RouteChat: stream ended"));
          return;
        }
        WriteNextOrRead();
      }
      void OnDone() override { delete this; }

     private:
      // The notes left earlier at this note's point, one write at a time,
      // then the next read.
      void WriteNextOrRead() {
        if (next_ < earlier_.size()) {
          StartWrite(&earlier_[next_++]);
          return;
        }
        StartRead(&note_);
      }
      RouteGuideCallbackImpl* guide_;
      rg::RouteNote note_;
      std::vector<rg::RouteNote> earlier_;
      size_t next_ = 0;
    };
    return new Chatter(this);
  }

 private:
  const rg::Feature* Find(const rg::Point& point) const {
    auto it = by_point_.find(KeyOf(point));
    return it == by_point_.end() ? nullptr : it->second;
  }

  const std::vector<rg::Feature> features_;
  absl::flat_hash_map<PointKey, const rg::Feature*> by_point_;
  absl::Mutex notes_mu_;
  absl::flat_hash_map<PointKey, std::vector<rg::RouteNote>> notes_ ABSL_GUARDED_BY(notes_mu_);
};

// Host part of "HOST:PORT" (brackets kept for IPv6 literals).
absl::string_view HostOf(absl::string_view address) {
  size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "route_guide_server --listen=HOST:PORT [--workers=N] [--callback]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_workers < 1) {
    fprintf(stderr, "route_guide_server: --workers must be at least 1, got %d\n", FLAGS_workers);
    return 2;
  }

  // Only sigwait() below sees SIGINT/SIGTERM; see echo_server.cc.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  RouteGuideImpl sync_guide(routeguide::BuiltInFeatures());
  RouteGuideCallbackImpl callback_guide(routeguide::BuiltInFeatures());
  rdmarpc::Service& guide = FLAGS_callback ? static_cast<rdmarpc::Service&>(callback_guide)
                                           : static_cast<rdmarpc::Service&>(sync_guide);
  rdmarpc::HealthCheckService health;
  rdmarpc::ServerOptions options;
  options.num_workers = FLAGS_workers;
  rdmarpc::Server server(options);
  for (rdmarpc::Service* service : {static_cast<rdmarpc::Service*>(&guide),
                                    static_cast<rdmarpc::Service*>(&health)}) {
    absl::Status status = server.AddService(service);
    if (!status.ok()) {
      LOG(ERROR) << "AddService(" << service->full_name() << "): " << status;
      return 1;
    }
  }
  absl::Status status = server.Start(FLAGS_listen);
  if (!status.ok()) {
    fprintf(stderr, "route_guide_server: %s %s\n",
            absl::StatusCodeToString(status.code()).c_str(),
            std::string(status.message()).c_str());
    return 1;
  }
  health.SetServingStatus(guide.full_name(), true);

  std::string bound = absl::StrCat(HostOf(FLAGS_listen), ":", server.port());
  LOG(INFO) << "route_guide_server listening on " << bound;
  printf("listening on %s\n", bound.c_str());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "route_guide_server: " << strsignal(signal_number) << ", shutting down";
  health.Shutdown();
  server.Shutdown();
  server.Wait();
  return 0;
}
