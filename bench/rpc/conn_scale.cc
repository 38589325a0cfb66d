// conn_scale: many client connections held open to one server process, each
// making calls (bench/README.md, "Connection scale").
//
// Forks a server (RpcBench.Echo on 127.0.0.1, default ServerOptions but
// --server_workers and --receive_queue) and --client_processes clients that
// share --connections between them. Each client opens its share as one
// Channel whose pool holds that many connections (a slot connects on its
// first call, and calls take the slots in turn) and makes one Echo call on
// every connection. With all of them open and idle, the parent reads the
// server's VmRSS and registered memory (softrdma::PinnedBytes()). Then every
// client keeps --concurrency / --client_processes async 32-byte calls in
// flight for --rate_seconds; calls take the pool's slots round-robin, so
// every connection carries calls. Prints the idle memory per connection
// (above the server's before any connection), the aggregate rate, and the
// call latency (the median of the clients' p50s, the highest client's p99).
//
// The parent raises RLIMIT_NOFILE to its hard limit for all of them: each
// softrdma connection holds a TCP socket on either side.
//
// Usage: conn_scale [--connections=10000] [--client_processes=8]
//        [--concurrency=64] [--rate_seconds=3] [--connections_per_engine=0]
//        (RDMARPC_PROVIDER=soft)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/rpc/workloads.h"
#include "echo_server_child.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_bench.rdmarpc.pb.h"

DEFINE_int32(connections, 10000, "Client connections in all, shared by the client processes");
DEFINE_int32(client_processes, 8, "Client processes");
DEFINE_int32(concurrency, 64, "Calls in flight in all during the rate phase");
DEFINE_double(rate_seconds, 3, "Length of the rate phase, in seconds");
DEFINE_int32(server_workers, 2, "Server worker threads");
DEFINE_string(receive_queue, "shared",
              "Server's ServerOptions::receive_queue: shared | per-connection");
DEFINE_int32(connections_per_engine, 0,
             "A client's Channel gets one engine thread per this many connections "
             "(0: one engine thread whatever the count, as with 10 connections)");

namespace {

using rdmarpc::rpcbench::EchoRequest;
using rdmarpc::rpcbench::EchoResponse;
using rdmarpc::rpcbench::MemorySample;
using rdmarpc::rpcbench::RpcBench;

struct ClientReport {
  int32_t connected = 0;       // connections whose first call succeeded
  int32_t setup_errors = 0;    // connections whose first call failed
  uint64_t calls = 0;          // calls answered in the rate phase
  uint64_t failures = 0;       // calls failed or answered wrong in the rate phase
  double seconds = 0;          // length of the rate phase as measured
  double p50_us = 0;           // call latency in the rate phase, this client's
  double p99_us = 0;
  char first_error[160] = {};  // the first failure's status, if any
};

void WriteAll(int fd, const void* p, size_t n) {
  CHECK_EQ(write(fd, p, n), static_cast<ssize_t>(n));
}
void ReadAll(int fd, void* p, size_t n) { CHECK_EQ(read(fd, p, n), static_cast<ssize_t>(n)); }

// Keeps `in_flight` async calls going until `until`; callbacks run on the
// channel's engine threads.
class RateLoop {
 public:
  RateLoop(RpcBench::Stub* stub, int in_flight)
      : stub_(stub), slots_(static_cast<size_t>(in_flight)) {
    request_.set_payload(std::string(32, 'x'));
  }

  void Run(absl::Time until, ClientReport* report) {
    until_ = until;
    live_.store(static_cast<int>(slots_.size()));
    const absl::Time start = absl::Now();
    for (Slot& s : slots_) Start(&s);
    done_.WaitForNotification();
    report->seconds = absl::ToDoubleSeconds(absl::Now() - start);
    report->calls = calls_.load();
    report->failures = failures_.load();
    std::vector<double> all_us;
    for (const Slot& s : slots_) {
      for (const int64_t ns : s.latencies_ns) all_us.push_back(static_cast<double>(ns) / 1000);
    }
    std::sort(all_us.begin(), all_us.end());
    report->p50_us = rdmarpc::rpcbench::Percentile(all_us, 0.50);
    report->p99_us = rdmarpc::rpcbench::Percentile(all_us, 0.99);
    if (report->first_error[0] == '\0') {
      snprintf(report->first_error, sizeof(report->first_error), "%s", first_error_.c_str());
    }
  }

