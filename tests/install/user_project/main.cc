// A user's program built against an installed rdmarpc (find_package). Starts a
// Server on 127.0.0.1 with a port the kernel picks, makes one call through
// the generated stub on a Channel to it, and exits 0 only when the reply is
// exactly the expected one.
#include <cstdio>
#include <memory>
#include <string>

#include "calculator.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

namespace {

class CalculatorImpl final : public installed::calc::Calculator::Service {
 public:
  absl::Status Add(rdmarpc::ServerContext*, const installed::calc::AddRequest& request,
                   installed::calc::AddReply* reply) override {
    reply->set_sum(request.a() + request.b());
    reply->set_label("sum of " + request.label());
    return absl::OkStatus();
  }
};

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  CalculatorImpl service;
  rdmarpc::Server server;
  absl::Status status = server.AddService(&service);
  if (!status.ok()) return Fail("AddService", status);
  status = server.Start("127.0.0.1:0");
  if (!status.ok()) return Fail("Start", status);

  const std::string target = "127.0.0.1:" + std::to_string(server.port());
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel = rdmarpc::CreateChannel(target);
  if (!channel.ok()) return Fail("CreateChannel", channel.status());
  std::unique_ptr<installed::calc::Calculator::Stub> stub =
      installed::calc::Calculator::NewStub(*channel);

  rdmarpc::ClientContext context;
  context.set_timeout(absl::Seconds(30));
  installed::calc::AddRequest request;
  request.set_a(40000000000);
  request.set_b(2);
  request.set_label("installed");
  installed::calc::AddReply reply;
  status = stub->Add(&context, request, &reply);
  if (!status.ok()) return Fail("Add", status);

  server.Shutdown();
  server.Wait();

  if (reply.sum() != 40000000002 || reply.label() != "sum of installed") {
    std::fprintf(stderr, "wrong reply: sum=%lld label='%s', want sum=40000000002 label='sum of installed'\n",
                 static_cast<long long>(reply.sum()), reply.label().c_str());
    return 1;
  }
  std::printf("ok: %s answered sum=%lld label='%s'\n", target.c_str(),
              static_cast<long long>(reply.sum()), reply.label().c_str());
  return 0;
}
