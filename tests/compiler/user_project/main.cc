// A user's program built against rdmarpc via add_subdirectory. Exits 0 when
// the generated service registers its method and a call to a closed port
// fails with UNAVAILABLE.
#include <cstdio>
#include <memory>

#include "app.rdmarpc.pb.h"

namespace {

class GreeterImpl final : public user::app::Greeter::Service {
 public:
  absl::Status SayHello(rdmarpc::ServerContext*, const user::app::HelloRequest& request,
                        user::app::HelloReply* reply) override {
    reply->set_greeting("hello " + request.name());
    return absl::OkStatus();
  }
};

}  // namespace

int main() {
  GreeterImpl service;
  if (service.methods().size() != 1 ||
      service.methods()[0]->full_name() != "/user.app.Greeter/SayHello") {
    std::fprintf(stderr, "unexpected methods\n");
    return 1;
  }
  auto channel = rdmarpc::CreateChannel("127.0.0.1:1");
  if (!channel.ok()) {
    std::fprintf(stderr, "CreateChannel: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  auto stub = user::app::Greeter::NewStub(*channel);
  rdmarpc::ClientContext context;
  user::app::HelloRequest request;
  request.set_name("user");
  user::app::HelloReply reply;
  absl::Status status = stub->SayHello(&context, request, &reply);
  if (!absl::IsUnavailable(status)) {
    std::fprintf(stderr, "expected UNAVAILABLE, got %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("ok: %s\n", status.ToString().c_str());
  return 0;
}
