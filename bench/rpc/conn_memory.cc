// conn_memory: the memory an rdmarpc server holds per client connection,
// measured (WORKSPACE.notes, "Memory per connection").
//
// A forked child serves RpcBench.Echo on 127.0.0.1 with default
// ServerOptions but --receive_queue and --server_workers. The parent opens connections in steps (--steps, cumulative
// counts), one Echo call on each new one (a channel with pool_size = the last
// step, whose slots connect on first use), and after each step asks the child
// for its registered memory -- softrdma::PinnedBytes(), the bytes a NIC's
// driver pins and counts against RLIMIT_MEMLOCK -- and its VmRSS, and
// reads the same two figures of its own (the client's channel, with
// --client_receive_queue). Prints one row per step and the per-connection
// slopes between the first and last step.
//
// With --channels=N it then measures what a Channel costs the client by
// itself: N more channels with default ChannelOptions (one engine thread,
// one connection each), one Echo call on each, and the client's registered
// memory and VmRSS before and after, divided by N ("client per channel:").
//
// Usage: conn_memory [--steps=0,10,100,500] [--receive_queue=shared]
//        [--client_receive_queue=per-connection] [--channels=0]
//        (RDMARPC_PROVIDER=soft)

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "echo_server_child.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_bench.rdmarpc.pb.h"

DEFINE_string(steps, "0,10,100,500", "Cumulative connection counts to measure at");
DEFINE_string(receive_queue, "shared",
              "Server's ServerOptions::receive_queue: shared | per-connection");
DEFINE_int32(server_workers, 2, "Server worker threads");
DEFINE_string(client_receive_queue, "per-connection",
              "Client's ChannelOptions::receive_queue: per-connection | shared");
DEFINE_int32(channels, 0,
             "Then open this many more channels of one connection each and report the "
             "client's memory per channel (0: skip)");

using rdmarpc::rpcbench::EchoRequest;
using rdmarpc::rpcbench::EchoResponse;
using rdmarpc::rpcbench::RpcBench;

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
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string*>{"receive_queue", &FLAGS_receive_queue},
        {"client_receive_queue", &FLAGS_client_receive_queue}}) {
    if (*value != "shared" && *value != "per-connection") {
      fprintf(stderr, "--%s: shared or per-connection, got %s\n", flag, value->c_str());
      return 2;
    }
  }
  if (steps.size() < 2) {
    fprintf(stderr, "--steps: want at least two counts\n");
    return 2;
  }
  // Forked before anything of rdmarpc or softrdma exists in this process.
  rdmarpc::rpcbench::EchoServerChild server(FLAGS_server_workers, FLAGS_receive_queue);
  const int port = server.port();
  auto sample = [&server] { return server.Sample(); };

  rdmarpc::ChannelOptions options;
  options.pool_size = steps.back() > 0 ? steps.back() : 1;
  // Connections per engine as a busy client would spread them (a loop's
  // CQ grows, so this is for polling work, not room).
  options.engine_threads = options.pool_size / 150 + 1;
  if (FLAGS_client_receive_queue == "shared") {
    options.receive_queue = rdmarpc::ChannelOptions::ReceiveQueue::kShared;
  }
  auto channel = rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", port), options);
  CHECK(channel.ok()) << channel.status();
  std::unique_ptr<RpcBench::Stub> stub = RpcBench::NewStub(*channel);
  printf("%12s %16s %12s %23s %19s\n", "connections", "registered_KiB", "VmRSS_KiB",
         "client_registered_KiB", "client_VmRSS_KiB");
  std::vector<rdmarpc::rpcbench::MemorySample> at;
  std::vector<rdmarpc::rpcbench::MemorySample> client_at;
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
    client_at.push_back(rdmarpc::rpcbench::SampleThisProcess());
    printf("%12d %16llu %12llu %23llu %19llu\n", n,
           static_cast<unsigned long long>(at.back().pinned_bytes >> 10),
           static_cast<unsigned long long>(at.back().rss_kib),
           static_cast<unsigned long long>(client_at.back().pinned_bytes >> 10),
           static_cast<unsigned long long>(client_at.back().rss_kib));
  }
  const double conns = steps.back() - steps.front();
  if (conns > 0) {
    printf("per connection: registered %.1f KiB, VmRSS %.1f KiB\n",
           (static_cast<double>(at.back().pinned_bytes) - at.front().pinned_bytes) / 1024 / conns,
           (static_cast<double>(at.back().rss_kib) - at.front().rss_kib) / conns);
    printf("client per connection: registered %.1f KiB, VmRSS %.1f KiB\n",
           (static_cast<double>(client_at.back().pinned_bytes) - client_at.front().pinned_bytes) /
               1024 / conns,
           (static_cast<double>(client_at.back().rss_kib) - client_at.front().rss_kib) / conns);
  }
  if (FLAGS_channels > 0) {
    const rdmarpc::rpcbench::MemorySample before = rdmarpc::rpcbench::SampleThisProcess();
    std::vector<std::shared_ptr<rdmarpc::Channel>> channels;
    for (int i = 0; i < FLAGS_channels; ++i) {
      auto ch = rdmarpc::CreateChannel(absl::StrCat("127.0.0.1:", port));
      CHECK(ch.ok()) << ch.status();
      channels.push_back(*ch);
      rdmarpc::ClientContext ctx;
      ctx.set_timeout(absl::Seconds(10));
      EchoRequest req;
      req.set_payload("x");
      EchoResponse resp;
      absl::Status s = RpcBench::NewStub(channels.back())->Echo(&ctx, req, &resp);
      CHECK(s.ok()) << "channel " << i << ": " << s;
    }
    const rdmarpc::rpcbench::MemorySample after = rdmarpc::rpcbench::SampleThisProcess();
    printf("client per channel (%d channels of one connection): registered %.1f KiB, "
           "VmRSS %.1f KiB\n",
           FLAGS_channels,
           (static_cast<double>(after.pinned_bytes) - before.pinned_bytes) / 1024 /
               FLAGS_channels,
           (static_cast<double>(after.rss_kib) - before.rss_kib) / FLAGS_channels);
  }
  stub.reset();
  channel->reset();
  return server.Stop();
}
