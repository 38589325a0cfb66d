// rpc_bench: latency, message rate, bandwidth and per-call verbs budget of
// an Echo(bytes) RPC over rdmarpc, and the same workload over gRPC.
//
//   rpc_bench --mode=server [--systems=rdmarpc,grpc] [--host=127.0.0.1]
//             [--port=0] [--grpc_port=0] [--duration=0]
//   rpc_bench --mode=client --port=P [--grpc_port=Q] [--systems=rdmarpc,grpc]
//             [--modes=latency,rate,bandwidth,budget] [--json_out=FILE]
//
// The server prints one line per system, "listening on HOST:PORT system=S",
// and serves until SIGINT/SIGTERM or --duration seconds. The client measures
// each system in turn, prints a table (with the ratio rdmarpc/gRPC of every
// figure when both ran) and writes JSON whose field names carry units
// (p50_us, rpc_per_s, gb_per_s). See bench/README.md for what each figure
// means. Exit status: 0 done, 1 a call or setup failed (the message says
// which), 2 bad flags.
#include <signal.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "echo_system.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_string(mode, "client", "server | client");
DEFINE_string(systems, "rdmarpc,grpc",
              "Systems to serve (server) or measure, in this order (client): rdmarpc, grpc. "
              "grpc is dropped with a note when the binary was built without it");
DEFINE_string(host, "127.0.0.1", "Server host: where to listen, or whom to call");
DEFINE_int32(port, 0, "rdmarpc server port (server: 0 = a free one)");
DEFINE_int32(grpc_port, 0, "gRPC server port (server: 0 = a free one)");
DEFINE_double(duration, 0, "Server: stop after this many seconds; 0 = at SIGINT/SIGTERM only");
DEFINE_int32(server_workers, 1, "rdmarpc server worker threads");
DEFINE_int32(engine_threads, 1, "rdmarpc client: completion (engine) threads per channel");
DEFINE_int64(connect_timeout_ms, 5000, "Client: time allowed to connect, in ms");
DEFINE_string(modes, "latency,rate,bandwidth,budget", "Client: workloads to run");
DEFINE_string(sizes, "32,256,4096,65536,1048576,16777216",
              "Latency: payload sizes in bytes, one call at a time");
DEFINE_int64(latency_calls, 10000, "Latency: at most this many timed calls per size");
DEFINE_double(latency_seconds, 2.0,
              "Latency: time budget per size and system, in s (stops before --latency_calls)");
DEFINE_int64(warmup_calls, 20, "Untimed calls before each latency size (connect, pools)");
DEFINE_int64(rate_size, 32, "Rate: payload bytes");
DEFINE_int32(concurrency, 32, "Rate: calls in flight per client channel (async API)");
DEFINE_int32(threads, 1,
             "Rate: client channels, each keeping --concurrency calls in flight from its own "
             "completion thread (rdmarpc: the channel's engine; gRPC: its callback executor)");
DEFINE_double(rate_seconds, 3.0, "Rate: measured seconds (after --warmup_seconds)");
DEFINE_string(bandwidth_sizes, "1048576,16777216", "Bandwidth: payload sizes in bytes");
DEFINE_int32(bandwidth_concurrency, 4, "Bandwidth: calls in flight");
DEFINE_double(bandwidth_seconds, 3.0, "Bandwidth: measured seconds per size");
DEFINE_double(warmup_seconds, 0.5,
              "Rate and bandwidth: untimed seconds before measuring (and until every "
              "client has finished a call)");
DEFINE_string(budget_runs, "32x1,32x32,1048576x1",
              "Budget (rdmarpc only): SIZExIN_FLIGHT runs, each of --budget_calls calls");
DEFINE_int64(budget_calls, 2000, "Budget: calls per run");
DEFINE_string(json_out, "", "Client: write the results as JSON to this file");
DEFINE_string(plot_dir, "",
              "Client: write gnuplot data (latency.dat, rate.dat, bandwidth.dat) here");

namespace rdmarpc {
namespace rpcbench {
namespace {

constexpr size_t kMaxPayloadBytes = 64 * 1024 * 1024 - 4096;  // rdmarpc's max_message_bytes

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- flags ------------------------------------------------------------------------------

absl::StatusOr<std::vector<std::string>> ParseList(const std::string& flag, const std::string& text,
                                                   const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": unknown '", item,
                                                     "', expected one of ",
                                                     absl::StrJoin(allowed, ",")));
    }
    out.emplace_back(item);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<size_t> ParseSize(const std::string& flag, absl::string_view text) {
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(text, &bytes) || bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text,
                                                   "' is not a size in bytes from 0 to ",
                                                   kMaxPayloadBytes));
  }
  return static_cast<size_t>(bytes);
}