 private:
  // One chain of calls: each starts when the last ended, so its fields are
  // touched by one callback at a time.
  struct Slot {
    std::optional<rdmarpc::ClientContext> context;
    EchoResponse response;
    int64_t started_ns = 0;
    std::vector<int64_t> latencies_ns;
  };

  void Start(Slot* slot) {
    slot->started_ns = absl::GetCurrentTimeNanos();
    slot->context.emplace();
    slot->context->set_timeout(absl::Seconds(10));
    stub_->async()->Echo(&*slot->context, request_, &slot->response,
                         [this, slot](absl::Status s) { Ended(slot, s); });
  }

  void Ended(Slot* slot, const absl::Status& s) {
    if (s.ok() && slot->response.payload() == request_.payload()) {
      calls_.fetch_add(1, std::memory_order_relaxed);
      slot->latencies_ns.push_back(absl::GetCurrentTimeNanos() - slot->started_ns);
    } else if (failures_.fetch_add(1) == 0) {
      first_error_ = s.ok() ? "wrong payload" : s.ToString();
    }
    if (absl::Now() < until_) {
      Start(slot);
    } else if (live_.fetch_sub(1) == 1) {
      done_.Notify();
    }
  }

  RpcBench::Stub* stub_;
  EchoRequest request_;
  std::vector<Slot> slots_;
  absl::Time until_;
  std::atomic<int> live_{0};
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> failures_{0};
  std::string first_error_;  // written by the first failure only
  absl::Notification done_;
};

// A client: opens `connections`, reports, waits for 'g', runs the rate
// phase with `in_flight` calls, reports again.
int ClientChild(int port, int connections, int in_flight, int go_fd, int report_fd) {
  rdmarpc::ChannelOptions options;
  options.pool_size = std::max(connections, 1);
  options.engine_threads =
      FLAGS_connections_per_engine > 0 ? options.pool_size / FLAGS_connections_per_engine + 1 : 1;
  auto channel = rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", port), options);
  CHECK(channel.ok()) << channel.status();
  std::unique_ptr<RpcBench::Stub> stub = RpcBench::NewStub(*channel);
  ClientReport report;
  for (int i = 0; i < connections; ++i) {  // slot i connects on this call
    rdmarpc::ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    EchoRequest req;
    req.set_payload("x");
    EchoResponse resp;
    absl::Status s = stub->Echo(&ctx, req, &resp);
    if (s.ok()) {
      ++report.connected;
    } else if (report.setup_errors++ == 0) {
      snprintf(report.first_error, sizeof(report.first_error), "connection %d: %s", i,
               s.ToString().c_str());
    }
  }
  WriteAll(report_fd, &report, sizeof(report));
  char c = 0;
  ReadAll(go_fd, &c, 1);
  double seconds = 0;
  ReadAll(go_fd, &seconds, sizeof(seconds));
  if (in_flight > 0) {
    RateLoop loop(stub.get(), in_flight);
    loop.Run(absl::Now() + absl::Seconds(seconds), &report);
  }
  WriteAll(report_fd, &report, sizeof(report));
  ReadAll(go_fd, &c, 1);  // hold the connections until the parent has sampled
  stub.reset();
  channel->reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  const int procs = std::max(FLAGS_client_processes, 1);
  if (FLAGS_connections < procs) {
    fprintf(stderr, "--connections (%d) must be at least --client_processes (%d)\n",
            FLAGS_connections, procs);
    return 2;
  }
  rlimit nofile{};
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  nofile.rlim_cur = nofile.rlim_max;
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &nofile), 0);

  // Forked before anything of rdmarpc or softrdma exists in this process.
  rdmarpc::rpcbench::EchoServerChild server(FLAGS_server_workers, FLAGS_receive_queue);
  const int port = server.port();
  auto sample = [&server] { return server.Sample(); };
  const MemorySample before = sample();

  struct Client {
    pid_t pid;
    int go_fd;
    int report_fd;
  };
  std::vector<Client> clients;
  const absl::Time setup_start = absl::Now();
  for (int i = 0; i < procs; ++i) {
    const int conns = FLAGS_connections / procs + (i < FLAGS_connections % procs ? 1 : 0);
    const int in_flight = FLAGS_concurrency / procs + (i < FLAGS_concurrency % procs ? 1 : 0);
    int go[2];
    int rep[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(rep), 0);
    const pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
      server.CloseInOtherChild();
      for (const Client& c : clients) {
        close(c.go_fd);
        close(c.report_fd);
      }
      close(go[1]);
      close(rep[0]);
      _exit(ClientChild(port, conns, in_flight, go[0], rep[1]));
    }
    close(go[0]);
    close(rep[1]);
    clients.push_back(Client{pid, go[1], rep[0]});
  }
  int connected = 0;
  int setup_errors = 0;
  for (const Client& c : clients) {
    ClientReport r;
    ReadAll(c.report_fd, &r, sizeof(r));
    connected += r.connected;
    setup_errors += r.setup_errors;
    if (r.setup_errors > 0) fprintf(stderr, "client %d: %s\n", c.pid, r.first_error);
  }
  const double setup_s = absl::ToDoubleSeconds(absl::Now() - setup_start);
  const MemorySample idle = sample();

  for (const Client& c : clients) {
    const char g = 'g';
    WriteAll(c.go_fd, &g, 1);
    WriteAll(c.go_fd, &FLAGS_rate_seconds, sizeof(FLAGS_rate_seconds));
  }
  uint64_t calls = 0;
  uint64_t failures = 0;
  double seconds = 0;
  std::vector<double> p50s;
  double p99_max = 0;
  for (const Client& c : clients) {
    ClientReport r;
    ReadAll(c.report_fd, &r, sizeof(r));
    if (r.calls > 0) p50s.push_back(r.p50_us);  // a client with no call has no p50
    p99_max = std::max(p99_max, r.p99_us);
    calls += r.calls;
    failures += r.failures;
    seconds = std::max(seconds, r.seconds);
    if (r.failures > 0) fprintf(stderr, "client %d: %s\n", c.pid, r.first_error);
  }
  const MemorySample busy = sample();
  for (const Client& c : clients) {
    const char q = 'q';
    WriteAll(c.go_fd, &q, 1);
  }
  int rc = 0;
  for (const Client& c : clients) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    close(c.go_fd);
    close(c.report_fd);
  }
  if (server.Stop() != 0) rc = 1;

  const double n = connected > 0 ? connected : 1;
  printf("connections %d of %d open (%d failed) from %d processes in %.1f s\n", connected,
         FLAGS_connections, setup_errors, procs, setup_s);
  printf("server before: VmRSS %llu KiB, registered %llu KiB\n",
         static_cast<unsigned long long>(before.rss_kib),
         static_cast<unsigned long long>(before.pinned_bytes >> 10));
  printf("server idle:   VmRSS %llu KiB, registered %llu KiB\n",
         static_cast<unsigned long long>(idle.rss_kib),
         static_cast<unsigned long long>(idle.pinned_bytes >> 10));
  printf("server busy:   VmRSS %llu KiB, registered %llu KiB\n",
         static_cast<unsigned long long>(busy.rss_kib),
         static_cast<unsigned long long>(busy.pinned_bytes >> 10));
  printf("per idle connection: VmRSS %.1f KiB, registered %.1f KiB\n",
         (static_cast<double>(idle.rss_kib) - before.rss_kib) / n,
         (static_cast<double>(idle.pinned_bytes) - before.pinned_bytes) / 1024 / n);
  printf("rate: %.0f RPC/s (%llu calls, %llu failed, %d in flight, %.2f s)\n",
         seconds > 0 ? calls / seconds : 0, static_cast<unsigned long long>(calls),
         static_cast<unsigned long long>(failures), FLAGS_concurrency, seconds);
  std::sort(p50s.begin(), p50s.end());
  // Of an even count, the lower middle one.
  printf("latency: p50 %.1f us (median of the clients'), p99 %.1f us (the highest client's)\n",
         p50s.empty() ? 0 : p50s[(p50s.size() - 1) / 2], p99_max);
  if (setup_errors > 0 || failures > 0) rc = 1;
  return rc;
}
