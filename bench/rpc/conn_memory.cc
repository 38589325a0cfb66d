// conn_memory: the memory an rdmarpc server holds per client connection,
// measured (WORKSPACE.notes, "Memory per connection").
//
// A forked child serves RpcBench.Echo on 127.0.0.1 with default
// ServerOptions but --receive_queue and --server_workers. The parent opens connections in steps (--steps, cumulative
// counts), one Echo call on each new one (a channel with pool_size = the last
// step, whose slots connect on first use), and after each step asks the child
// for its registered memory -- softrdma::PinnedBytes(), the bytes a NIC's
// driver pins and counts against RLIMIT_MEMLOCK -- and its VmRSS. Prints one
// row per step and the per-connection slope between the first and last step.
//
// Usage: conn_memory [--steps=0,10,100,500] [--receive_queue=shared]
//        (RDMARPC_PROVIDER=soft)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rpc_bench.rdmarpc.pb.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/softrdma/faults.h"

DEFINE_string(steps, "0,10,100,500", "Cumulative connection counts to measure at");
DEFINE_string(receive_queue, "shared",
              "Server's ServerOptions::receive_queue: shared | per-connection");
DEFINE_int32(server_workers, 2, "Server worker threads");

namespace {

using rdmarpc::rpcbench::EchoRequest;
using rdmarpc::rpcbench::EchoResponse;
using rdmarpc::rpcbench::RpcBench;

class EchoImpl final : public RpcBench::Service {
 public:
  absl::Status Echo(rdmarpc::ServerContext*, const EchoRequest& req, EchoResponse* resp) override {
    resp->set_payload(req.payload());
    return absl::OkStatus();
  }
};

uint64_t RssKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    uint64_t kib = 0;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib;
  }
  return 0;
}

struct Sample {
  uint64_t pinned_bytes = 0;
  uint64_t rss_kib = 0;
};

// The child: serves until its command pipe closes; answers each 'm' with a
// Sample. Returns the exit status.
int ServeChild(int cmd_fd, int reply_fd) {
  EchoImpl service;
  rdmarpc::ServerOptions options;
  options.num_workers = FLAGS_server_workers;
  options.receive_queue = FLAGS_receive_queue == "shared"
                              ? rdmarpc::ServerOptions::ReceiveQueue::kShared
                              : rdmarpc::ServerOptions::ReceiveQueue::kPerConnection;
  rdmarpc::Server server(options);
  CHECK(server.AddService(&service).ok());
  absl::Status s = server.Start("127.0.0.1:0");
  if (!s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  const int port = server.port();
  CHECK_EQ(write(reply_fd, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  char c = 0;
  while (read(cmd_fd, &c, 1) == 1) {
    Sample m{softrdma::PinnedBytes(), RssKib()};
    CHECK_EQ(write(reply_fd, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
  }
  server.Shutdown(absl::ZeroDuration());
  server.Wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  std::vector<int> steps;
  for (absl::string_view p : absl::StrSplit(FLAGS_steps, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(p, &n) || n < 0 || (!steps.empty() && n < steps.back())) {
      fprintf(stderr, "--steps: want rising counts, got %s\n", FLAGS_steps.c_str());
      return 2;
    }
    steps.push_back(n);
  }
  if (steps.size() < 2) {
    fprintf(stderr, "--steps: want at least two counts\n");
    return 2;
  }
  int cmd[2];
  int reply[2];
  CHECK_EQ(pipe(cmd), 0);
  CHECK_EQ(pipe(reply), 0);
  // Fork before anything of rdmarpc or softrdma exists in this process.
  const pid_t child = fork();
  CHECK_GE(child, 0);
  if (child == 0) {
    close(cmd[1]);
    close(reply[0]);
    _exit(ServeChild(cmd[0], reply[1]));
  }
  close(cmd[0]);
  close(reply[1]);
  int port = 0;
  CHECK_EQ(read(reply[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  auto sample = [&] {
    const char c = 'm';
    CHECK_EQ(write(cmd[1], &c, 1), 1);
    Sample m;
    CHECK_EQ(read(reply[0], &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
    return m;
  };

  rdmarpc::ChannelOptions options;
  options.pool_size = steps.back() > 0 ? steps.back() : 1;
  // Connections per engine as a busy client would spread them (a loop's
  // CQ grows, so this is for polling work, not room).
  options.engine_threads = options.pool_size / 150 + 1;
  auto channel = rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", port), options);
  CHECK(channel.ok()) << channel.status();
  std::unique_ptr<RpcBench::Stub> stub = RpcBench::NewStub(*channel);
  printf("%12s %16s %12s\n", "connections", "registered_KiB", "VmRSS_KiB");
  std::vector<Sample> at;
  int open = 0;
  for (int n : steps) {
    for (; open < n; ++open) {  // slot `open` connects on its first call
      rdmarpc::ClientContext ctx;
      ctx.set_timeout(absl::Seconds(10));
      EchoRequest req;
      req.set_payload("x");
      EchoResponse resp;
      absl::Status s = stub->Echo(&ctx, req, &resp);
      CHECK(s.ok()) << "connection " << open << ": " << s;
    }
    at.push_back(sample());
    printf("%12d %16llu %12llu\n", n, static_cast<unsigned long long>(at.back().pinned_bytes >> 10),
           static_cast<unsigned long long>(at.back().rss_kib));
  }
  const double conns = steps.back() - steps.front();
  if (conns > 0) {
    printf("per connection: registered %.1f KiB, VmRSS %.1f KiB\n",
           (static_cast<double>(at.back().pinned_bytes) - at.front().pinned_bytes) / 1024 / conns,
           (static_cast<double>(at.back().rss_kib) - at.front().rss_kib) / conns);
  }
  stub.reset();
  channel->reset();
  close(cmd[1]);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
