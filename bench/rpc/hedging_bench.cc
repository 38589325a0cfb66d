// hedging_bench: client latency with and without a hedging policy when one
// server of three is sometimes slow (issue 11's scenario).
//
// Three servers of HedgingBench.Echo (hedging_bench.proto) run in this process on 127.0.0.1; one of
// them answers --slow_fraction of its calls after --slow_ms. One channel
// (round_robin over the three) makes --calls sequential 32-byte Echo calls
// twice: plainly, then under the service config
//   {"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "<--hedging_delay_ms>"}}
// Each run is repeated --runs times; the table gives the median over runs of
// each run's p50, p99 and max, in µs, and the ratio hedged / plain.
//
// Usage: hedging_bench [--calls=3000] [--runs=3] [--slow_ms=100]
//                      [--slow_fraction=0.1] [--hedging_delay_ms=5]
//                      [--json=FILE]               (RDMARPC_PROVIDER=soft)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "hedging_bench.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_int32(calls, 3000, "Calls per run");
DEFINE_int32(runs, 3, "Runs per configuration; the table shows medians over runs");
DEFINE_int32(slow_ms, 100, "How late the slow server answers a slow call, in ms");
DEFINE_double(slow_fraction, 0.1, "Share of the slow server's calls that are slow");
DEFINE_int32(hedging_delay_ms, 5, "hedgingDelay of the hedged runs, in ms");
DEFINE_string(json, "", "Also write the figures to this file as JSON");

namespace {

using rdmarpc::hedgingbench::EchoRequest;
using rdmarpc::hedgingbench::EchoResponse;
using rdmarpc::hedgingbench::HedgingBench;

class EchoImpl final : public HedgingBench::Service {
 public:
  EchoImpl(double slow_fraction, absl::Duration slow)
      : slow_fraction_(slow_fraction), slow_(slow) {}
  absl::Status Echo(rdmarpc::ServerContext* ctx, const EchoRequest& request,
                    EchoResponse* response) override {
    bool slow;
    {
      absl::MutexLock lock(&mu_);
      slow = std::uniform_real_distribution<double>(0, 1)(rng_) < slow_fraction_;
    }
    if (slow) {
      // A cancelled copy (the hedge won) stops waiting.
      const absl::Time until = absl::Now() + slow_;
      while (absl::Now() < until && !ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(1));
    }
    response->set_payload(request.payload());
    return absl::OkStatus();
  }

 private:
  const double slow_fraction_;
  const absl::Duration slow_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_){42};
};

struct Figures {
  double p50_us = 0, p99_us = 0, max_us = 0;
  int failed = 0;
};

double Percentile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

