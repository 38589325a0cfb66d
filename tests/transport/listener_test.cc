// Listener: accepts onto its targets' loops in turn, answers through the
// target's handler, and rejects when it stops accepting, for another
// protocol version, or a bind it cannot make.
#include "runtime/transport/listener.h"

#include <arpa/inet.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "runtime/transport/transport.h"

namespace rdmarpc {
namespace internal {
namespace {

SocketAddress Loopback(int port) {
  return *SocketAddress::FromIp("127.0.0.1", static_cast<uint16_t>(port));
}

// A worker: its loop owns the accepted connections; requests are answered
// with the worker's name.
class Worker final : public ConnectionHandler {
 public:
  explicit Worker(std::string name) : name_(name), loop_(std::move(name)) {
    EXPECT_TRUE(loop_.Start().ok());
  }
  ~Worker() override { loop_.Stop(); }
  void OnRequest(Connection* c, const IncomingRequest& req) override {
    c->SendResponse(req.token, absl::StatusCode::kOk, "", name_);
  }
  EventLoop* loop() { return &loop_; }

 private:
  const std::string name_;
  EventLoop loop_;
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

// One call on a new client connection to `port`; waits for its end.
struct Client {
  Client() : device(0, 64 << 20), loop("cli") { EXPECT_TRUE(loop.Start().ok()); }
  ~Client() { loop.Stop(); }
  void Call(int port, Sink* sink) {
    loop.Post([this, port, sink] {
      absl::StatusOr<Connection*> c = Connection::Connect(&loop, &device, Loopback(port), "srv",
                                                          ConnectionOptions(), nullptr);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = "hi";
      (*c)->StartCall(std::move(r), sink);
    });
    ASSERT_TRUE(sink->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  DeviceResources device;
  EventLoop loop;
};

class ListenerTest : public ::testing::Test {
 protected:
  ListenerTest() : device_(64 << 20, 64 << 20), w0_("w0"), w1_("w1") {}
  // Makes the listener (not yet listening).
  void Make(Listener::Options o = Listener::Options()) {
    listener_ = std::make_unique<Listener>(
        &device_, std::move(o),
        std::vector<Listener::Target>{{w0_.loop(), &w0_}, {w1_.loop(), &w1_}},
        [this](size_t target, Connection*) {
          // On the target's own loop.
          EventLoop* loop = target == 0 ? w0_.loop() : w1_.loop();
          EXPECT_TRUE(loop->InLoopThread());
          absl::MutexLock lock(&mu_);
          accepted_.push_back(target);
        });
  }
  std::vector<size_t> accepted() {
    absl::MutexLock lock(&mu_);
    return accepted_;
  }
  ~ListenerTest() override {
    if (listener_ != nullptr) listener_->Close();
  }

  DeviceResources device_;
  Worker w0_, w1_;
  std::unique_ptr<Listener> listener_;
  absl::Mutex mu_;
  std::vector<size_t> accepted_;
};

TEST_F(ListenerTest, AcceptsOntoItsTargetsInTurn) {
  Make();
  ASSERT_TRUE(listener_->Listen(Loopback(0), "127.0.0.1:0").ok());
  ASSERT_GT(listener_->port(), 0);
  Client client;
  Sink first, second;
  client.Call(listener_->port(), &first);
  client.Call(listener_->port(), &second);
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(first.body, "w0");
  EXPECT_EQ(second.body, "w1");
  EXPECT_EQ(accepted(), (std::vector<size_t>{0, 1}));
}

TEST_F(ListenerTest, AsksForConnectionOptionsPerRequest) {
  std::atomic<int> asked{0};
  Listener::Options o;
  o.connection_options = [&asked] {
    asked.fetch_add(1);
    return ConnectionOptions();
  };
  Make(std::move(o));
  ASSERT_TRUE(listener_->Listen(Loopback(0), "127.0.0.1:0").ok());
  Client client;
  Sink sink;
  client.Call(listener_->port(), &sink);
  EXPECT_TRUE(sink.status.ok()) << sink.status;
  EXPECT_EQ(asked.load(), 1);
}

TEST_F(ListenerTest, StoppedAcceptingRejectsAsShuttingDown) {
  Make();
  ASSERT_TRUE(listener_->Listen(Loopback(0), "127.0.0.1:0").ok());
  listener_->StopAccepting();
  Client client;
  Sink sink;
  client.Call(listener_->port(), &sink);
  EXPECT_EQ(sink.status.code(), absl::StatusCode::kUnavailable) << sink.status;
  EXPECT_NE(sink.status.message().find("shutting down"), std::string::npos) << sink.status;
  EXPECT_TRUE(accepted().empty());
}

TEST_F(ListenerTest, AnotherProtocolVersionIsRejectedNamingBoth) {
  Listener::Options o;
  o.protocol_version = [] { return static_cast<uint16_t>(kProtocolVersion + 1); };
  Make(std::move(o));
  ASSERT_TRUE(listener_->Listen(Loopback(0), "127.0.0.1:0").ok());
  Client client;
  Sink sink;
  client.Call(listener_->port(), &sink);
  EXPECT_EQ(sink.status.code(), absl::StatusCode::kFailedPrecondition) << sink.status;
  EXPECT_NE(sink.status.message().find(std::to_string(kProtocolVersion + 1)), std::string::npos);
  EXPECT_TRUE(accepted().empty());
}

TEST_F(ListenerTest, ClosedListenerRefusesConnections) {
  Make();
  ASSERT_TRUE(listener_->Listen(Loopback(0), "127.0.0.1:0").ok());
  const int port = listener_->port();
  listener_->Close();
  listener_->Close();  // idempotent
  Client client;
  Sink sink;
  client.Call(port, &sink);
  EXPECT_EQ(sink.status.code(), absl::StatusCode::kUnavailable) << sink.status;
}

TEST_F(ListenerTest, BindToAnAddressNotHereFails) {
  Make();
  // TEST-NET-3: on no interface here.
  const SocketAddress sa = *SocketAddress::FromIp("203.0.113.7", 0);
  absl::Status s = listener_->Listen(sa, "203.0.113.7:0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(listener_->port(), 0);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
