// rpc_bench: latency, message rate, bandwidth and per-call verbs budget of
// an Echo(bytes) RPC over rdmarpc, and the same workload over gRPC; and,
// over rdmarpc only, messages/s on one server-streaming stream and small
// calls' latency next to 64 MiB calls on one connection.
//
//   rpc_bench --mode=server [--systems=rdmarpc,grpc] [--host=127.0.0.1]
//             [--port=0] [--grpc_port=0] [--duration=0]
//   rpc_bench --mode=client --port=P [--grpc_port=Q] [--systems=rdmarpc,grpc]
//             [--modes=latency,rate,bandwidth,budget,stream,mixed] [--json_out=FILE]
//
// The server prints one line per system, "listening on HOST:PORT system=S",
// and serves until SIGINT/SIGTERM or --duration seconds. The client measures
// each system in turn, prints a table (with the ratio rdmarpc/gRPC of every
// figure when both ran) and writes JSON whose field names carry units
// (p50_us, rpc_per_s, gb_per_s). See bench/README.md for what each figure
// means. Exit status: 0 done, 1 a call or setup failed (the message says
// which), 2 bad flags.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/rpc/echo_system.h"
#include "bench/rpc/parse.h"
#include "bench/rpc/report.h"
#include "bench/rpc/results.h"
#include "bench/rpc/workloads.h"
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
DEFINE_string(server_receive_queue, "shared",
              "rdmarpc server's ServerOptions::receive_queue: shared | per-connection");
DEFINE_int32(engine_threads, 1, "rdmarpc client: completion (engine) threads per channel");
DEFINE_string(client_receive_queue, "per-connection",
              "rdmarpc client's ChannelOptions::receive_queue: per-connection | shared");
DEFINE_int64(connect_timeout_ms, 5000, "Client: time allowed to connect, in ms");
DEFINE_string(modes, "latency,rate,bandwidth,budget,stream,mixed",
              "Client: workloads to run (stream and mixed: rdmarpc only)");
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
DEFINE_bool(bandwidth_buffer, true,
            "Bandwidth (rdmarpc only): also echo each size as an rdmarpc::Buffer attachment "
            "beside an empty message");
DEFINE_double(warmup_seconds, 0.5,
              "Rate and bandwidth: untimed seconds before measuring (and until every "
              "client has finished a call)");
DEFINE_string(budget_runs, "32x1,32x32,1048576x1",
              "Budget (rdmarpc only): SIZExIN_FLIGHT runs, each of --budget_calls calls");
DEFINE_int64(budget_calls, 2000, "Budget: calls per run");
DEFINE_string(stream_sizes, "32,4096", "Stream (rdmarpc only): message payload sizes in bytes");
DEFINE_int64(stream_messages, 200000, "Stream: messages per stream (one run)");
DEFINE_int32(stream_runs, 3, "Stream: runs per size, one stream each; the median run is reported");
DEFINE_int64(mixed_small_size, 32, "Mixed (rdmarpc only): the small calls' payload bytes");
DEFINE_int64(mixed_large_size, 64 << 20, "Mixed: the large calls' payload bytes");
DEFINE_int64(mixed_calls, 10000, "Mixed: at most this many timed small calls per phase");
DEFINE_double(mixed_seconds, 2.0,
              "Mixed: time budget of each phase's small calls (alone, then loaded), in s");
DEFINE_int32(server_pid, 0,
             "Client: the server process's pid on this host, whose CPU time (from "
             "/proc/<pid>/stat) the CPU/call figures add; 0 = unknown: client CPU only");
DEFINE_string(json_out, "", "Client: write the results as JSON to this file");
DEFINE_string(plot_dir, "",
              "Client: write gnuplot data (latency.dat, rate.dat, bandwidth.dat) here");

