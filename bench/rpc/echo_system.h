// echo_system.h: what rpc_bench needs of an RPC system, so the same workload
// code drives rdmarpc (rdmarpc_system.cc) and gRPC (bench/peers/grpc_system.cc).
//
// An EchoClient makes RpcBench.Echo calls, blocking or asynchronous, and
// (rdmarpc only) reads RpcBench.Stream streams; an EchoServer serves them
// until destroyed. The bench pays one virtual call per
// RPC here, which is noise next to an RPC (and the same for both systems).
#ifndef RDMARPC_BENCH_RPC_ECHO_SYSTEM_H_
#define RDMARPC_BENCH_RPC_ECHO_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpc_bench.pb.h"

namespace rdmarpc {
namespace rpcbench {

// max_message_bytes of the rdmarpc server and of the `mixed` workload's
// channel, in bytes: room for a 64 MiB payload plus its protobuf framing
// and the call header (rdmarpc's default limit, 64 MiB, is the payload's
// size exactly and would refuse it).
inline constexpr size_t kLargeMessageBytes = 80 * 1024 * 1024;

// Verbs and transport counters of one process (softrdma::Stats plus
// rdmarpc::internal::TransportStats), or a difference or sum of them.
// Counts of work requests, calls and completions; bytes for the copy count.
struct VerbsCounters {
  uint64_t send = 0;
  uint64_t send_with_imm = 0;
  uint64_t rdma_write = 0;
  uint64_t rdma_write_with_imm = 0;
  uint64_t rdma_read = 0;
  uint64_t recv = 0;
  uint64_t post_send_calls = 0;
  uint64_t post_recv_calls = 0;
  uint64_t signaled_sends = 0;
  uint64_t wc_polled = 0;
  uint64_t poll_cq_calls = 0;
  uint64_t reg_mr = 0;
  uint64_t rnr_retries = 0;
  uint64_t payload_bytes_copied = 0;

  // Send-queue work requests of every opcode rdmarpc posts.
  uint64_t send_wrs() const {
    return send + send_with_imm + rdma_write + rdma_write_with_imm + rdma_read;
  }
  VerbsCounters operator-(const VerbsCounters& earlier) const;
  VerbsCounters operator+(const VerbsCounters& other) const;
};

VerbsCounters FromProto(const StatsResponse& proto);
StatsResponse ToProto(const VerbsCounters& counters);

// This process's counters now (softrdma::GetStats, GetTransportStats).
VerbsCounters LocalCounters();

class EchoClient {
 public:
  virtual ~EchoClient() = default;

  // One blocking Echo call. Any thread. Returns the system's call status
  // (UNAVAILABLE when the server is gone, RESOURCE_EXHAUSTED over the size
  // limits, ...), mapped to absl codes for gRPC.
  virtual absl::Status Echo(const EchoRequest& request, EchoResponse* response) = 0;

  // Starts one Echo call and returns; `done` runs exactly once, on the
  // system's completion thread (rdmarpc: the channel's engine thread; gRPC:
  // its callback executor), or inline when the call fails before it is
  // sent. `request` and `response` are the caller's and must stay alive until
  // `done` runs; `done` may start the next call but must not block.
  virtual void AsyncEcho(const EchoRequest& request, EchoResponse* response,
                         absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Starts one Echo call whose payload is an attachment of `size` bytes
  // (rdmarpc::Buffer, rdmarpc/buffer.h) beside an empty message; the server
  // sends the same Buffer back. `slot` (0 .. calls in flight - 1) names the
  // caller's Buffer, reused by its next call. `done` as AsyncEcho's, with
  // DATA_LOSS when the echoed attachment differs (CheckEcho in
  // workloads.h: each slot's first echo byte for byte, later ones by size
  // and three windows). UNIMPLEMENTED (through `done`) for a system
  // without attachments (gRPC).
  virtual void AsyncEchoAttachment(int /*slot*/, size_t /*size*/,
                                   absl::AnyInvocable<void(absl::Status) &&> done) {
    std::move(done)(absl::UnimplementedError("attachments are rdmarpc's only"));
  }

  // The server process's counters (RpcBench.GetStats). UNIMPLEMENTED for
  // systems without verbs counters (gRPC); otherwise the call's status.
  virtual absl::StatusOr<VerbsCounters> ServerCounters() = 0;

  // Opens one RpcBench.Stream for `request` and reads it to the end on the
  // calling thread (blocking; not a completion thread), passing each
  // message to `on_message` on this thread. When `on_message` returns an
  // error the stream is cancelled and that error returned; otherwise the
  // call's status (the handler's, or UNAVAILABLE, CANCELLED, ...).
  // UNIMPLEMENTED for a system without the Stream method (gRPC's peer).
  virtual absl::Status ReadStream(
      const StreamRequest& /*request*/,
      absl::FunctionRef<absl::Status(const EchoResponse&)> /*on_message*/) {
    return absl::UnimplementedError("RpcBench.Stream is served by rdmarpc only");
  }
};

class EchoServer {
 public:
  // Stops serving and joins the server's threads.
  virtual ~EchoServer() = default;
  // The bound TCP port (the one the kernel picked when asked for 0).
  virtual int port() const = 0;
};

// Client / server options shared by both systems.
struct ClientConfig {
  std::string address;            // "host:port"
  int64_t connect_timeout_ms = 5000;
  int engine_threads = 1;         // rdmarpc: completion threads per channel
  int pool_size = 0;              // rdmarpc: connections per channel; 0 = ChannelOptions'
  size_t max_message_bytes = 0;   // rdmarpc: the channel's limit; 0 = ChannelOptions'
  bool shared_receive_queue = false;  // rdmarpc: ChannelOptions::receive_queue = kShared
};

// rdmarpc, with max_message_bytes = kLargeMessageBytes, and each worker's
// connections receiving from one shared receive queue when
// `shared_receive_queue` (ServerOptions::receive_queue). Start returns the
// Server::Start status (INVALID_ARGUMENT for a bad
// address, UNAVAILABLE when the port is taken or no RDMA device opens).
absl::StatusOr<std::unique_ptr<EchoServer>> StartRdmarpcServer(absl::string_view host, int port,
                                                               int workers,
                                                               bool shared_receive_queue);
// INVALID_ARGUMENT / UNAVAILABLE as rdmarpc::CreateChannel; connecting is
// lazy, so an absent server shows on the first call.
absl::StatusOr<std::unique_ptr<EchoClient>> NewRdmarpcClient(const ClientConfig& config);

// True when this binary was built with the gRPC peer.
bool HaveGrpc();
// gRPC (callback server; sync unary and callback-API client). UNIMPLEMENTED
// when built without gRPC; UNAVAILABLE when the port cannot be bound or the
// channel does not connect within connect_timeout_ms.
absl::StatusOr<std::unique_ptr<EchoServer>> StartGrpcServer(absl::string_view host, int port);
absl::StatusOr<std::unique_ptr<EchoClient>> NewGrpcClient(const ClientConfig& config);

}  // namespace rpcbench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_RPC_ECHO_SYSTEM_H_
