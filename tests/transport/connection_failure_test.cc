// connection_failure_test.cc: a Connection whose peer vanishes with RDMA
// WRITEs in flight, and a disconnect with receives posted — each with the
// exact completions the device must report (softrdma::TakeErrorCqes) and the
// outcome for the calls. A closing connection also posts one signalled drain
// marker (Connection::PostDrainMarker), flushed like the rest.
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/connection_pool.h"
#include "runtime/transport/device.h"

namespace rdmarpc {
namespace internal {
namespace {

constexpr size_t kLarge = 100000;  // bytes: above the 8 KiB eager limit

// A listener on its own loop. Echoes each request's payload, except in
// `vanish_after` mode: it holds requests until that many have arrived, then
// makes their client vanish (softrdma::VanishPeer on its end of the link)
// and only then answers them all, so every answer is in flight to nobody.
class Server final : public CmEventHandler, public ConnectionHandler {
 public:
  explicit Server(int recv_depth) : recv_depth_(recv_depth), device_(64 << 20, 64 << 20), loop_("srv") {}
  ~Server() override {
    loop_.Stop([this] { listen_.reset(); });
  }
  int Start() {
    EXPECT_TRUE(loop_.Start().ok());
    absl::Notification n;
    int port = 0;
    loop_.Post([&] {
      absl::StatusOr<CmIdPtr> id =
          CreateCmId(loop_.event_channel(), static_cast<CmEventHandler*>(this));
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
    absl::StatusOr<HandshakeData> h =
        DecodeHandshake(ev.private_data.data(), ev.private_data.size());
    ASSERT_TRUE(h.ok());
    ConnectionOptions o;
    o.recv_depth = recv_depth_;
    // Every large response (one piece each) in flight at once, so a peer
    // that vanishes leaves eight WRITE_WITH_IMMs on the QP.
    o.rendezvous_chunks_in_flight = 8;
    absl::StatusOr<Connection*> c = Connection::Accept(&loop_, &device_, ev.id, *h, o, this);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::MutexLock l(&mu_);
    conns_.push_back(*c);
  }
  void OnClosed(Connection* c, const absl::Status& why) override {
    absl::MutexLock l(&mu_);
    closed_.push_back(why);
    conns_.erase(std::remove(conns_.begin(), conns_.end(), c), conns_.end());
  }
  void OnRequest(Connection* c, const IncomingRequest& req) override {
    requests_.fetch_add(1);
    if (hold_.load()) return;  // never answered
    std::string body(req.payload);
    if (vanish_after_.load() == 0) {
      c->SendResponse(req.token, absl::StatusCode::kOk, "", std::move(body));
      return;
    }
    held_.push_back({req.token, std::move(body)});
    if (static_cast<int>(held_.size()) < vanish_after_.load()) return;
    vanish_after_ = 0;
    vanished_qp_num_ = c->cm_id()->qp->qp_num;
    EXPECT_EQ(softrdma::VanishPeer(c->cm_id()), 0);
    for (auto& [token, payload] : held_) {
      c->SendResponse(token, absl::StatusCode::kOk, "", std::move(payload));
    }
    held_.clear();
    vanished_.Notify();
  }
  // Loop thread: the server's end of the first (only) connection.
  void RunOnLoop(absl::AnyInvocable<void()> fn) {
    absl::Notification done;
    loop_.Post([&] {
      fn();
      done.Notify();
    });
    done.WaitForNotification();
  }
  Connection* first_conn() {
    absl::MutexLock l(&mu_);
    return conns_.empty() ? nullptr : conns_.front();
  }
  std::vector<absl::Status> closed() {
    absl::MutexLock l(&mu_);
    return closed_;
  }

  std::atomic<bool> hold_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> vanish_after_{0};
  absl::Notification vanished_;
  uint32_t vanished_qp_num_ = 0;  // set before vanished_ is notified

 private:
  const int recv_depth_;
  DeviceResources device_;
  EventLoop loop_;
  CmIdPtr listen_;
  std::vector<std::pair<RequestToken, std::string>> held_;  // loop thread
  absl::Mutex mu_;
  std::vector<Connection*> conns_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
};

class Sink final : public ResponseSink {
 public:
  void OnResponse(absl::StatusCode code, absl::string_view, absl::string_view payload) override {
    status = absl::Status(code, "");
    body = std::string(payload);
    at = absl::Now();
    done.Notify();
  }
  void OnFailure(absl::Status s) override {
    status = s;
    at = absl::Now();
    done.Notify();
  }
  absl::Status status;
  std::string body;
  absl::Time at;
  absl::Notification done;
};

SocketAddress Loopback(int port) {
  return *SocketAddress::FromIp("127.0.0.1", static_cast<uint16_t>(port));
}

std::vector<softrdma::ErrorCqe> ErrorsOf(const std::vector<softrdma::ErrorCqe>& all,
                                         uint32_t qp_num, bool recv) {
  std::vector<softrdma::ErrorCqe> out;
  for (const auto& e : all) {
    if (e.qp_num == qp_num && e.recv == recv) out.push_back(e);
  }
  return out;
}

// "wr_id status, ..." of `cqes`, for failure messages.
std::string Describe(const std::vector<softrdma::ErrorCqe>& cqes) {
  std::string out;
  for (const auto& e : cqes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", e.wr_id, " ", ibv_wc_status_str(e.status));
  }
  return out;
}

// Issue 3, failure 1. Eight large calls; the server pushes the eight
// responses with RDMA WRITE_WITH_IMM right after their client vanished
// (crashed: no ACK, no FIN). Nothing in the protocol makes the server give
// up on a response earlier, so, as on a NIC, its QP's transport timer does
// (timeout 14, retry_cnt 7: 8 x 67 ms): the head WRITE completes with
// IBV_WC_RETRY_EXC_ERR and the seven behind it with IBV_WC_WR_FLUSH_ERR.
// The server then closes the connection; the client, alive after all in
// this test, sees the link end: all eight calls fail UNAVAILABLE well
// within their 5 s deadline, none stays pending, and its pool replaces the
// connection: the next call succeeds on a new QP.
TEST(ConnectionFailure, PeerVanishesWithEightWritesInFlight) {
  Server server(/*recv_depth=*/64);
  const int port = server.Start();
  softrdma::TakeErrorCqes();
  EventLoop loop("cli");
  ASSERT_TRUE(loop.Start().ok());
  DeviceResources device(64 << 20, 64 << 20);
  {
    ConnectionPool pool(Loopback(port), "test-server", 1, {&loop}, &device, ConnectionOptions());
    // A first call makes the connection.
    Sink warm;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = "warm";
      (*c)->StartCall(std::move(r), &warm);
    });
    ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(warm.status.ok()) << warm.status;

    constexpr int kCalls = 8;
    server.vanish_after_ = kCalls;
    Sink sinks[kCalls];
    uint32_t client_qp_num = 0;
    const absl::Time start = absl::Now();
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      client_qp_num = (*c)->cm_id()->qp->qp_num;
      for (int i = 0; i < kCalls; ++i) {
        OutgoingRequest r;
        r.method = "/t.S/M";
        r.payload = std::string(kLarge, static_cast<char>('a' + i));
        r.deadline = absl::Now() + absl::Seconds(5);
        (*c)->StartCall(std::move(r), &sinks[i]);
      }
    });
    ASSERT_TRUE(server.vanished_.WaitForNotificationWithTimeout(absl::Seconds(10)));
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(sinks[i].done.WaitForNotificationWithTimeout(absl::Seconds(10))) << i;
      EXPECT_EQ(sinks[i].status.code(), absl::StatusCode::kUnavailable) << sinks[i].status;
      EXPECT_LT(sinks[i].at - start, absl::Seconds(5)) << "call " << i << " outlived its deadline";
    }
    // The client's Close ran on its loop thread; let it finish.
    absl::Notification closed;
    loop.Post([&] { closed.Notify(); });
    closed.WaitForNotification();
    // The server's eight WRITE_WITH_IMMs: one retry-exceeded, seven flushed.
    const std::vector<softrdma::ErrorCqe> all = softrdma::TakeErrorCqes();
    // Then the drain marker the closing connection posts (a 9th, flushed).
    const auto writes = ErrorsOf(all, server.vanished_qp_num_, /*recv=*/false);
    ASSERT_EQ(writes.size(), 9u);
    EXPECT_EQ(writes[0].status, IBV_WC_RETRY_EXC_ERR);
    for (int i = 1; i < 9; ++i) {
      EXPECT_EQ(writes[i].status, IBV_WC_WR_FLUSH_ERR) << i;
      EXPECT_EQ(writes[i].wr_id, writes[0].wr_id + i);
    }
    // Its 64 receives flushed too. The client had no send in flight: its
    // only send CQE is its own drain marker, after the warm call's SEND and,
    // per large request, the BIND_MWs of its request and reply buffers and
    // its SEND (exposure_table.h).
    const auto server_recvs = ErrorsOf(all, server.vanished_qp_num_, /*recv=*/true);
    EXPECT_EQ(server_recvs.size(), 64u);
    const auto client_sends = ErrorsOf(all, client_qp_num, /*recv=*/false);
    ASSERT_EQ(client_sends.size(), 1u);
    EXPECT_EQ(client_sends[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(client_sends[0].wr_id, 1u + 3u * kCalls);
    EXPECT_EQ(ErrorsOf(all, client_qp_num, /*recv=*/true).size(), 64u);
    ASSERT_EQ(server.closed().size(), 1u);
    EXPECT_NE(server.closed()[0].message().find("transport retry counter exceeded"),
              std::string::npos)
        << server.closed()[0];

    // The pool replaces the connection.
    Sink again;
    uint32_t new_qp_num = 0;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = std::string(kLarge, 'z');
      (*c)->StartCall(std::move(r), &again);
    });
    ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(again.status.ok()) << again.status;
    EXPECT_EQ(again.body, std::string(kLarge, 'z'));
    absl::Notification read;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);  // established by now
      if (c.ok() && (*c)->cm_id() != nullptr && (*c)->cm_id()->qp != nullptr) {
        new_qp_num = (*c)->cm_id()->qp->qp_num;
      }
      read.Notify();
    });
    read.WaitForNotification();
    EXPECT_NE(new_qp_num, 0u);
    EXPECT_NE(new_qp_num, client_qp_num);
    // Drop the pool's connection on its loop before the pool goes.
    loop.Stop();
  }
}