Figures Run(const std::string& target, const std::string& service_config) {
  rdmarpc::ChannelOptions options;
  options.service_config_json = service_config;
  auto channel = rdmarpc::CreateChannel(target, options);
  CHECK(channel.ok()) << channel.status();
  auto stub = HedgingBench::NewStub(*channel);
  EchoRequest request;
  request.set_payload(std::string(32, 'x'));
  // Warm-up: every connection made.
  for (int i = 0; i < 30; ++i) {
    rdmarpc::ClientContext ctx;
    EchoResponse response;
    absl::Status s = stub->Echo(&ctx, request, &response);
    CHECK(s.ok()) << s;
  }
  std::vector<double> us;
  Figures f;
  for (int i = 0; i < FLAGS_calls; ++i) {
    rdmarpc::ClientContext ctx;
    ctx.set_timeout(absl::Seconds(10));
    EchoResponse response;
    const absl::Time start = absl::Now();
    absl::Status s = stub->Echo(&ctx, request, &response);
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    if (!s.ok()) ++f.failed;
  }
  f.p50_us = Percentile(us, 0.5);
  f.p99_us = Percentile(us, 0.99);
  f.max_us = us.back();
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Figures MedianOf(const std::vector<Figures>& runs) {
  Figures m;
  std::vector<double> p50, p99, max;
  for (const Figures& f : runs) {
    p50.push_back(f.p50_us);
    p99.push_back(f.p99_us);
    max.push_back(f.max_us);
    m.failed += f.failed;
  }
  m.p50_us = Median(p50);
  m.p99_us = Median(p99);
  m.max_us = Median(max);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  CHECK_GE(FLAGS_calls, 100);
  CHECK_GE(FLAGS_runs, 1);
  EchoImpl fast(0, absl::ZeroDuration());
  EchoImpl slow(FLAGS_slow_fraction, absl::Milliseconds(FLAGS_slow_ms));
  std::vector<std::unique_ptr<rdmarpc::Server>> servers;
  std::string target;
  for (EchoImpl* impl : {&slow, &fast, &fast}) {
    servers.push_back(std::make_unique<rdmarpc::Server>());
    CHECK(servers.back()->AddService(impl).ok());
    absl::Status s = servers.back()->Start("127.0.0.1:0");
    CHECK(s.ok()) << s;
    absl::StrAppend(&target, target.empty() ? "" : ",", "127.0.0.1:", servers.back()->port());
  }
  const std::string hedged = absl::StrCat(
      R"({"methodConfig": [{"name": [{"service": "rdmarpc.hedgingbench.HedgingBench", "method": "Echo"}],
          "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": ")",
      FLAGS_hedging_delay_ms / 1000.0, R"(s"}}]})");
  std::vector<Figures> plain_runs, hedged_runs;
  for (int r = 0; r < FLAGS_runs; ++r) {
    plain_runs.push_back(Run(target, ""));
    hedged_runs.push_back(Run(target, hedged));
  }
  const Figures plain = MedianOf(plain_runs);
  const Figures hedge = MedianOf(hedged_runs);
  std::printf(
      "hedging_bench: 3 servers, one answers %.0f%% of its calls after %d ms; "
      "%d sequential 32 B calls per run, median of %d runs\n",
      FLAGS_slow_fraction * 100, FLAGS_slow_ms, FLAGS_calls, FLAGS_runs);
  std::printf("%-26s %12s %12s %12s %8s\n", "", "p50 (us)", "p99 (us)", "max (us)", "failed");
  std::printf("%-26s %12.1f %12.1f %12.1f %8d\n", "no hedging", plain.p50_us, plain.p99_us,
              plain.max_us, plain.failed);
  const std::string label = absl::StrCat("hedging after ", FLAGS_hedging_delay_ms, " ms");
  std::printf("%-26s %12.1f %12.1f %12.1f %8d\n", label.c_str(), hedge.p50_us, hedge.p99_us,
              hedge.max_us, hedge.failed);
  std::printf("%-26s %12.2f %12.3f %12.3f\n", "ratio hedged / plain", hedge.p50_us / plain.p50_us,
              hedge.p99_us / plain.p99_us, hedge.max_us / plain.max_us);
  if (!FLAGS_json.empty()) {
    std::ofstream out(FLAGS_json);
    out << absl::StrFormat(
        "{\"calls\": %d, \"runs\": %d, \"slow_ms\": %d, \"slow_fraction\": %g, "
        "\"hedging_delay_ms\": %d,\n \"plain\": {\"p50_us\": %.1f, \"p99_us\": %.1f, "
        "\"max_us\": %.1f, \"failed\": %d},\n \"hedged\": {\"p50_us\": %.1f, \"p99_us\": %.1f, "
        "\"max_us\": %.1f, \"failed\": %d}}\n",
        FLAGS_calls, FLAGS_runs, FLAGS_slow_ms, FLAGS_slow_fraction, FLAGS_hedging_delay_ms,
        plain.p50_us, plain.p99_us, plain.max_us, plain.failed, hedge.p50_us, hedge.p99_us,
        hedge.max_us, hedge.failed);
  }
  for (auto& s : servers) s->Shutdown(absl::Seconds(1));
  for (auto& s : servers) s->Wait();
  return plain.failed + hedge.failed == 0 ? 0 : 1;
}
