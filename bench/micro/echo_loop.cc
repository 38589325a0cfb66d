// echo_loop.cc: see echo_loop.h.
#include "echo_loop.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench_echo.rdmarpc.pb.h"

namespace rdmarpc {
namespace bench {
namespace {

class EchoImpl final : public BenchEcho::Service {
 public:
  absl::Status Echo(ServerContext*, const EchoRequest& request, EchoResponse* response) override {
    response->set_payload(request.payload());
    return absl::OkStatus();
  }
};

}  // namespace

void RunEchoLoop(benchmark::State& state, const ServerOptions& server_options,
                 const ChannelOptions& channel_options) {
  EchoImpl service;
  Server server(server_options);
  absl::Status status = server.AddService(&service);
  if (status.ok()) status = server.Start("127.0.0.1:0");
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  absl::StatusOr<std::shared_ptr<Channel>> channel =
      CreateChannel(absl::StrCat("127.0.0.1:", server.port()), channel_options);
  if (!channel.ok()) {
    state.SkipWithError(channel.status().ToString().c_str());
    return;
  }
  std::unique_ptr<BenchEcho::Stub> stub = BenchEcho::NewStub(*channel);
  EchoRequest request;
  request.set_payload(std::string(32, 'e'));
  EchoResponse response;
  {
    ClientContext context;  // untimed: connects
    status = stub->Echo(&context, request, &response);
  }
  for (auto _ : state) {
    if (!status.ok()) break;
    ClientContext context;
    status = stub->Echo(&context, request, &response);
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  state.SetItemsProcessed(state.iterations());
  stub.reset();
  channel->reset();
  server.Shutdown();
  server.Wait();
}

}  // namespace bench
}  // namespace rdmarpc
