// rpc_admin_test.cc: the admin HTTP endpoint (rdmarpc/admin.h): /metrics,
// /statusz, /healthz, errors, and how servers and client processes share
// it. Requests go over loopback with cpp-httplib's client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "rdmarpc/admin.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/metrics_text.h"
#include "tests/rpc/test_service.h"

DECLARE_string(rdmarpc_admin_listen);
DECLARE_int64(rdmarpc_spin_us);

namespace rdmarpc {
namespace test {
namespace {

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
};

Reply Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  Reply r;
  if (auto res = client.Get(path.c_str())) {
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
  }
  return r;
}

// A server with the echo service, serving the admin endpoint `admin`
// holds (so the test knows its port).
struct AdminFixture {
  AdminFixture() {
    auto a = AdminServer::Start("127.0.0.1:0");
    EXPECT_TRUE(a.ok()) << a.status();
    admin = std::move(*a);
    ServerOptions so;
    so.admin_listen = absl::StrCat("127.0.0.1:", admin->port());
    server = std::make_unique<Server>(so);
    EXPECT_TRUE(server->AddService(&echo).ok());
    absl::Status s = server->Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server->port()), ChannelOptions());
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  absl::Status Call(const std::string& text) {
    EchoRequest req;
    req.set_text(text);
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    return Echo(channel.get(), &ctx, req, &resp);
  }
  std::unique_ptr<AdminServer> admin;
  EchoService echo;
  std::unique_ptr<Server> server;
  std::shared_ptr<Channel> channel;
};

TEST(AdminEndpoint, MetricsServesTheExpositionWithCallsCountedByThemselves) {
  AdminFixture f;
  const Labels ok =
      With(CallLabels("rdmarpc.test.EchoService", "Echo", "unary"), "grpc_code", "OK");
  const Reply before = Get(f.admin->port(), "/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(before.content_type, kMetricsContentType);
  const double server0 = MetricValue(before.body, "grpc_server_handled_total", ok).value_or(-1);
  const double client0 = MetricValue(before.body, "grpc_client_handled_total", ok).value_or(0);
  ASSERT_GE(server0, 0) << "a server with an admin endpoint counts its calls from Start";
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(f.Call("hi").ok());
  const Reply after = Get(f.admin->port(), "/metrics");
  ASSERT_EQ(after.status, 200);
  EXPECT_EQ(MetricValue(after.body, "grpc_server_handled_total", ok).value_or(-1) - server0, 4);
  // The channel was made while an endpoint ran: it counts too.
  EXPECT_EQ(MetricValue(after.body, "grpc_client_handled_total", ok).value_or(-1) - client0, 4);
  EXPECT_TRUE(absl::StrContains(after.body,
                                "rdmarpc_work_requests_posted_total{opcode=\"send_with_imm\"}"));
}

TEST(AdminEndpoint, HealthzIs200WhileServingAnd503OnceShutDown) {
  AdminFixture f;
  Reply r = Get(f.admin->port(), "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  const std::string addr = absl::StrCat("127.0.0.1:", f.server->port());
  f.server->Shutdown();
  r = Get(f.admin->port(), "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, absl::StrCat("not serving: ", addr, "\n"));
  f.server->Wait();
  f.server.reset();  // a process with no server left is healthy again
  r = Get(f.admin->port(), "/healthz");
  EXPECT_EQ(r.status, 200);
}

TEST(AdminEndpoint, HealthzIs503WhileAServerDrainsInItsDestructor) {
  AdminFixture f;
  std::thread slow_call([&f] {
    EchoRequest req;
    req.set_sleep_ms(1500);
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    Echo(f.channel.get(), &ctx, req, &resp).IgnoreError();
  });
  while (f.echo.calls() == 0) absl::SleepFor(absl::Milliseconds(5));
  std::thread destroy([&f] { f.server.reset(); });  // waits for the slow call
  absl::SleepFor(absl::Milliseconds(300));
  const Reply r = Get(f.admin->port(), "/healthz");
  destroy.join();
  slow_call.join();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(Get(f.admin->port(), "/healthz").status, 200);  // no server left
}

TEST(AdminEndpoint, IdleConnectionsDoNotHoldUpAProbe) {
  AdminFixture f;
  // Idle TCP connections (a client that connected and sent nothing) hold a
  // thread each until their 1 s socket timeout; a probe meanwhile gets
  // one of the others.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(static_cast<uint16_t>(f.admin->port()));
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
    idle.push_back(fd);
  }
  httplib::Client client("127.0.0.1", f.admin->port());
  client.set_read_timeout(1);  // a kubelet's probe timeout, by default
  auto res = client.Get("/healthz");
  for (int fd : idle) close(fd);
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  // One request per connection: the endpoint closes it after answering.
  EXPECT_EQ(res->get_header_value("Connection"), "close");
}

TEST(AdminEndpoint, StatuszAfterShutdownListsNoStoppedEngine) {
  AdminFixture f;
  ASSERT_TRUE(f.Call("hi").ok());
  f.server->Shutdown();
  const Reply r = Get(f.admin->port(), "/statusz");
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(absl::StrContains(r.body, "did not answer")) << r.body;
  EXPECT_FALSE(absl::StrContains(r.body, "rdmarpc-worker-")) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, ": shutting down, ") ||
              absl::StrContains(r.body, ": stopped, "))
      << r.body;
}

