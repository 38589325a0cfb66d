// interceptor_chain.h: the interceptors of one call (rdmarpc/interceptor.h)
// and the order they run in at each hook point.
//
// A call whose channel or server has interceptor factories makes one chain
// as it starts (ForClient / ForServer; nullptr when no factory made an
// interceptor, so a call with none costs nothing more). The call runs each
// hook through the chain: the "inward" points (client sends, server
// receives) in registration order, the "outward" points in reverse, each
// over the interceptors that entered the call (all of them, or up to the
// one that failed it at its first hook).
//
// Each Run builds its InterceptorBatchMethods on the stack: a stream's
// sends and receives may run on two threads at once (the user's Read and
// Write), and share nothing here but the immutable interceptor list and
// the atomic counts below.
#ifndef RDMARPC_RUNTIME_RPC_INTERCEPTOR_CHAIN_H_
#define RDMARPC_RUNTIME_RPC_INTERCEPTOR_CHAIN_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/impl/stream_call.h"

namespace rdmarpc {
namespace internal {

// The public name of a call's kind (ClientRpcInfo::type()).
experimental::RpcType RpcTypeOf(RpcKind kind);

class InterceptorChain {
 public:
  using Metadata = experimental::InterceptorBatchMethods::Metadata;
  using ClientFactories =
      std::vector<std::shared_ptr<experimental::ClientInterceptorFactoryInterface>>;
  using ServerFactories =
      std::vector<std::shared_ptr<experimental::ServerInterceptorFactoryInterface>>;

  // The chain of a client call; nullptr when every factory returned
  // nullptr. `channel` and `context` outlive the chain. The caller's
  // thread, as the call starts.
  static std::unique_ptr<InterceptorChain> ForClient(const ClientFactories& factories,
                                                     Channel* channel, absl::string_view method,
                                                     RpcKind kind, ClientContext* context);
  // The chain of a server call, right before its handler is to run; nullptr
  // when every factory returned nullptr. `context` (whose method() and
  // peer() the info reads) outlives the chain.
  static std::unique_ptr<InterceptorChain> ForServer(const ServerFactories& factories,
                                                     RpcKind kind, ServerContext* context);
  ~InterceptorChain();
  InterceptorChain(const InterceptorChain&) = delete;
  InterceptorChain& operator=(const InterceptorChain&) = delete;

  // ---- client ----
  // PRE_SEND_INITIAL_METADATA over every interceptor in order, stopping at
  // the first that fails: OK, or its status (the call must then end with
  // it through ClientRecvStatus, sending nothing).
  absl::Status ClientSendInitialMetadata(Metadata* metadata);
  void ClientSendMessage(const google::protobuf::MessageLite& message, size_t size);
  void ClientSendClose();
  // POST_RECV_INITIAL_METADATA, once (later calls do nothing).
  void ClientRecvInitialMetadata(Metadata* metadata);
  void ClientRecvMessage(google::protobuf::MessageLite* message, size_t size);
  // POST_RECV_STATUS, once; sets the info's end time first.
  void ClientRecvStatus(absl::Status* status, Metadata* trailing);

  // ---- server ----
  // POST_RECV_INITIAL_METADATA in order, stopping at the first that fails:
  // OK, or its status (the handler must not run; the call ends through
  // ServerSendStatus with it).
  absl::Status ServerRecvInitialMetadata(Metadata* metadata);
  void ServerRecvMessage(google::protobuf::MessageLite* message, size_t size);
  // PRE_SEND_INITIAL_METADATA, once.
  void ServerSendInitialMetadata(Metadata* metadata);
  void ServerSendMessage(const google::protobuf::MessageLite& message, size_t size);
  // PRE_SEND_STATUS, once; sets the info's end time first.
  void ServerSendStatus(absl::Status* status, Metadata* trailing);

  const experimental::ClientRpcInfo& client_info() const { return client_info_; }
  const experimental::ServerRpcInfo& server_info() const { return server_info_; }

 private:
  InterceptorChain() = default;
  // Runs `batch` at every entered interceptor, in order or in reverse.
  // With `failure`, stops at the first that fails and stores its status
  // there (entered_ becomes the count that ran); without, Fail is logged
  // and ignored.
  void Run(experimental::InterceptorBatchMethods* batch, bool forward, absl::Status* failure);

  std::vector<std::unique_ptr<experimental::Interceptor>> interceptors_;
  // Interceptors that entered the call: all, or those up to the one that
  // failed it. Written only by the first hook, before any other runs.
  size_t entered_ = 0;
  std::atomic<bool> recv_initial_metadata_done_{false};
  std::atomic<bool> send_initial_metadata_done_{false};
  std::atomic<bool> status_done_{false};
  experimental::ClientRpcInfo client_info_;
  experimental::ServerRpcInfo server_info_;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_INTERCEPTOR_CHAIN_H_
