// echo_server_child.h: the forked server of conn_memory and conn_scale,
// which measure what a server holds per client connection.
//
// ServeEchoChild runs in a child forked before anything of rdmarpc or
// softrdma exists in the process: it serves RpcBench.Echo on 127.0.0.1 (an
// ephemeral port), writes the port (an int) to `reply_fd`, then answers each
// byte read from `cmd_fd` with a MemorySample, until `cmd_fd` closes.
#ifndef RDMARPC_BENCH_RPC_ECHO_SERVER_CHILD_H_
#define RDMARPC_BENCH_RPC_ECHO_SERVER_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace rdmarpc {
namespace rpcbench {

struct MemorySample {
  uint64_t pinned_bytes = 0;  // softrdma::PinnedBytes(): what a NIC's driver pins
  uint64_t rss_kib = 0;       // VmRSS
};

// This process's VmRSS in KiB (0 if /proc/self/status has none).
uint64_t RssKib();
// This process's softrdma::PinnedBytes() and RssKib() now.
MemorySample SampleThisProcess();

// Serves as above with `workers` workers and ServerOptions::receive_queue
// given by name ("shared" or "per-connection"). Returns the exit status.
int ServeEchoChild(int cmd_fd, int reply_fd, int workers, const std::string& receive_queue);

// The parent's side: forks ServeEchoChild (construct it before anything of
// rdmarpc or softrdma exists in the process) and waits for its port. Any
// failure of fork, pipe, read or write aborts (CHECK): these are benches.
class EchoServerChild {
 public:
  EchoServerChild(int workers, const std::string& receive_queue);
  EchoServerChild(const EchoServerChild&) = delete;
  EchoServerChild& operator=(const EchoServerChild&) = delete;

  int port() const { return port_; }
  // The server's memory now.
  MemorySample Sample();
  // In another child forked from the parent: closes the parent's pipe ends.
  void CloseInOtherChild();
  // Ends the server (closes the command pipe) and returns its exit status
  // (1 when it did not exit normally).
  int Stop();

 private:
  pid_t pid_ = -1;
  int cmd_fd_ = -1;    // write end
  int reply_fd_ = -1;  // read end
  int port_ = 0;
};

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_ECHO_SERVER_CHILD_H_