TEST(AdminEndpoint, StatuszShowsServersConnectionsMemoryAndFlags) {
  const int64_t spin = FLAGS_rdmarpc_spin_us;
  FLAGS_rdmarpc_spin_us = 7;  // shows as changed, with its default
  AdminFixture f;
  ASSERT_TRUE(f.Call("hi").ok());
  const Reply r = Get(f.admin->port(), "/statusz");
  FLAGS_rdmarpc_spin_us = spin;
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  const std::string& s = r.body;
  EXPECT_TRUE(absl::StrContains(
      s, absl::StrCat("  server 127.0.0.1:", f.server->port(), ": serving, open connections 1,")))
      << s;
  EXPECT_TRUE(absl::StrContains(s, "    services: rdmarpc.test.EchoService\n")) << s;
  EXPECT_TRUE(absl::StrContains(s,
                                "call metrics on, connection authenticator off, auth metadata "
                                "processor off, 0 other interceptors\n"))
      << s;
  // Both ends of the one connection, each on its own engine.
  EXPECT_TRUE(absl::StrContains(s, "(client) state established")) << s;
  EXPECT_TRUE(absl::StrContains(s, "(server) state established")) << s;
  EXPECT_TRUE(absl::StrContains(s, " RTS\n")) << s;
  // The client's ring of 64 against the server's SRQ floor of 4: what each
  // handshake granted, and where each side's receives come from.
  EXPECT_TRUE(absl::StrContains(s, " (the peer granted 64 at the handshake), granted to the peer "))
      << s;
  EXPECT_TRUE(absl::StrContains(s, " (the peer granted 4 at the handshake), granted to the peer 64 "
                                   "in a ring with "))
      << s;
  EXPECT_TRUE(absl::StrContains(s, " on the shared receive queue with ")) << s;
  // The server's worker has one SRQ: its default 512 shared buffers plus
  // the floor of 4 round up to 3 slabs of 256 of 8 KiB.
  EXPECT_TRUE(absl::StrContains(s, "    shared receive queue: 768 buffers (6291456 bytes "
                                   "registered), "))
      << s;
  EXPECT_TRUE(absl::StrContains(s, "; 1 connection attached, ")) << s;
  // The default caps: the channel's 4 GiB; the server's room for two
  // messages of max_message_bytes, 2 x 64 MiB + 1 MiB (more than half its
  // 256 MiB pool). softrdma has type-2 windows.
  EXPECT_TRUE(absl::StrContains(s, "buffers exposed 0 (0 bytes of 4294967296, memory windows)\n"))
      << s;
  EXPECT_TRUE(absl::StrContains(s, "buffers exposed 0 (0 bytes of 135266304, memory windows)\n"))
      << s;
  EXPECT_TRUE(absl::StrContains(s, "received 1 messages")) << s;
  EXPECT_TRUE(absl::StrContains(s, "error completions 0\n")) << s;
  EXPECT_TRUE(absl::StrContains(s, "\nmemory\n  registered: ")) << s;
  EXPECT_TRUE(absl::StrContains(s, "\n  --rdmarpc_spin_us=7   (default ")) << s;
  EXPECT_TRUE(absl::StrContains(s, "\n  --rdmarpc_admin_listen=\"\"\n")) << s;
}

TEST(AdminEndpoint, UnknownPathsAre404AndOtherMethods405) {
  AdminFixture f;
  EXPECT_EQ(Get(f.admin->port(), "/nope").status, 404);
  httplib::Client client("127.0.0.1", f.admin->port());
  auto res = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
}

TEST(AdminEndpoint, ServersOnTheSameAddressShareOneEndpoint) {
  AdminFixture f;
  ServerOptions so;
  so.admin_listen = absl::StrCat("127.0.0.1:", f.admin->port());
  EchoService echo2;
  Server second(so);
  ASSERT_TRUE(second.AddService(&echo2).ok());
  ASSERT_TRUE(second.Start("127.0.0.1:0").ok());
  const Reply r = Get(f.admin->port(), "/statusz");
  EXPECT_TRUE(absl::StrContains(r.body, absl::StrCat("server 127.0.0.1:", f.server->port())));
  EXPECT_TRUE(absl::StrContains(r.body, absl::StrCat("server 127.0.0.1:", second.port())));
  // Letting go of one holder leaves the endpoint up for the others.
  const int admin_port = f.admin->port();
  f.admin.reset();
  EXPECT_EQ(Get(admin_port, "/healthz").status, 200);
}

TEST(AdminEndpoint, BadOrBusyAddressesFailStart) {
  auto bad = AdminServer::Start("127.0.0.1:notaport");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();

  // Another process (here: a plain listening socket) holds the port.
  const int other = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(other, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(other, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  ASSERT_EQ(listen(other, 1), 0);
  socklen_t len = sizeof(sin);
  ASSERT_EQ(getsockname(other, reinterpret_cast<sockaddr*>(&sin), &len), 0);
  const int taken = ntohs(sin.sin_port);
  ServerOptions so;
  so.admin_listen = absl::StrCat("127.0.0.1:", taken);
  EchoService echo;
  Server server(so);
  ASSERT_TRUE(server.AddService(&echo).ok());
  absl::Status s = server.Start("127.0.0.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("127.0.0.1:", taken))) << s;
  close(other);
}

TEST(AdminEndpoint, StartFromFlagsIsNullWithoutTheFlagAndServesWithIt) {
  ASSERT_TRUE(FLAGS_rdmarpc_admin_listen.empty());
  auto none = AdminServer::StartFromFlags();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  FLAGS_rdmarpc_admin_listen = "127.0.0.1:0";
  auto some = AdminServer::StartFromFlags();
  FLAGS_rdmarpc_admin_listen = "";
  ASSERT_TRUE(some.ok()) << some.status();
  ASSERT_NE(*some, nullptr);
  EXPECT_EQ(Get((*some)->port(), "/healthz").status, 200);
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