// The other side of failure 1: the SERVER vanishes (crashed host: no ACK, no
// FIN) under eight calls whose requests the client has just posted. The
// client's QP gives up through the transport timeout: its head request SEND
// completes with IBV_WC_RETRY_EXC_ERR, the seven behind it flush (then the
// closing connection's drain marker); every call fails UNAVAILABLE within
// its 5 s deadline naming the cause, and the pool's next call succeeds on a
// new connection.
TEST(ConnectionFailure, ServerVanishesUnderEightRequestsInFlight) {
  Server server(/*recv_depth=*/64);
  const int port = server.Start();
  EventLoop loop("cli");
  ASSERT_TRUE(loop.Start().ok());
  DeviceResources device(64 << 20, 64 << 20);
  {
    ConnectionPool pool(Loopback(port), "test-server", 1, {&loop}, &device, ConnectionOptions());
    Sink warm;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = "warm";
      (*c)->StartCall(std::move(r), &warm);
    });
    ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(warm.status.ok()) << warm.status;
    softrdma::TakeErrorCqes();

    constexpr int kCalls = 8;
    Sink sinks[kCalls];
    uint32_t client_qp_num = 0;
    const absl::Time start = absl::Now();
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      client_qp_num = (*c)->cm_id()->qp->qp_num;
      EXPECT_EQ(softrdma::VanishPeer((*c)->cm_id()), 0);
      for (int i = 0; i < kCalls; ++i) {
        OutgoingRequest r;
        r.method = "/t.S/M";
        r.payload = std::string(100, static_cast<char>('a' + i));
        r.deadline = absl::Now() + absl::Seconds(5);
        (*c)->StartCall(std::move(r), &sinks[i]);
      }
    });
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(sinks[i].done.WaitForNotificationWithTimeout(absl::Seconds(10))) << i;
      EXPECT_EQ(sinks[i].status.code(), absl::StatusCode::kUnavailable) << sinks[i].status;
      EXPECT_NE(sinks[i].status.message().find("transport retry counter exceeded"),
                std::string::npos)
          << sinks[i].status;
      EXPECT_LT(sinks[i].at - start, absl::Seconds(5)) << "call " << i << " outlived its deadline";
    }
    absl::Notification closed;
    loop.Post([&] { closed.Notify(); });
    closed.WaitForNotification();
    const std::vector<softrdma::ErrorCqe> all = softrdma::TakeErrorCqes();
    const auto sends = ErrorsOf(all, client_qp_num, /*recv=*/false);
    ASSERT_EQ(sends.size(), 9u);  // 8 requests + the drain marker
    EXPECT_EQ(sends[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(sends[0].wr_id, 1u);  // the warm-up call's request was 0
    for (int i = 1; i < 9; ++i) {
      EXPECT_EQ(sends[i].status, IBV_WC_WR_FLUSH_ERR) << i;
      EXPECT_EQ(sends[i].wr_id, static_cast<uint64_t>(1 + i));
    }
    EXPECT_EQ(ErrorsOf(all, client_qp_num, /*recv=*/true).size(), 64u);

    Sink again;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = "again";
      (*c)->StartCall(std::move(r), &again);
    });
    ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_TRUE(again.status.ok()) << again.status;
    EXPECT_EQ(again.body, "again");
    loop.Stop();
  }
}