absl::StatusOr<std::vector<size_t>> ParseSizes(const std::string& flag, const std::string& text) {
  std::vector<size_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<size_t> size = ParseSize(flag, item);
    if (!size.ok()) return size.status();
    out.push_back(*size);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

struct BudgetRun {
  size_t size_bytes = 0;
  int in_flight = 1;
};

absl::StatusOr<std::vector<BudgetRun>> ParseBudgetRuns(const std::string& text) {
  std::vector<BudgetRun> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, 'x');
    BudgetRun run;
    absl::StatusOr<size_t> size =
        parts.size() == 2 ? ParseSize("budget_runs", parts[0])
                          : absl::InvalidArgumentError("--budget_runs: want SIZExIN_FLIGHT");
    if (!size.ok()) return size.status();
    run.size_bytes = *size;
    if (!absl::SimpleAtoi(parts[1], &run.in_flight) || run.in_flight < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budget_runs: '", item, "' needs SIZExIN_FLIGHT with IN_FLIGHT >= 1"));
    }
    out.push_back(run);
  }
  if (out.empty()) return absl::InvalidArgumentError("--budget_runs is empty");
  return out;
}

// ---- payloads and percentiles -------------------------------------------------------------

EchoRequest MakeRequest(size_t size) {
  EchoRequest request;
  std::string payload(size, '\0');
  // Not constant, so a reply from a shifted or stale buffer cannot match.
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>((i * 131 + 7) >> 3);
  request.set_payload(std::move(payload));
  return request;
}

// Nearest-rank percentile of sorted samples, p in (0, 1].
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

// ---- results ------------------------------------------------------------------------------

struct LatencyResult {
  size_t size_bytes = 0;
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, mean_us = 0;
};

struct ThroughputResult {
  size_t size_bytes = 0;
  int threads = 1;
  int in_flight_per_thread = 1;
  uint64_t calls = 0;
  double seconds = 0;
  double rpc_per_s = 0;
  double gb_per_s = 0;  // request + response payload bytes, 10^9 B/s
};

struct BudgetResult {
  size_t size_bytes = 0;
  int in_flight = 1;
  uint64_t calls = 0;
  VerbsCounters client, server;  // differences over the run
};

struct SystemResults {
  std::string system;
  std::vector<LatencyResult> latency;
  std::optional<ThroughputResult> rate;
  std::vector<ThroughputResult> bandwidth;
  std::vector<BudgetResult> budget;
  std::string budget_note;  // why there is no budget, when there is none
};

// ---- workloads ----------------------------------------------------------------------------

