// echo_server_child.cc: see echo_server_child.h.
#include "echo_server_child.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_bench.rdmarpc.pb.h"
#include "runtime/softrdma/faults.h"

namespace rdmarpc {
namespace rpcbench {
namespace {

class EchoImpl final : public RpcBench::Service {
 public:
  absl::Status Echo(ServerContext*, const EchoRequest& req, EchoResponse* resp) override {
    resp->set_payload(req.payload());
    return absl::OkStatus();
  }
};

}  // namespace

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

MemorySample SampleThisProcess() { return MemorySample{softrdma::PinnedBytes(), RssKib()}; }

int ServeEchoChild(int cmd_fd, int reply_fd, int workers, const std::string& receive_queue) {
  EchoImpl service;
  ServerOptions options;
  options.num_workers = workers;
  options.receive_queue = receive_queue == "shared" ? ServerOptions::ReceiveQueue::kShared
                                                    : ServerOptions::ReceiveQueue::kPerConnection;
  Server server(options);
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
    const MemorySample m = SampleThisProcess();
    CHECK_EQ(write(reply_fd, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
  }
  server.Shutdown(absl::ZeroDuration());
  server.Wait();
  return 0;
}

EchoServerChild::EchoServerChild(int workers, const std::string& receive_queue) {
  int cmd[2];
  int reply[2];
  CHECK_EQ(pipe(cmd), 0);
  CHECK_EQ(pipe(reply), 0);
  pid_ = fork();
  CHECK_GE(pid_, 0);
  if (pid_ == 0) {
    close(cmd[1]);
    close(reply[0]);
    _exit(ServeEchoChild(cmd[0], reply[1], workers, receive_queue));
  }
  close(cmd[0]);
  close(reply[1]);
  cmd_fd_ = cmd[1];
  reply_fd_ = reply[0];
  CHECK_EQ(read(reply_fd_, &port_, sizeof(port_)), static_cast<ssize_t>(sizeof(port_)));
}

MemorySample EchoServerChild::Sample() {
  const char c = 'm';
  CHECK_EQ(write(cmd_fd_, &c, 1), 1);
  MemorySample m;
  CHECK_EQ(read(reply_fd_, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
  return m;
}

void EchoServerChild::CloseInOtherChild() {
  close(cmd_fd_);
  close(reply_fd_);
}

int EchoServerChild::Stop() {
  close(cmd_fd_);
  int status = 0;
  waitpid(pid_, &status, 0);
  close(reply_fd_);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace rpcbench
}  // namespace rdmarpc
