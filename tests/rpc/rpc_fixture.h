// rpc_fixture.h: a server with the test EchoService on 127.0.0.1:0 and a
// channel to it.
#ifndef RDMARPC_TESTS_RPC_RPC_FIXTURE_H_
#define RDMARPC_TESTS_RPC_RPC_FIXTURE_H_

#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {

// A started Server on a loopback port serving one `ServiceT`, and a
// Channel to it.
template <class ServiceT>
struct ServiceFixture {
  explicit ServiceFixture(ServerOptions so = ServerOptions(), ChannelOptions co = ChannelOptions())
      : server(so) {
    EXPECT_TRUE(server.AddService(&service).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    if (ch.ok()) channel = *ch;
  }
  ServiceT service;
  Server server;
  std::shared_ptr<Channel> channel;
};
using EchoFixture = ServiceFixture<EchoService>;

// A loopback port nobody listens on: a server's, after it shut down.
inline int PortWithNoListener() {
  Server probe;
  EXPECT_TRUE(probe.Start("127.0.0.1:0").ok());
  const int port = probe.port();
  probe.Shutdown(absl::ZeroDuration());
  probe.Wait();
  return port;
}

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_RPC_FIXTURE_H_
