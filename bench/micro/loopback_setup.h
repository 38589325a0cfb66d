// loopback_setup.h: a Server with one service on 127.0.0.1:0 and a
// generated stub on a Channel to it, for the end-to-end micro-benchmarks.
#ifndef RDMARPC_BENCH_MICRO_LOOPBACK_SETUP_H_
#define RDMARPC_BENCH_MICRO_LOOPBACK_SETUP_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace bench {

// `ServiceT` is served; `ServiceSpec` is the generated service class whose
// NewStub makes `stub`.
template <class ServiceT, class ServiceSpec>
struct LoopbackSetup {
  ServiceT service;
  Server server;
  std::shared_ptr<Channel> channel;
  std::unique_ptr<typename ServiceSpec::Stub> stub;

  absl::Status Start() {
    absl::Status status = server.AddService(&service);
    if (!status.ok()) return status;
    status = server.Start("127.0.0.1:0");
    if (!status.ok()) return status;
    absl::StatusOr<std::shared_ptr<Channel>> created =
        CreateChannel(absl::StrCat("127.0.0.1:", server.port()));
    if (!created.ok()) return created.status();
    channel = *std::move(created);
    stub = ServiceSpec::NewStub(channel);
    return absl::OkStatus();
  }
  ~LoopbackSetup() {
    stub.reset();
    channel.reset();
    server.Shutdown();
    server.Wait();
  }
};

}  // namespace bench
}  // namespace rdmarpc

#endif  // RDMARPC_BENCH_MICRO_LOOPBACK_SETUP_H_