namespace rdmarpc {
namespace rpcbench {
namespace {

// ---- one system ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<EchoClient>> NewClient(const std::string& system) {
  ClientConfig config;
  config.connect_timeout_ms = FLAGS_connect_timeout_ms;
  config.engine_threads = FLAGS_engine_threads;
  config.shared_receive_queue = FLAGS_client_receive_queue == "shared";
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
                                        const std::vector<BudgetRun>& budget_runs,
                                        const std::vector<size_t>& stream_sizes) {
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
    LatencyOptions latency_options;
    latency_options.warmup_calls = FLAGS_warmup_calls;
    latency_options.max_calls = FLAGS_latency_calls;
    latency_options.max_seconds = FLAGS_latency_seconds;
    for (size_t size : sizes) {
      fprintf(stderr, "rpc_bench: %s latency %zu B\n", system.c_str(), size);
      absl::StatusOr<LatencyResult> r = MeasureLatency(*client, size, latency_options);
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
                          FLAGS_rate_seconds, FLAGS_warmup_seconds);
    if (!r.ok()) return fail("rate", r.status());
    results.rate = *r;
  }
  if (Has(modes, "bandwidth")) {
    for (size_t size : bandwidth_sizes) {
      fprintf(stderr, "rpc_bench: %s bandwidth %zu B x %d in flight\n", system.c_str(), size,
              FLAGS_bandwidth_concurrency);
      absl::StatusOr<ThroughputResult> r =
          MeasureThroughput({client}, size, FLAGS_bandwidth_concurrency, FLAGS_bandwidth_seconds,
                            FLAGS_warmup_seconds);
      if (!r.ok()) return fail(absl::StrCat("bandwidth ", size, " B"), r.status());
      results.bandwidth.push_back(*r);
    }
    // The same echoes with the payload as an rdmarpc::Buffer attachment:
    // moved by RDMA READ between the two users' buffers (rdmarpc only).
    for (size_t size : bandwidth_sizes) {
      if (system != "rdmarpc" || !FLAGS_bandwidth_buffer) break;
      fprintf(stderr, "rpc_bench: %s bandwidth %zu B x %d in flight, Buffer attachments\n",
              system.c_str(), size, FLAGS_bandwidth_concurrency);
      absl::StatusOr<ThroughputResult> r =
          MeasureThroughput({client}, size, FLAGS_bandwidth_concurrency, FLAGS_bandwidth_seconds,
                            FLAGS_warmup_seconds, /*buffer_payload=*/true);
      if (!r.ok()) return fail(absl::StrCat("bandwidth ", size, " B Buffer"), r.status());
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
        absl::StatusOr<BudgetResult> r = MeasureBudget(*client, run, static_cast<uint64_t>(FLAGS_budget_calls));
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
  const bool streaming = Has(modes, "stream") || Has(modes, "mixed");
  if (streaming && system != "rdmarpc") {
    results.streaming_note = "n/a (rdmarpc only: the gRPC peer has no Stream method)";
  } else if (streaming) {
    for (size_t size : stream_sizes) {
      if (!Has(modes, "stream")) break;
      fprintf(stderr, "rpc_bench: %s stream %zu B x %ld messages x %d runs\n", system.c_str(),
              size, static_cast<long>(FLAGS_stream_messages), FLAGS_stream_runs);
      absl::StatusOr<StreamResult> r =
          MeasureStream(*client, size, static_cast<uint64_t>(FLAGS_stream_messages),
                        FLAGS_stream_runs);
      if (!r.ok()) return fail(absl::StrCat("stream ", size, " B"), r.status());
      results.stream.push_back(*r);
    }
    if (Has(modes, "mixed")) {
      fprintf(stderr, "rpc_bench: %s mixed %ld B calls next to %ld B calls, one connection\n",
              system.c_str(), static_cast<long>(FLAGS_mixed_small_size),
              static_cast<long>(FLAGS_mixed_large_size));
      // A channel of its own: one connection, and a limit that lets a
      // 64 MiB payload through (the server's is kLargeMessageBytes too).
      ClientConfig config;
      config.address = absl::StrCat(FLAGS_host, ":", FLAGS_port);
      config.connect_timeout_ms = FLAGS_connect_timeout_ms;
      config.engine_threads = FLAGS_engine_threads;
      config.pool_size = 1;
      config.shared_receive_queue = FLAGS_client_receive_queue == "shared";
      config.max_message_bytes = kLargeMessageBytes;
      absl::StatusOr<std::unique_ptr<EchoClient>> mixed_client = NewRdmarpcClient(config);
      if (!mixed_client.ok()) return fail("mixed client", mixed_client.status());
      MixedOptions options;
      options.small_size = static_cast<size_t>(FLAGS_mixed_small_size);
      options.large_size = static_cast<size_t>(FLAGS_mixed_large_size);
      options.small.warmup_calls = FLAGS_warmup_calls;
      options.small.max_calls = FLAGS_mixed_calls;
      options.small.max_seconds = FLAGS_mixed_seconds;
      absl::StatusOr<MixedResult> r = MeasureMixed(**mixed_client, options);
      if (!r.ok()) return fail("mixed", r.status());
      r->pool_size = config.pool_size;
      results.mixed = *r;
    }
  }
  if (system == "grpc") {
    static auto* const kept = new std::vector<std::unique_ptr<EchoClient>>();
    for (auto& c : pool) kept->push_back(std::move(c));
  }
  return results;
}

// ---- modes --------------------------------------------------------------------------------

int BadFlag(const absl::Status& status) {
  fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
  return 2;
}

int RunServer(const std::vector<std::string>& systems) {
  if (FLAGS_duration < 0) {
    return BadFlag(absl::InvalidArgumentError(absl::StrFormat(
        "--duration must be >= 0 seconds (0 = until SIGINT/SIGTERM), got %g", FLAGS_duration)));
  }
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
        system == "rdmarpc" ? StartRdmarpcServer(FLAGS_host, FLAGS_port, FLAGS_server_workers,
                                                 FLAGS_server_receive_queue == "shared")
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
  if (FLAGS_connect_timeout_ms < 1) {
    return BadFlag(absl::InvalidArgumentError(absl::StrCat(
        "--connect_timeout_ms must be >= 1, got ", FLAGS_connect_timeout_ms)));
  }
  absl::StatusOr<std::vector<std::string>> modes =
      ParseList("modes", FLAGS_modes, {"latency", "rate", "bandwidth", "budget", "stream", "mixed"});
  if (!modes.ok()) return BadFlag(modes.status());
  absl::StatusOr<std::vector<size_t>> sizes = ParseSizes("sizes", FLAGS_sizes);
  if (!sizes.ok()) return BadFlag(sizes.status());
  absl::StatusOr<std::vector<size_t>> bandwidth_sizes =
      ParseSizes("bandwidth_sizes", FLAGS_bandwidth_sizes);
  if (!bandwidth_sizes.ok()) return BadFlag(bandwidth_sizes.status());
  absl::StatusOr<std::vector<BudgetRun>> budget_runs = ParseBudgetRuns(FLAGS_budget_runs);
  if (!budget_runs.ok()) return BadFlag(budget_runs.status());
  absl::StatusOr<std::vector<size_t>> stream_sizes = ParseSizes("stream_sizes", FLAGS_stream_sizes);
  if (!stream_sizes.ok()) return BadFlag(stream_sizes.status());
  // Each bounds the run: a stream of --stream_messages is read to its end.
  constexpr int64_t kMaxStreamMessages = 1000000000;
  constexpr int kMaxStreamRuns = 100;
  if (FLAGS_stream_messages < 1 || FLAGS_stream_messages > kMaxStreamMessages ||
      FLAGS_stream_runs < 1 || FLAGS_stream_runs > kMaxStreamRuns || FLAGS_mixed_calls < 1 ||
      FLAGS_mixed_seconds <= 0 || FLAGS_mixed_small_size < 0 ||
      static_cast<uint64_t>(FLAGS_mixed_small_size) > kMaxPayloadBytes ||
      FLAGS_mixed_large_size < 1 ||
      static_cast<uint64_t>(FLAGS_mixed_large_size) > kMaxLargePayloadBytes) {
    return BadFlag(absl::InvalidArgumentError(absl::StrFormat(
        "need 1 <= --stream_messages <= %d (%d), 1 <= --stream_runs <= %d (%d), "
        "--mixed_calls >= 1 (%d), --mixed_seconds > 0 (%g), 0 <= --mixed_small_size <= %d (%d), "
        "1 <= --mixed_large_size <= %d (%d)",
        kMaxStreamMessages, FLAGS_stream_messages, kMaxStreamRuns, FLAGS_stream_runs,
        FLAGS_mixed_calls, FLAGS_mixed_seconds, kMaxPayloadBytes, FLAGS_mixed_small_size,
        kMaxLargePayloadBytes, FLAGS_mixed_large_size)));
  }
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
        RunSystem(system, *modes, *sizes, *bandwidth_sizes, *budget_runs, *stream_sizes);
    if (!results.ok()) {
      fprintf(stderr, "rpc_bench: %s\n", results.status().ToString().c_str());
      return 1;
    }
    all.push_back(*std::move(results));
  }
  std::vector<Figure> figures = Figures(all);
  printf("%s", FormatTable(all, figures).c_str());
  fflush(stdout);
  if (!FLAGS_json_out.empty()) {
    const char* provider = getenv("RDMARPC_PROVIDER");
    const std::string config = absl::StrFormat(
        "{\"host\": \"%s\", \"rdmarpc_provider\": \"%s\", \"warmup_calls\": %d, "
        "\"latency_calls_max\": %d, \"latency_seconds_max\": %g, \"rate_seconds\": %g, "
        "\"bandwidth_seconds\": %g, \"warmup_seconds\": %g, \"engine_threads\": %d, "
        "\"stream_messages\": %d, \"stream_runs\": %d, \"mixed_calls_max\": %d, "
        "\"mixed_seconds_max\": %g, \"server_pid\": %d}",
        FLAGS_host, provider == nullptr ? "" : provider, FLAGS_warmup_calls, FLAGS_latency_calls,
        FLAGS_latency_seconds, FLAGS_rate_seconds, FLAGS_bandwidth_seconds, FLAGS_warmup_seconds,
        FLAGS_engine_threads, FLAGS_stream_messages, FLAGS_stream_runs, FLAGS_mixed_calls,
        FLAGS_mixed_seconds, FLAGS_server_pid);
    const std::string time_utc =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
    absl::Status status = WriteFile(FLAGS_json_out, Json(all, figures, time_utc, config));
    if (!status.ok()) {
      fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  if (!FLAGS_plot_dir.empty()) {
    const PlotData plot = MakePlotData(all);
    for (const auto& [name, text] : {std::pair<const char*, const std::string*>{"latency.dat", &plot.latency},
                                     {"rate.dat", &plot.rate},
                                     {"bandwidth.dat", &plot.bandwidth}}) {
      absl::Status status = WriteFile(absl::StrCat(FLAGS_plot_dir, "/", name), *text);
      if (!status.ok()) {
        fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
        return 1;
      }
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
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{
                                        "server_receive_queue", &FLAGS_server_receive_queue},
                                    {"client_receive_queue", &FLAGS_client_receive_queue}}) {
    if (*value != "shared" && *value != "per-connection") {
      return BadFlag(absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " must be shared or per-connection, got '", *value, "'")));
    }
  }
  if (FLAGS_mode == "server") return RunServer(*systems);
  if (FLAGS_mode == "client") {
    SetServerPid(static_cast<pid_t>(FLAGS_server_pid));
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
