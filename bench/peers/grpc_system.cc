// gRPC side of rpc_bench: GrpcBench.Echo (the same messages as RpcBench)
// served by a callback-API server, called with the sync unary stub for
// latency and the callback API for calls in flight, as gRPC's own
// benchmarks (test/cpp/qps) drive the callback client. Built only when CMake
// finds gRPC (RDMARPC_BENCH_WITH_GRPC); otherwise the stubs at the bottom say
// UNIMPLEMENTED.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/rpc/echo_system.h"

#ifdef RDMARPC_BENCH_WITH_GRPC
#include <chrono>

#include "grpc_peer.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#endif

namespace rdmarpc {
namespace rpcbench {

#ifdef RDMARPC_BENCH_WITH_GRPC
namespace {

using grpc_peer::GrpcBench;

// gRPC's codes are the canonical ones absl uses, number for number.
absl::Status ToAbsl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

class EchoCallbackService final : public GrpcBench::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context, const EchoRequest* request,
                                 EchoResponse* response) override {
    response->set_payload(request->payload());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class GrpcServer final : public EchoServer {
 public:
  ~GrpcServer() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      server_->Wait();
    }
  }
  absl::Status Start(absl::string_view host, int port) {
    grpc::ServerBuilder builder;
    // No message-size limit: 16 MiB payloads exceed gRPC's 4 MiB default.
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    std::string address = absl::StrCat(host, ":", port);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("gRPC server cannot listen on ", address));
    }
    return absl::OkStatus();
  }
  int port() const override { return port_; }

 private:
  EchoCallbackService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

class GrpcClient final : public EchoClient {
 public:
  explicit GrpcClient(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)), stub_(GrpcBench::NewStub(channel_)) {}

  absl::Status Echo(const EchoRequest& request, EchoResponse* response) override {
    grpc::ClientContext context;
    return ToAbsl(stub_->Echo(&context, request, response));
  }

  void AsyncEcho(const EchoRequest& request, EchoResponse* response,
                 absl::AnyInvocable<void(absl::Status) &&> done) override {
    // gRPC wants a copyable std::function; the context and `done` ride in a
    // shared state freed when the callback has run.
    struct State {
      grpc::ClientContext context;
      absl::AnyInvocable<void(absl::Status) &&> done;
    };
    auto state = std::make_shared<State>();
    state->done = std::move(done);
    grpc::ClientContext* context = &state->context;
    stub_->async()->Echo(context, &request, response, [state](grpc::Status status) {
      std::move(state->done)(ToAbsl(status));
    });
  }

  absl::StatusOr<VerbsCounters> ServerCounters() override {
    return absl::UnimplementedError("gRPC has no verbs counters");
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<GrpcBench::Stub> stub_;
};

}  // namespace

bool HaveGrpc() { return true; }

absl::StatusOr<std::unique_ptr<EchoServer>> StartGrpcServer(absl::string_view host, int port) {
  auto server = std::make_unique<GrpcServer>();
  absl::Status status = server->Start(host, port);
  if (!status.ok()) return status;
  return std::unique_ptr<EchoServer>(std::move(server));
}

absl::StatusOr<std::unique_ptr<EchoClient>> NewGrpcClient(const ClientConfig& config) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each client (--threads) gets its own TCP connection, as each rdmarpc
  // client gets its own Channel; gRPC would otherwise share one subchannel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(config.address, grpc::InsecureChannelCredentials(), args);
  auto deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(config.connect_timeout_ms);
  if (!channel->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("gRPC channel to ", config.address,
                                               " did not connect within ",
                                               config.connect_timeout_ms, " ms"));
  }
  return std::unique_ptr<EchoClient>(std::make_unique<GrpcClient>(std::move(channel)));
}

#else  // !RDMARPC_BENCH_WITH_GRPC

bool HaveGrpc() { return false; }

absl::StatusOr<std::unique_ptr<EchoServer>> StartGrpcServer(absl::string_view /*host*/,
                                                            int /*port*/) {
  return absl::UnimplementedError("rpc_bench was built without gRPC (libgrpc++-dev not found)");
}

absl::StatusOr<std::unique_ptr<EchoClient>> NewGrpcClient(const ClientConfig& /*config*/) {
  return absl::UnimplementedError("rpc_bench was built without gRPC (libgrpc++-dev not found)");
}

#endif  // RDMARPC_BENCH_WITH_GRPC

}  // namespace rpcbench
}  // namespace rdmarpc