// One call at a time, blocking, for each size: --warmup_calls untimed, then
// up to --latency_calls timed or --latency_seconds, whichever ends first.
absl::StatusOr<LatencyResult> MeasureLatency(EchoClient& client, size_t size) {
  EchoRequest request = MakeRequest(size);
  EchoResponse response;
  for (int64_t i = 0; i < FLAGS_warmup_calls; ++i) {
    absl::Status status = client.Echo(request, &response);
    if (!status.ok()) return status;
  }
  std::vector<double> samples_us;
  samples_us.reserve(static_cast<size_t>(std::min<int64_t>(FLAGS_latency_calls, 1 << 20)));
  const Clock::time_point begin = Clock::now();
  while (static_cast<int64_t>(samples_us.size()) < FLAGS_latency_calls &&
         (samples_us.empty() || SecondsSince(begin) < FLAGS_latency_seconds)) {
    response.Clear();
    const Clock::time_point start = Clock::now();
    absl::Status status = client.Echo(request, &response);
    const Clock::time_point end = Clock::now();
    if (!status.ok()) return status;
    if (response.payload() != request.payload()) {
      return absl::DataLossError(absl::StrCat("echo of ", size, " bytes came back as ",
                                              response.payload().size(), " different bytes"));
    }
    samples_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  LatencyResult r;
  r.size_bytes = size;
  r.calls = samples_us.size();
  double sum = 0;
  for (double s : samples_us) sum += s;
  std::sort(samples_us.begin(), samples_us.end());
  r.p50_us = Percentile(samples_us, 0.50);
  r.p99_us = Percentile(samples_us, 0.99);
  r.p999_us = Percentile(samples_us, 0.999);
  r.max_us = samples_us.back();
  r.mean_us = sum / static_cast<double>(samples_us.size());
  return r;
}

// Keeps `in_flight` calls of `size` bytes going on one client with the async
// API: each completion starts the next call from the completion thread (a
// closed loop), until Stop() or `max_calls` calls were started.
class ClosedLoop {
 public:
  ClosedLoop(EchoClient* client, size_t size, int in_flight, uint64_t max_calls)
      : client_(client), max_calls_(max_calls), slots_(static_cast<size_t>(in_flight)) {
    for (Slot& slot : slots_) slot.request = MakeRequest(size);
  }
  // Waits for the last Done() to leave mu_ (as absl::Notification's
  // destructor does): Wait() can return while it is still unlocking.
  ~ClosedLoop() { absl::MutexLock lock(&mu_); }

  void Start() {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!Issue(i)) break;
    }
  }
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }

  // Waits until no call is in flight (after Stop or max_calls); returns the
  // first failure.
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
    return first_error_;
  }

 private:
  struct Slot {
    EchoRequest request;
    EchoResponse response;
  };

  // Starts a call on slot i unless stopped or out of calls; false when not.
  bool Issue(size_t i) {
    if (stop_.load(std::memory_order_relaxed) ||
        started_.fetch_add(1, std::memory_order_relaxed) >= max_calls_) {
      return false;
    }
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    slots_[i].response.Clear();
    client_->AsyncEcho(slots_[i].request, &slots_[i].response,
                       [this, i](absl::Status status) { Done(i, std::move(status)); });
    return true;
  }

  void Done(size_t i, absl::Status status) {
    if (status.ok() && slots_[i].response.payload().size() != slots_[i].request.payload().size()) {
      status = absl::DataLossError(absl::StrCat("sent ", slots_[i].request.payload().size(),
                                                " bytes, echo has ",
                                                slots_[i].response.payload().size()));
    }
    if (status.ok()) {
      completed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      stop_.store(true, std::memory_order_relaxed);
      absl::MutexLock lock(&mu_);
      if (first_error_.ok()) first_error_ = status;
    }
    Issue(i);
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  EchoClient* const client_;
  const uint64_t max_calls_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// `clients.size()` clients (each with its own channel and completion thread),
// each keeping `in_flight` calls of `size` bytes going; counts completions over
// `seconds` after `warmup` seconds.
absl::StatusOr<ThroughputResult> MeasureThroughput(const std::vector<EchoClient*>& clients,
                                                   size_t size, int in_flight, double seconds) {
  std::vector<std::unique_ptr<ClosedLoop>> loops;
  for (EchoClient* client : clients) {
    loops.push_back(std::make_unique<ClosedLoop>(client, size, in_flight,
                                                 std::numeric_limits<uint64_t>::max()));
  }
  auto total = [&loops] {
    uint64_t n = 0;
    for (auto& loop : loops) n += loop->completed();
    return n;
  };
  // The completion threads carry the loops; this thread only starts them.
  for (auto& loop : loops) loop->Start();
  absl::SleepFor(absl::Seconds(FLAGS_warmup_seconds));
  // The warm-up also lasts until every client finished a call (connection
  // set-up, rendezvous pools growing), up to 10 s more; a failed loop has
  // stopped and its error shows at Wait below.
  const Clock::time_point warm_limit = Clock::now() + std::chrono::seconds(10);
  for (auto& loop : loops) {
    while (loop->completed() == 0 && !loop->stopped() && Clock::now() < warm_limit) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  const uint64_t before = total();
  const Clock::time_point begin = Clock::now();
  absl::SleepFor(absl::Seconds(seconds));
  const uint64_t after = total();
  const double elapsed = SecondsSince(begin);
  absl::Status status;
  for (auto& loop : loops) loop->Stop();
  for (auto& loop : loops) {
    absl::Status s = loop->Wait();
    if (status.ok()) status = s;
  }
  if (!status.ok()) return status;
  ThroughputResult r;
  r.size_bytes = size;
  r.threads = static_cast<int>(clients.size());
  r.in_flight_per_thread = in_flight;
  r.calls = after - before;
  r.seconds = elapsed;
  r.rpc_per_s = static_cast<double>(r.calls) / elapsed;
  r.gb_per_s = r.rpc_per_s * 2.0 * static_cast<double>(size) / 1e9;
  return r;
}

// --budget_calls calls with run.in_flight in flight; the counters of both
// processes are read just before and after. The two GetStats calls add one
// request/response each to the window (1 message in budget_calls).
absl::StatusOr<BudgetResult> MeasureBudget(EchoClient& client, const BudgetRun& run) {
  // Warm up first, so connection set-up and pool growth are not counted.
  {
    EchoRequest request = MakeRequest(run.size_bytes);
    EchoResponse response;
    for (int i = 0; i < 10; ++i) {
      absl::Status status = client.Echo(request, &response);
      if (!status.ok()) return status;
    }
  }
  absl::StatusOr<VerbsCounters> server_before = client.ServerCounters();
  if (!server_before.ok()) return server_before.status();
  const VerbsCounters client_before = LocalCounters();
  const uint64_t calls = static_cast<uint64_t>(FLAGS_budget_calls);
  if (run.in_flight == 1) {
    EchoRequest request = MakeRequest(run.size_bytes);
    EchoResponse response;
    for (uint64_t i = 0; i < calls; ++i) {
      absl::Status status = client.Echo(request, &response);
      if (!status.ok()) return status;
    }
  } else {
    ClosedLoop loop(&client, run.size_bytes, run.in_flight, calls);
    loop.Start();
    absl::Status status = loop.Wait();
    if (!status.ok()) return status;
  }
  const VerbsCounters client_after = LocalCounters();
  absl::StatusOr<VerbsCounters> server_after = client.ServerCounters();
  if (!server_after.ok()) return server_after.status();
  BudgetResult r;
  r.size_bytes = run.size_bytes;
  r.in_flight = run.in_flight;
  r.calls = calls;
  r.client = client_after - client_before;
  r.server = *server_after - *server_before;
  return r;
}

// ---- one system ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<EchoClient>> NewClient(const std::string& system) {
  ClientConfig config;
  config.connect_timeout_ms = FLAGS_connect_timeout_ms;
  config.engine_threads = FLAGS_engine_threads;
  if (system == "rdmarpc") {
    config.address = absl::StrCat(FLAGS_host, ":", FLAGS_port);
    return NewRdmarpcClient(config);
  }
  config.address = absl::StrCat(FLAGS_host, ":", FLAGS_grpc_port);
  return NewGrpcClient(config);
}

bool Has(const std::vector<std::string>& list, absl::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

absl::StatusOr<SystemResults> RunSystem(const std::string& system,
                                        const std::vector<std::string>& modes,
                                        const std::vector<size_t>& sizes,
                                        const std::vector<size_t>& bandwidth_sizes,
                                        const std::vector<BudgetRun>& budget_runs) {
  SystemResults results;
  results.system = system;
  auto fail = [&system](absl::string_view what, const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(system, " ", what, ": ", status.message()));
  };
  // Clients (each with its own channel) are reused across workloads and
  // never destroyed before exit for gRPC: gRPC 1.51 (Debian) double-frees
  // in grpc_cq_internal_unref once the last channel that used the callback
  // API is gone — when another channel later uses it (seen under ASan) and
  // at exit (glibc "double free detected"). main() ends with _exit then.
  std::vector<std::unique_ptr<EchoClient>> pool;
  auto clients = [&](int n) -> absl::StatusOr<std::vector<EchoClient*>> {
    while (static_cast<int>(pool.size()) < n) {
      absl::StatusOr<std::unique_ptr<EchoClient>> c = NewClient(system);
      if (!c.ok()) return fail("client", c.status());
      pool.push_back(*std::move(c));
    }
    std::vector<EchoClient*> out;
    for (int i = 0; i < n; ++i) out.push_back(pool[static_cast<size_t>(i)].get());
    return out;
  };
  absl::StatusOr<std::vector<EchoClient*>> first = clients(1);
  if (!first.ok()) return first.status();
  EchoClient* const client = (*first)[0];
  if (Has(modes, "latency")) {
    for (size_t size : sizes) {
      fprintf(stderr, "rpc_bench: %s latency %zu B\n", system.c_str(), size);
      absl::StatusOr<LatencyResult> r = MeasureLatency(*client, size);
      if (!r.ok()) return fail(absl::StrCat("latency ", size, " B"), r.status());
      results.latency.push_back(*r);
    }
  }
  if (Has(modes, "rate")) {
    fprintf(stderr, "rpc_bench: %s rate %ld B x %d in flight x %d threads\n", system.c_str(),
            static_cast<long>(FLAGS_rate_size), FLAGS_concurrency, FLAGS_threads);
    absl::StatusOr<std::vector<EchoClient*>> rate_clients = clients(FLAGS_threads);
    if (!rate_clients.ok()) return rate_clients.status();
    absl::StatusOr<ThroughputResult> r =
        MeasureThroughput(*rate_clients, static_cast<size_t>(FLAGS_rate_size), FLAGS_concurrency,
                          FLAGS_rate_seconds);
    if (!r.ok()) return fail("rate", r.status());
    results.rate = *r;
  }
  if (Has(modes, "bandwidth")) {
    for (size_t size : bandwidth_sizes) {
      fprintf(stderr, "rpc_bench: %s bandwidth %zu B x %d in flight\n", system.c_str(), size,
              FLAGS_bandwidth_concurrency);
      absl::StatusOr<ThroughputResult> r =
          MeasureThroughput({client}, size, FLAGS_bandwidth_concurrency, FLAGS_bandwidth_seconds);
      if (!r.ok()) return fail(absl::StrCat("bandwidth ", size, " B"), r.status());
      results.bandwidth.push_back(*r);
    }
  }
  if (Has(modes, "budget")) {
    if (system != "rdmarpc") {
      results.budget_note = "no verbs: gRPC runs over TCP sockets";
    } else {
      for (const BudgetRun& run : budget_runs) {
        fprintf(stderr, "rpc_bench: %s budget %zu B x %d in flight\n", system.c_str(),
                run.size_bytes, run.in_flight);
        absl::StatusOr<BudgetResult> r = MeasureBudget(*client, run);
        if (!r.ok()) return fail("budget", r.status());
        if (r->client.post_send_calls == 0) {
          // softrdma counts; rdma-core has no such counters.
          results.budget_note = "the provider is not softrdma: no verbs counters";
          break;
        }
        results.budget.push_back(*r);
      }
    }
  }
  if (system == "grpc") {
    static auto* const kept = new std::vector<std::unique_ptr<EchoClient>>();
    for (auto& c : pool) kept->push_back(std::move(c));
  }
  return results;
}

// ---- output -------------------------------------------------------------------------------

std::string SizeLabel(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= 1024 && bytes % 1024 == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

// One row of the comparison: a figure, its unit, and each system's value.
struct Figure {
  std::string key;    // JSON key of the ratio, e.g. "latency_32_B_p50"
  std::string label;  // table row
  std::string unit;
  std::map<std::string, double> value;  // by system
};

std::vector<Figure> Figures(const std::vector<SystemResults>& all) {
  std::vector<Figure> figures;
  auto find = [&figures](const std::string& key) -> Figure* {
    for (Figure& f : figures) {
      if (f.key == key) return &f;
    }
    return nullptr;
  };
  auto add = [&](const std::string& key, const std::string& label, const std::string& unit,
                 const std::string& system, double v) {
    Figure* f = find(key);
    if (f == nullptr) {
      figures.push_back(Figure{key, label, unit, {}});
      f = &figures.back();
    }
    f->value[system] = v;
  };
  for (const SystemResults& s : all) {
    for (const LatencyResult& l : s.latency) {
      std::string size = absl::StrCat("latency_", l.size_bytes, "_B_");
      std::string label = absl::StrCat("latency ", SizeLabel(l.size_bytes), " ");
      add(size + "p50", label + "p50", "us", s.system, l.p50_us);
      add(size + "p99", label + "p99", "us", s.system, l.p99_us);
      add(size + "p999", label + "p99.9", "us", s.system, l.p999_us);
      add(size + "max", label + "max", "us", s.system, l.max_us);
    }
    if (s.rate) {
      add("rate_rpc_per_s",
          absl::StrCat("rate ", SizeLabel(s.rate->size_bytes), " x", s.rate->in_flight_per_thread,
                       " x", s.rate->threads, "thr"),
          "RPC/s", s.system, s.rate->rpc_per_s);
    }
    for (const ThroughputResult& b : s.bandwidth) {
      add(absl::StrCat("bandwidth_", b.size_bytes, "_B_gb_per_s"),
          absl::StrCat("bandwidth ", SizeLabel(b.size_bytes), " x", b.in_flight_per_thread),
          "GB/s", s.system, b.gb_per_s);
    }
  }
  return figures;
}

std::string Num(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

double PerCall(uint64_t count, uint64_t calls) {
  return calls == 0 ? 0 : static_cast<double>(count) / static_cast<double>(calls);
}

void PrintTable(const std::vector<SystemResults>& all, const std::vector<Figure>& figures) {
  const bool both = all.size() == 2;
  printf("\n%-30s %-6s", "figure", "unit");
  for (const SystemResults& s : all) printf(" %14s", s.system.c_str());
  if (both) printf(" %16s", absl::StrCat(all[0].system, "/", all[1].system).c_str());
  printf("\n");
  for (const Figure& f : figures) {
    printf("%-30s %-6s", f.label.c_str(), f.unit.c_str());
    for (const SystemResults& s : all) {
      auto it = f.value.find(s.system);
      if (it == f.value.end()) {
        printf(" %14s", "-");
      } else {
        printf(" %14s", absl::StrFormat("%.2f", it->second).c_str());
      }
    }
    if (both) {
      auto a = f.value.find(all[0].system), b = f.value.find(all[1].system);
      if (a != f.value.end() && b != f.value.end() && b->second > 0) {
        printf(" %16s", absl::StrFormat("%.3f", a->second / b->second).c_str());
      } else {
        printf(" %16s", "-");
      }
    }
    printf("\n");
  }
  for (const SystemResults& s : all) {
    if (s.budget.empty()) continue;
    printf("\n%s verbs budget per call (client + server processes; 2 messages per call)\n",
           s.system.c_str());
    printf("%-16s %9s %9s %9s %9s %9s %9s %9s %7s %11s\n", "run", "post_send", "send_WRs",
           "signalled", "recv_WRs", "post_recv", "polled_WC", "poll_cq", "reg_mr", "copied_B");
    for (const BudgetResult& b : s.budget) {
      VerbsCounters t = b.client + b.server;
      printf("%-16s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f %7lu %11.1f\n",
             absl::StrCat(SizeLabel(b.size_bytes), " x", b.in_flight).c_str(),
             PerCall(t.post_send_calls, b.calls), PerCall(t.send_wrs(), b.calls),
             PerCall(t.signaled_sends, b.calls), PerCall(t.recv, b.calls),
             PerCall(t.post_recv_calls, b.calls), PerCall(t.wc_polled, b.calls),
             PerCall(t.poll_cq_calls, b.calls), static_cast<unsigned long>(t.reg_mr),
             PerCall(t.payload_bytes_copied, b.calls));
    }
  }
  for (const SystemResults& s : all) {
    if (!s.budget_note.empty()) printf("%s budget: %s\n", s.system.c_str(), s.budget_note.c_str());
  }
  fflush(stdout);
}

void AppendCounters(std::string* out, const VerbsCounters& c) {
  absl::StrAppend(out, "{\"send\": ", c.send, ", \"send_with_imm\": ", c.send_with_imm,
                  ", \"rdma_write\": ", c.rdma_write,
                  ", \"rdma_write_with_imm\": ", c.rdma_write_with_imm,
                  ", \"rdma_read\": ", c.rdma_read, ", \"recv\": ", c.recv,
                  ", \"post_send_calls\": ", c.post_send_calls,
                  ", \"post_recv_calls\": ", c.post_recv_calls,
                  ", \"signaled_sends\": ", c.signaled_sends, ", \"wc_polled\": ", c.wc_polled,
                  ", \"poll_cq_calls\": ", c.poll_cq_calls, ", \"reg_mr\": ", c.reg_mr,
                  ", \"rnr_retries\": ", c.rnr_retries,
                  ", \"payload_bytes_copied\": ", c.payload_bytes_copied, "}");
}

std::string Json(const std::vector<SystemResults>& all, const std::vector<Figure>& figures) {
  std::string out = "{\n  \"tool\": \"rpc_bench\",\n";
  absl::StrAppend(&out, "  \"time_utc\": \"",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()),
                  "\",\n");
  const char* provider = getenv("RDMARPC_PROVIDER");
  absl::StrAppend(&out, "  \"config\": {\"host\": \"", FLAGS_host, "\", \"rdmarpc_provider\": \"",
                  provider == nullptr ? "" : provider, "\", \"warmup_calls\": ",
                  FLAGS_warmup_calls, ", \"latency_calls_max\": ", FLAGS_latency_calls,
                  ", \"latency_seconds_max\": ", Num(FLAGS_latency_seconds),
                  ", \"rate_seconds\": ", Num(FLAGS_rate_seconds),
                  ", \"bandwidth_seconds\": ", Num(FLAGS_bandwidth_seconds),
                  ", \"warmup_seconds\": ", Num(FLAGS_warmup_seconds),
                  ", \"engine_threads\": ", FLAGS_engine_threads, "},\n");
  absl::StrAppend(&out, "  \"systems\": {");
  for (size_t i = 0; i < all.size(); ++i) {
    const SystemResults& s = all[i];
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    \"", s.system, "\": {\n");
    absl::StrAppend(&out, "      \"latency\": [");
    for (size_t j = 0; j < s.latency.size(); ++j) {
      const LatencyResult& l = s.latency[j];
      absl::StrAppend(&out, j == 0 ? "\n" : ",\n", "        {\"size_bytes\": ", l.size_bytes,
                      ", \"calls\": ", l.calls, ", \"p50_us\": ", Num(l.p50_us),
                      ", \"p99_us\": ", Num(l.p99_us), ", \"p999_us\": ", Num(l.p999_us),
                      ", \"max_us\": ", Num(l.max_us), ", \"mean_us\": ", Num(l.mean_us), "}");
    }
    absl::StrAppend(&out, "],\n");
    auto throughput = [&out](const ThroughputResult& t) {
      absl::StrAppend(&out, "{\"size_bytes\": ", t.size_bytes, ", \"threads\": ", t.threads,
                      ", \"in_flight_per_thread\": ", t.in_flight_per_thread,
                      ", \"calls\": ", t.calls, ", \"seconds\": ", Num(t.seconds),
                      ", \"rpc_per_s\": ", Num(t.rpc_per_s), ", \"gb_per_s\": ", Num(t.gb_per_s),
                      "}");
    };
    absl::StrAppend(&out, "      \"rate\": ");
    if (s.rate) {
      throughput(*s.rate);
    } else {
      absl::StrAppend(&out, "null");
    }
    absl::StrAppend(&out, ",\n      \"bandwidth\": [");
    for (size_t j = 0; j < s.bandwidth.size(); ++j) {
      absl::StrAppend(&out, j == 0 ? "\n        " : ",\n        ");
      throughput(s.bandwidth[j]);
    }
    absl::StrAppend(&out, "],\n      \"budget\": [");
    for (size_t j = 0; j < s.budget.size(); ++j) {
      const BudgetResult& b = s.budget[j];
      VerbsCounters t = b.client + b.server;
      const uint64_t messages = 2 * b.calls;
      absl::StrAppend(
          &out, j == 0 ? "\n" : ",\n", "        {\"size_bytes\": ", b.size_bytes,
          ", \"in_flight\": ", b.in_flight, ", \"calls\": ", b.calls,
          ",\n         \"post_send_calls_per_call\": ", Num(PerCall(t.post_send_calls, b.calls)),
          ", \"post_send_calls_per_message\": ", Num(PerCall(t.post_send_calls, messages)),
          ", \"send_wrs_per_call\": ", Num(PerCall(t.send_wrs(), b.calls)),
          ", \"signaled_sends_per_call\": ", Num(PerCall(t.signaled_sends, b.calls)),
          ", \"send_wrs_per_signaled_send\": ",
          t.signaled_sends == 0 ? "null" : Num(PerCall(t.send_wrs(), t.signaled_sends)),
          ",\n         \"recv_wrs_per_call\": ", Num(PerCall(t.recv, b.calls)),
          ", \"post_recv_calls_per_call\": ", Num(PerCall(t.post_recv_calls, b.calls)),
          ", \"recv_wrs_per_post_recv_call\": ",
          t.post_recv_calls == 0 ? "null" : Num(PerCall(t.recv, t.post_recv_calls)),
          ", \"completions_polled_per_call\": ", Num(PerCall(t.wc_polled, b.calls)),
          ", \"poll_cq_calls_per_call\": ", Num(PerCall(t.poll_cq_calls, b.calls)),
          ",\n         \"reg_mr_total\": ", t.reg_mr, ", \"rnr_retries_total\": ", t.rnr_retries,
          ", \"payload_bytes_copied_per_call\": ", Num(PerCall(t.payload_bytes_copied, b.calls)),
          ",\n         \"client\": ");
      AppendCounters(&out, b.client);
      absl::StrAppend(&out, ",\n         \"server\": ");
      AppendCounters(&out, b.server);
      absl::StrAppend(&out, "}");
    }
    absl::StrAppend(&out, "],\n      \"budget_note\": \"", s.budget_note, "\"\n    }");
  }
  absl::StrAppend(&out, "\n  },\n  \"ratios\": {");
  // rdmarpc/gRPC of every figure both measured: < 1 is better for
  // latencies, > 1 for rates.
  bool first = true;
  if (all.size() == 2) {
    for (const Figure& f : figures) {
      auto a = f.value.find(all[0].system), b = f.value.find(all[1].system);
      if (a == f.value.end() || b == f.value.end() || b->second <= 0) continue;
      absl::StrAppend(&out, first ? "\n    \"" : ",\n    \"", f.key, "\": ",
                      Num(a->second / b->second));
      first = false;
    }
    absl::StrAppend(&out, first ? "" : "\n  ");
  }
  absl::StrAppend(&out, "},\n  \"ratio_of\": \"",
                  all.size() == 2 ? absl::StrCat(all[0].system, "/", all[1].system) : "",
                  "\"\n}\n");
  return out;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  size_t n = fwrite(text.data(), 1, text.size(), f);
  int closed = fclose(f);
  if (n != text.size() || closed != 0) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

// gnuplot data files; "NaN" where a system has no value (gnuplot skips it).
absl::Status WritePlotData(const std::string& dir, const std::vector<SystemResults>& all) {
  auto value = [](const std::optional<double>& v) { return v ? Num(*v) : std::string("NaN"); };
  const SystemResults* r = nullptr;
  const SystemResults* g = nullptr;
  for (const SystemResults& s : all) (s.system == "rdmarpc" ? r : g) = &s;
  std::string latency = "# size_bytes rdmarpc_p50_us rdmarpc_p99_us grpc_p50_us grpc_p99_us\n";
  std::vector<size_t> sizes;
  for (const SystemResults& s : all) {
    for (const LatencyResult& l : s.latency) {
      if (std::find(sizes.begin(), sizes.end(), l.size_bytes) == sizes.end()) {
        sizes.push_back(l.size_bytes);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  auto lat = [](const SystemResults* s, size_t size, bool p99) -> std::optional<double> {
    if (s == nullptr) return std::nullopt;
    for (const LatencyResult& l : s->latency) {
      if (l.size_bytes == size) return p99 ? l.p99_us : l.p50_us;
    }
    return std::nullopt;
  };
  for (size_t size : sizes) {
    absl::StrAppend(&latency, size, " ", value(lat(r, size, false)), " ",
                    value(lat(r, size, true)), " ", value(lat(g, size, false)), " ",
                    value(lat(g, size, true)), "\n");
  }
  std::string rate = "# label rdmarpc_rpc_per_s grpc_rpc_per_s\n";
  auto rate_of = [](const SystemResults* s) -> std::optional<double> {
    if (s == nullptr || !s->rate) return std::nullopt;
    return s->rate->rpc_per_s;
  };
  const SystemResults* any = r != nullptr ? r : g;
  if (any != nullptr && any->rate) {
    absl::StrAppend(&rate, "\"", SizeLabel(any->rate->size_bytes), " x",
                    any->rate->in_flight_per_thread, "\" ", value(rate_of(r)), " ",
                    value(rate_of(g)), "\n");
  }
  std::string bandwidth = "# label rdmarpc_gb_per_s grpc_gb_per_s\n";
  auto bw = [](const SystemResults* s, size_t size) -> std::optional<double> {
    if (s == nullptr) return std::nullopt;
    for (const ThroughputResult& b : s->bandwidth) {
      if (b.size_bytes == size) return b.gb_per_s;
    }
    return std::nullopt;
  };
  if (any != nullptr) {
    for (const ThroughputResult& b : any->bandwidth) {
      absl::StrAppend(&bandwidth, "\"", SizeLabel(b.size_bytes), " x", b.in_flight_per_thread,
                      "\" ", value(bw(r, b.size_bytes)), " ", value(bw(g, b.size_bytes)), "\n");
    }
  }
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"latency.dat", latency},
                                   {"rate.dat", rate},
                                   {"bandwidth.dat", bandwidth}}) {
    absl::Status status = WriteFile(absl::StrCat(dir, "/", name), text);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// ---- modes --------------------------------------------------------------------------------

int BadFlag(const absl::Status& status) {
  fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
  return 2;
}

int RunServer(const std::vector<std::string>& systems) {
  // Block the stop signals before any thread starts, so every thread
  // inherits the mask and only sigtimedwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::vector<std::unique_ptr<EchoServer>> servers;
  for (const std::string& system : systems) {
    absl::StatusOr<std::unique_ptr<EchoServer>> server =
        system == "rdmarpc" ? StartRdmarpcServer(FLAGS_host, FLAGS_port, FLAGS_server_workers)
                            : StartGrpcServer(FLAGS_host, FLAGS_grpc_port);
    if (!server.ok()) {
      fprintf(stderr, "rpc_bench: %s server: %s\n", system.c_str(),
              server.status().ToString().c_str());
      return 1;
    }
    printf("listening on %s:%d system=%s\n", FLAGS_host.c_str(), (*server)->port(),
           system.c_str());
    servers.push_back(*std::move(server));
  }
  fflush(stdout);
  if (FLAGS_duration > 0) {
    timespec timeout;
    timeout.tv_sec = static_cast<time_t>(FLAGS_duration);
    timeout.tv_nsec = static_cast<long>((FLAGS_duration - static_cast<double>(timeout.tv_sec)) * 1e9);
    // EAGAIN when the time is up; EINTR cannot stop us early for long.
    while (sigtimedwait(&stop_signals, nullptr, &timeout) < 0 && errno == EINTR) {
    }
  } else {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
  }
  servers.clear();  // shuts each down and joins its threads
  fprintf(stderr, "rpc_bench: server stopped\n");
  return 0;
}

int RunClient(std::vector<std::string> systems) {
  absl::StatusOr<std::vector<std::string>> modes =
      ParseList("modes", FLAGS_modes, {"latency", "rate", "bandwidth", "budget"});
  if (!modes.ok()) return BadFlag(modes.status());
  absl::StatusOr<std::vector<size_t>> sizes = ParseSizes("sizes", FLAGS_sizes);
  if (!sizes.ok()) return BadFlag(sizes.status());
  absl::StatusOr<std::vector<size_t>> bandwidth_sizes =
      ParseSizes("bandwidth_sizes", FLAGS_bandwidth_sizes);
  if (!bandwidth_sizes.ok()) return BadFlag(bandwidth_sizes.status());
  absl::StatusOr<std::vector<BudgetRun>> budget_runs = ParseBudgetRuns(FLAGS_budget_runs);
  if (!budget_runs.ok()) return BadFlag(budget_runs.status());
  if (FLAGS_latency_calls < 1 || FLAGS_budget_calls < 1 || FLAGS_concurrency < 1 ||
      FLAGS_threads < 1 || FLAGS_bandwidth_concurrency < 1 || FLAGS_warmup_calls < 0 ||
      FLAGS_rate_seconds <= 0 || FLAGS_bandwidth_seconds <= 0 || FLAGS_latency_seconds <= 0 ||
      FLAGS_warmup_seconds < 0 || FLAGS_rate_size < 0 ||
      static_cast<uint64_t>(FLAGS_rate_size) > kMaxPayloadBytes) {
    return BadFlag(absl::InvalidArgumentError(absl::StrFormat(
        "need --latency_calls >= 1 (%d), --budget_calls >= 1 (%d), --concurrency >= 1 (%d), "
        "--threads >= 1 (%d), --bandwidth_concurrency >= 1 (%d), --warmup_calls >= 0 (%d), "
        "--rate_seconds, --bandwidth_seconds, --latency_seconds > 0 (%g, %g, %g), "
        "--warmup_seconds >= 0 (%g), 0 <= --rate_size <= %d (%d)",
        FLAGS_latency_calls, FLAGS_budget_calls, FLAGS_concurrency, FLAGS_threads,
        FLAGS_bandwidth_concurrency, FLAGS_warmup_calls, FLAGS_rate_seconds,
        FLAGS_bandwidth_seconds, FLAGS_latency_seconds, FLAGS_warmup_seconds,
        kMaxPayloadBytes, FLAGS_rate_size)));
  }
  std::vector<SystemResults> all;
  for (const std::string& system : systems) {
    if (system == "rdmarpc" && FLAGS_port <= 0) {
      return BadFlag(absl::InvalidArgumentError(
          absl::StrCat("--port must name the rdmarpc server's port, got ", FLAGS_port)));
    }
    if (system == "grpc" && FLAGS_grpc_port <= 0) {
      return BadFlag(absl::InvalidArgumentError(
          absl::StrCat("--grpc_port must name the gRPC server's port, got ", FLAGS_grpc_port)));
    }
    absl::StatusOr<SystemResults> results =
        RunSystem(system, *modes, *sizes, *bandwidth_sizes, *budget_runs);
    if (!results.ok()) {
      fprintf(stderr, "rpc_bench: %s\n", results.status().ToString().c_str());
      return 1;
    }
    all.push_back(*std::move(results));
  }
  std::vector<Figure> figures = Figures(all);
  PrintTable(all, figures);
  if (!FLAGS_json_out.empty()) {
    absl::Status status = WriteFile(FLAGS_json_out, Json(all, figures));
    if (!status.ok()) {
      fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  if (!FLAGS_plot_dir.empty()) {
    absl::Status status = WritePlotData(FLAGS_plot_dir, all);
    if (!status.ok()) {
      fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace rpcbench
}  // namespace rdmarpc

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "rpc_bench --mode=server|client [--systems=rdmarpc,grpc] [--host=H] [--port=P] "
      "[--grpc_port=Q] ... (see bench/README.md)");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  using namespace rdmarpc::rpcbench;  // NOLINT: main only

  absl::StatusOr<std::vector<std::string>> systems =
      ParseList("systems", FLAGS_systems, {"rdmarpc", "grpc"});
  if (!systems.ok()) return BadFlag(systems.status());
  if (!HaveGrpc() && Has(*systems, "grpc")) {
    fprintf(stderr, "rpc_bench: built without gRPC; measuring rdmarpc only\n");
    systems->erase(std::find(systems->begin(), systems->end(), "grpc"));
    if (systems->empty()) return BadFlag(absl::InvalidArgumentError("--systems=grpc, no gRPC"));
  }
  if (FLAGS_mode == "server") return RunServer(*systems);
  if (FLAGS_mode == "client") {
    const int rc = RunClient(*systems);
    if (Has(*systems, "grpc")) {
      // Skip exit-time destruction, where gRPC 1.51 double-frees its
      // callback completion queue (see RunSystem); outputs are complete.
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    return rc;
  }
  return BadFlag(absl::InvalidArgumentError(
      absl::StrCat("--mode must be server or client, got '", FLAGS_mode, "'")));
}
