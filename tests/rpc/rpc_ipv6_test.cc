// rpc_ipv6_test.cc: servers listen on IPv6 addresses ([::1], the wildcard
// [::]) and channels dial them, plain or with gRPC's ipv6: scheme; runs on
// both softrdma links (same-host shared memory, and TCP as .tcp).
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

absl::Status EchoOver(Channel* channel, const std::string& data, std::string* peer,
                      std::string* echoed) {
  EchoRequest req;
  req.set_text("v6");
  req.set_data(data);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(10));
  absl::Status s = Echo(channel, &ctx, req, &resp);
  *peer = ctx.peer();
  *echoed = resp.data();
  return s;
}

TEST(Ipv6, ServerOnLoopbackAnswersAChannelToIt) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("[::1]:0").ok());
  ASSERT_GT(server.port(), 0);
  const std::string address = absl::StrCat("[::1]:", server.port());
  EXPECT_EQ(server.address(), address);

  for (const std::string& target : {address, absl::StrCat("ipv6:", address)}) {
    SCOPED_TRACE(target);
    auto ch = CreateChannel(target);
    ASSERT_TRUE(ch.ok()) << ch.status();
    std::string peer, echoed;
    // Eager (small) and rendezvous (1 MiB, RDMA READ and WRITE) payloads.
    for (size_t size : {size_t{16}, size_t{1} << 20}) {
      const std::string data(size, 'q');
      ASSERT_TRUE(EchoOver(ch->get(), data, &peer, &echoed).ok());
      EXPECT_EQ(echoed, data);
      EXPECT_EQ(peer, address);
    }
    // The server names its client by its IPv6 address too.
    EXPECT_TRUE(absl::StartsWith(service.last_peer(), "[::1]:")) << service.last_peer();
  }
  EXPECT_EQ(service.calls(), 4);
}

TEST(Ipv6, WildcardServerAnswersIpv6AndIpv4Clients) {
  EchoService service;
  Server server;
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("[::]:0").ok());
  EXPECT_EQ(server.address(), absl::StrCat("[::]:", server.port()));
  for (const std::string& target :
       {absl::StrCat("[::1]:", server.port()), absl::StrCat("127.0.0.1:", server.port()),
        absl::StrCat("ipv4:127.0.0.1:", server.port())}) {
    SCOPED_TRACE(target);
    auto ch = CreateChannel(target);
    ASSERT_TRUE(ch.ok()) << ch.status();
    std::string peer, echoed;
    ASSERT_TRUE(EchoOver(ch->get(), "abc", &peer, &echoed).ok());
    EXPECT_EQ(echoed, "abc");
  }
  EXPECT_EQ(service.calls(), 3);
}

TEST(Ipv6, MixedFamilyListRoundRobinsOverBoth) {
  EchoService v4_service, v6_service;
  Server v4, v6;
  ASSERT_TRUE(v4.AddService(&v4_service).ok());
  ASSERT_TRUE(v6.AddService(&v6_service).ok());
  ASSERT_TRUE(v4.Start("127.0.0.1:0").ok());
  ASSERT_TRUE(v6.Start("[::1]:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", v4.port(), ",[::1]:", v6.port()));
  ASSERT_TRUE(ch.ok()) << ch.status();
  for (int i = 0; i < 10; ++i) {
    std::string peer, echoed;
    ASSERT_TRUE(EchoOver(ch->get(), "x", &peer, &echoed).ok());
  }
  EXPECT_EQ(v4_service.calls(), 5);
  EXPECT_EQ(v6_service.calls(), 5);
}

TEST(Ipv6, ConnectingToAnIpv6PortWithNoListenerIsUnavailable) {
  Server probe;
  ASSERT_TRUE(probe.Start("[::1]:0").ok());
  const int port = probe.port();
  probe.Shutdown(absl::ZeroDuration());
  probe.Wait();
  auto ch = CreateChannel(absl::StrCat("[::1]:", port));
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::string peer, echoed;
  absl::Status s = EchoOver(ch->get(), "x", &peer, &echoed);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("[::1]:", port))) << s;
}

TEST(Ipv6, TargetsOfTheWrongFormAreInvalidArgument) {
  struct Case {
    const char* target;
    const char* message_part;
  };
  for (const Case& c : {
           Case{"::1:7000", "an IPv6 address takes brackets, as [::1]:PORT"},
           Case{"[::1]", "is not [IPV6]:PORT"},
           Case{"[::1]:0", "port \"0\" in \"[::1]:0\" is not 1..65535"},
           Case{"[127.0.0.1]:7000", "brackets are for IPv6 addresses only"},
           Case{"[::zz]:7000", "\"::zz\" in \"[::zz]:7000\" is not an IPv6 address"},
           Case{"ipv6:127.0.0.1:7000", "\"127.0.0.1:7000\" is not [IPV6]:PORT"},
           Case{"ipv4:[::1]:7000", "\"[::1]:7000\" is not IPV4:PORT"},
           Case{"ipv4:localhost:7000", "\"localhost:7000\" is not IPV4:PORT"},
           Case{"ipv4:", "names no address"},
       }) {
    SCOPED_TRACE(c.target);
    auto ch = CreateChannel(c.target);
    ASSERT_FALSE(ch.ok());
    EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(ch.status().message(), c.message_part)) << ch.status();
  }
  Server server;
  absl::Status s = server.Start("::1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