// A server that dies while its handlers run: the eight requests were
// delivered and acknowledged, nothing of the client is in flight, and the
// calls have no deadline. The client's keepalive (keepalive.cc) probes the
// silent connection with a zero-length RDMA WRITE; the transport timeout
// fails the probe (IBV_WC_RETRY_EXC_ERR) and every call fails UNAVAILABLE
// instead of hanging.
void ServerDiesWithCallsPending(absl::Duration keepalive_interval) {
  Server server(/*recv_depth=*/64);
  const int port = server.Start();
  EventLoop loop("cli");
  ASSERT_TRUE(loop.Start().ok());
  DeviceResources device(64 << 20, 64 << 20);
  {
    ConnectionOptions options;
    options.keepalive_interval = keepalive_interval;
    ConnectionPool pool(Loopback(port), "test-server", 1, {&loop}, &device, options);
    Sink warm;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = "warm";
      (*c)->StartCall(std::move(r), &warm);
    });
    ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(warm.status.ok()) << warm.status;
    server.hold_ = true;
    constexpr int kCalls = 8;
    Sink sinks[kCalls];
    uint32_t client_qp_num = 0;
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok()) << c.status();
      client_qp_num = (*c)->cm_id()->qp->qp_num;
      for (int i = 0; i < kCalls; ++i) {
        OutgoingRequest r;
        r.method = "/t.S/M";
        r.payload = "held";  // no timeout_us: no deadline
        (*c)->StartCall(std::move(r), &sinks[i]);
      }
    });
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (server.requests_.load() < 1 + kCalls && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(server.requests_.load(), 1 + kCalls);
    absl::SleepFor(absl::Milliseconds(200));  // their ACKs are in: nothing in flight
    softrdma::TakeErrorCqes();
    const absl::Time died = absl::Now();
    loop.Post([&] {
      absl::StatusOr<Connection*> c = pool.Get(0);
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(softrdma::VanishPeer((*c)->cm_id()), 0);
    });
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(sinks[i].done.WaitForNotificationWithTimeout(absl::Seconds(10))) << i;
      EXPECT_EQ(sinks[i].status.code(), absl::StatusCode::kUnavailable) << sinks[i].status;
      EXPECT_NE(sinks[i].status.message().find("transport retry counter exceeded"),
                std::string::npos)
          << sinks[i].status;
      // Two keepalive intervals (1 s) plus the transport timeout (0.54 s).
      EXPECT_LT(sinks[i].at - died, absl::Seconds(5));
    }
    absl::Notification closed;
    loop.Post([&] { closed.Notify(); });
    closed.WaitForNotification();
    const auto sends = ErrorsOf(softrdma::TakeErrorCqes(), client_qp_num, /*recv=*/false);
    ASSERT_EQ(sends.size(), 2u) << Describe(sends);  // the probe, then the drain marker
    EXPECT_EQ(sends[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(sends[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(sends[1].wr_id, sends[0].wr_id + 1);
    loop.Stop();
  }
}

TEST(ConnectionFailure, ServerDiesWithCallsPendingAndNothingInFlight) {
  ServerDiesWithCallsPending(ConnectionOptions().keepalive_interval);  // 1 s
}

// The same with a keepalive interval (100 ms) well below the transport
// timeout (0.54 s), as with a NIC's longer timeouts: still one probe, which
// fails RETRY_EXC_ERR, and no second probe flushed behind it (before, one
// went out every interval until the first failed).
TEST(ConnectionFailure, KeepaliveShorterThanTheTransportTimeoutSendsOneProbe) {
  ServerDiesWithCallsPending(absl::Milliseconds(100));
}

// Issue 3, failure 5. Both ends keep exactly 4 receives posted; the server
// disconnects. Each QP reports exactly four receive flushes, and both
// connections are torn down (QPs destroyed) well within 5 s.
TEST(ConnectionFailure, DisconnectWithFourReceivesPostedFlushesFourAndTearsDown) {
  const int64_t qps_before = softrdma::GetStats().live_qps;
  const int64_t ids_before = softrdma::GetStats().live_cm_ids;
  Server server(/*recv_depth=*/4);
  const int port = server.Start();
  EventLoop loop("cli");
  ASSERT_TRUE(loop.Start().ok());
  DeviceResources device(0, 0);
  class Handler final : public ConnectionHandler {
   public:
    void OnClosed(Connection*, const absl::Status& why) override {
      status = why;
      closed.Notify();
    }
    absl::Status status;
    absl::Notification closed;
  } handler;
  Sink sink;
  loop.Post([&] {
    ConnectionOptions o;
    o.recv_depth = 4;
    absl::StatusOr<Connection*> c =
        Connection::Connect(&loop, &device, Loopback(port), "test-server", o, &handler);
    ASSERT_TRUE(c.ok()) << c.status();
    OutgoingRequest r;
    r.method = "/t.S/M";
    r.payload = "ping";
    (*c)->StartCall(std::move(r), &sink);
  });
  ASSERT_TRUE(sink.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(sink.status.ok()) << sink.status;
  EXPECT_EQ(sink.body, "ping");
  // The receive each side used is re-posted after its poll batch.
  absl::SleepFor(absl::Milliseconds(50));
  softrdma::TakeErrorCqes();
  uint32_t server_qp_num = 0;
  const absl::Time start = absl::Now();
  server.RunOnLoop([&] {
    Connection* c = server.first_conn();
    ASSERT_NE(c, nullptr);
    server_qp_num = c->cm_id()->qp->qp_num;
    c->Close(absl::UnavailableError("test: server disconnects"));
  });
  ASSERT_TRUE(handler.closed.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(handler.status.code(), absl::StatusCode::kUnavailable) << handler.status;
  EXPECT_NE(handler.status.message().find("peer disconnected"), std::string::npos)
      << handler.status;
  // Teardown: both QPs and ids destroyed.
  while ((softrdma::GetStats().live_qps != qps_before + 0 ||
          softrdma::GetStats().live_cm_ids != ids_before + 1) &&  // + the listener
         absl::Now() - start < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "teardown hung";
  EXPECT_EQ(softrdma::GetStats().live_qps, qps_before);
  const std::vector<softrdma::ErrorCqe> all = softrdma::TakeErrorCqes();
  ASSERT_NE(server_qp_num, 0u);
  const auto server_recvs = ErrorsOf(all, server_qp_num, /*recv=*/true);
  EXPECT_EQ(server_recvs.size(), 4u);
  for (const auto& e : server_recvs) EXPECT_EQ(e.status, IBV_WC_WR_FLUSH_ERR);
  size_t client_flushes = 0;
  for (const auto& e : all) {
    if (e.qp_num != server_qp_num && e.recv) {
      EXPECT_EQ(e.status, IBV_WC_WR_FLUSH_ERR);
      ++client_flushes;
    }
  }
  EXPECT_EQ(client_flushes, 4u);
  // No send was in flight on either side: the only send CQEs are the drain
  // markers each closing connection posts (one flushed marker per QP).
  size_t send_flushes = 0;
  for (const auto& e : all) {
    if (!e.recv) {
      EXPECT_EQ(e.status, IBV_WC_WR_FLUSH_ERR);
      ++send_flushes;
    }
  }
  EXPECT_EQ(send_flushes, 2u);
  EXPECT_EQ(all.size(), 10u);
  loop.Stop();
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
