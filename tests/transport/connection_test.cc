// Connection and EventLoop without the rpc layer: a raw request/response
// exchange, and a dead link failing calls promptly.
#include "runtime/transport/connection.h"

#include <arpa/inet.h>

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/device.h"

namespace rdmarpc {
namespace internal {
namespace {

// A listener that accepts onto its own loop and answers each request with
// its payload reversed — or holds it when `hold` is set.
class TestServer final : public CmEventHandler, public ConnectionHandler {
 public:
  explicit TestServer(bool hold) : hold_(hold), device_(64 << 20, 64 << 20), loop_("srv") {}
  ~TestServer() override {
    loop_.Stop([this] { listen_.reset(); });
  }
  int Start() {
    EXPECT_TRUE(loop_.Start().ok());
    absl::Notification n;
    int port = 0;
    loop_.Post([&] {
      absl::StatusOr<CmIdPtr> id = CreateCmId(loop_.event_channel(), static_cast<CmEventHandler*>(this));
      EXPECT_TRUE(id.ok());
      listen_ = std::move(*id);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(Verbs().bind_addr(listen_.get(), reinterpret_cast<sockaddr*>(&sa)), 0);
      EXPECT_EQ(Verbs().listen(listen_.get(), 8), 0);
      port = ntohs(Verbs().get_src_port(listen_.get()));
      n.Notify();
    });
    n.WaitForNotification();
    return port;
  }
  void OnCmEvent(const CmEvent& ev) override {
    if (ev.type != RDMA_CM_EVENT_CONNECT_REQUEST) return;
    absl::StatusOr<HandshakeData> h = DecodeHandshake(ev.private_data.data(), ev.private_data.size());
    ASSERT_TRUE(h.ok());
    ConnectionOptions o;
    absl::StatusOr<Connection*> c = Connection::Accept(&loop_, &device_, ev.id, *h, o, this);
    ASSERT_TRUE(c.ok()) << c.status();
  }
  void OnRequest(Connection* c, const IncomingRequest& req) override {
    requests_.fetch_add(1);
    if (hold_) return;
    std::string out(req.payload.rbegin(), req.payload.rend());
    c->SendResponse(req.token, absl::StatusCode::kOk, "", std::move(out));
  }
  int requests() const { return requests_.load(); }

 private:
  const bool hold_;
  std::atomic<int> requests_{0};
  DeviceResources device_;
  EventLoop loop_;
  CmIdPtr listen_;
};

class Sink final : public ResponseSink {
 public:
  void OnResponse(absl::StatusCode code, absl::string_view, absl::string_view payload) override {
    status = absl::Status(code, "");
    body = std::string(payload);
    done.Notify();
  }
  void OnFailure(absl::Status s) override {
    status = s;
    done.Notify();
  }
  absl::Status status;
  std::string body;
  absl::Notification done;
};

struct Client {
  Client() : device(0, 64 << 20), loop("cli") { EXPECT_TRUE(loop.Start().ok()); }
  ~Client() { loop.Stop(); }
  // Starts a call on a new connection to `port`; returns the connection.
  Connection* Call(int port, std::string payload, Sink* sink) {
    Connection* conn = nullptr;
    absl::Notification n;
    loop.Post([&] {
      const SocketAddress sa = *SocketAddress::FromIp("127.0.0.1", static_cast<uint16_t>(port));
      absl::StatusOr<Connection*> c =
          Connection::Connect(&loop, &device, sa, "test-server", ConnectionOptions(), nullptr);
      EXPECT_TRUE(c.ok()) << c.status();
      conn = *c;
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = std::move(payload);
      conn->StartCall(std::move(r), sink);
      n.Notify();
    });
    n.WaitForNotification();
    return conn;
  }
  DeviceResources device;
  EventLoop loop;
};

TEST(Connection, RequestResponseEagerAndRendezvous) {
  TestServer server(/*hold=*/false);
  const int port = server.Start();
  Client client;
  Sink small;
  client.Call(port, "abc", &small);
  ASSERT_TRUE(small.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(small.status.ok()) << small.status;
  EXPECT_EQ(small.body, "cba");
  Sink large;
  std::string big(200000, 'x');
  big[0] = 'A';
  client.Call(port, big, &large);
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(large.status.ok()) << large.status;
  ASSERT_EQ(large.body.size(), big.size());
  EXPECT_EQ(large.body.back(), 'A');
  EXPECT_EQ(server.requests(), 2);
}

TEST(Connection, DroppedLinkFailsCallUnavailablePromptly) {
  TestServer server(/*hold=*/true);
  const int port = server.Start();
  Client client;
  Sink sink;
  Connection* conn = client.Call(port, "never answered", &sink);
  // Wait until the server has the request, then cut the link.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (server.requests() == 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(server.requests(), 1);
  absl::Notification dropped;
  client.loop.Post([&] {
    ASSERT_NE(conn->cm_id(), nullptr);
    EXPECT_EQ(softrdma::DropConnection(conn->cm_id()), 0);
    dropped.Notify();
  });
  dropped.WaitForNotification();
  const absl::Time start = absl::Now();
  ASSERT_TRUE(sink.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(sink.status.code(), absl::StatusCode::kUnavailable) << sink.status;
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
