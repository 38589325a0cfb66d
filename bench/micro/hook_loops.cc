// hook_loops.cc: see hook_loops.h.
#include "hook_loops.h"

#include <memory>
#include <string>

#include "bench_echo.pb.h"

namespace rdmarpc {
namespace bench {

void RunClientHooks(benchmark::State& state,
                    const internal::InterceptorChain::ClientFactories& factories,
                    absl::string_view method) {
  EchoRequest request;
  request.set_payload(std::string(32, 'e'));
  EchoResponse response;
  response.set_payload(request.payload());
  for (auto _ : state) {
    ClientContext context;
    if (factories.empty()) continue;  // what a channel without interceptors does
    std::unique_ptr<internal::InterceptorChain> chain = internal::InterceptorChain::ForClient(
        factories, nullptr, method, internal::RpcKind::kUnary, &context);
    internal::InterceptorChain::Metadata md, initial, trailing;
    absl::Status status = chain->ClientSendInitialMetadata(&md);
    chain->ClientSendMessage(request, request.ByteSizeLong());
    chain->ClientRecvInitialMetadata(&initial);
    chain->ClientRecvMessage(&response, response.ByteSizeLong());
    chain->ClientRecvStatus(&status, &trailing);
    benchmark::DoNotOptimize(status);
  }
}

void RunServerHooks(benchmark::State& state,
                    const internal::InterceptorChain::ServerFactories& factories,
                    ServerContext* context) {
  EchoRequest request;
  request.set_payload(std::string(32, 'e'));
  EchoResponse response;
  response.set_payload(request.payload());
  for (auto _ : state) {
    if (factories.empty()) continue;  // what a server without interceptors does
    std::unique_ptr<internal::InterceptorChain> chain =
        internal::InterceptorChain::ForServer(factories, internal::RpcKind::kUnary, context);
    internal::InterceptorChain::Metadata client_md, initial, trailing;
    absl::Status status = chain->ServerRecvInitialMetadata(&client_md);
    chain->ServerRecvMessage(&request, request.ByteSizeLong());
    chain->ServerSendInitialMetadata(&initial);
    chain->ServerSendMessage(response, response.ByteSizeLong());
    chain->ServerSendStatus(&status, &trailing);
    benchmark::DoNotOptimize(status);
  }
}

}  // namespace bench
}  // namespace rdmarpc
