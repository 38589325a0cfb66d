// Rendezvous transfers in pieces (runtime/transport/rendezvous.cc): a large
// request pulled by RDMA READs and a large response pushed by RDMA WRITEs,
// each kRendezvousChunkBytes-sized piece a WR of its own, with small frames
// of other calls posted between them; a cancelled pull stops.
#include <arpa/inet.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"
#include "runtime/transport/connection.h"
#include "runtime/transport/device.h"
#include "runtime/transport/event_loop.h"
#include "runtime/transport/listener.h"

namespace rdmarpc {
namespace internal {
namespace {

constexpr size_t kSmall = 64;

ConnectionOptions Chunked(size_t chunk_bytes, int in_flight) {
  ConnectionOptions o;
  o.rendezvous_chunk_bytes = chunk_bytes;
  o.rendezvous_chunks_in_flight = in_flight;
  // The same pacing when only bulk moves, so piece counts are exact.
  o.rendezvous_bulk_chunk_bytes = chunk_bytes;
  o.rendezvous_bulk_chunks_in_flight = in_flight;
  return o;
}

// The transport's Listener accepting onto one loop; answers each request
// with its payload reversed and counts the large requests (above kSmall
// bytes) it was handed.
class ReverseServer final : public ConnectionHandler {
 public:
  // `keep_bytes` 0: every large buffer put back is freed at once, so
  // AddressSanitizer sees a device access to one freed too early.
  explicit ReverseServer(ConnectionOptions options, size_t keep_bytes = 256 << 20)
      : device_(256 << 20, keep_bytes), loop_("srv") {
    Listener::Options lo;
    lo.connection_options = [options] { return options; };
    listener_ = std::make_unique<Listener>(&device_, std::move(lo),
                                           std::vector<Listener::Target>{{&loop_, this}},
                                           [](size_t, Connection*) {});
  }
  ~ReverseServer() override {
    listener_->Close();
    loop_.Stop();
  }
  int Start() {
    EXPECT_TRUE(loop_.Start().ok());
    absl::Status s = listener_->Listen(*SocketAddress::FromIp("127.0.0.1", 0), "127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    return listener_->port();
  }
  void OnRequest(Connection* c, const IncomingRequest& req) override {
    if (req.payload.size() > kSmall) large_requests_.fetch_add(1);
    std::string out(req.payload.rbegin(), req.payload.rend());
    // Twice the request: too large for the reply buffer the client
    // advertised, so the response is exposed and the client pulls it.
    if (double_response_) out += out;
    c->SendResponse(req.token, absl::StatusCode::kOk, "", std::move(out));
  }
  int large_requests() const { return large_requests_.load(); }
  void set_double_response() { double_response_ = true; }

 private:
  std::atomic<int> large_requests_{0};
  bool double_response_ = false;
  DeviceResources device_;
  EventLoop loop_;
  std::unique_ptr<Listener> listener_;
};

class Sink final : public ResponseSink {
 public:
  explicit Sink(std::atomic<int>* order = nullptr) : order_(order) {}
  void OnSent() override { sent.Notify(); }
  void OnResponse(absl::StatusCode code, absl::string_view, absl::string_view payload) override {
    status = absl::Status(code, "");
    body = std::string(payload);
    End();
  }
  void OnFailure(absl::Status s) override {
    status = s;
    End();
  }
  absl::Status status;
  std::string body;
  int finished_as = 0;  // 1 for the first sink sharing `order_` to finish, ...
  absl::Notification sent, done;

 private:
  void End() {
    if (order_ != nullptr) finished_as = order_->fetch_add(1) + 1;
    done.Notify();
  }
  std::atomic<int>* order_;
};

struct Client {
  explicit Client(ConnectionOptions options, size_t keep_bytes = 256 << 20)
      : options(options), device(0, keep_bytes), loop("cli") {
    EXPECT_TRUE(loop.Start().ok());
  }
  ~Client() { loop.Stop(); }
  // On the loop: connects to `port` (first call) and starts a call.
  uint32_t Call(int port, std::string payload, Sink* sink) {
    uint32_t handle = 0;
    absl::Notification n;
    loop.Post([&] {
      if (conn == nullptr) {
        const SocketAddress sa = *SocketAddress::FromIp("127.0.0.1", static_cast<uint16_t>(port));
        absl::StatusOr<Connection*> c =
            Connection::Connect(&loop, &device, sa, "test-server", options, nullptr);
        EXPECT_TRUE(c.ok()) << c.status();
        conn = *c;
      }
      OutgoingRequest r;
      r.method = "/t.S/M";
      r.payload = std::move(payload);
      handle = conn->StartCall(std::move(r), sink);
      n.Notify();
    });
    n.WaitForNotification();
    return handle;
  }
  void Cancel(uint32_t handle) {
    absl::Notification n;
    loop.Post([&] {
      conn->CancelCall(handle);
      n.Notify();
    });
    n.WaitForNotification();
  }
  const ConnectionOptions options;
  DeviceResources device;
  EventLoop loop;
  Connection* conn = nullptr;
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

TEST(Rendezvous, RequestPulledAndResponsePushedInPiecesByteExact) {
  const ConnectionOptions o = Chunked(64 << 10, 2);
  ReverseServer server(o);
  const int port = server.Start();
  Client client(o);
  Sink warm;  // connects; small, so no READ or WRITE
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(warm.status.ok()) << warm.status;

  const std::string big = Pattern((1 << 20) + 1000);
  softrdma::ResetStats();
  Sink large;
  client.Call(port, big, &large);
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(large.status.ok()) << large.status;
  EXPECT_EQ(large.body, std::string(big.rbegin(), big.rend()));
  const softrdma::Stats st = softrdma::GetStats();
  // The request: 1049576 bytes = 16 x 65536 + 1000, the last 66536 (within
  // a quarter piece of 65536) in one: 16 READs. The response (32-byte
  // header + 1049576 bytes) fits the reply buffer: 65536 bytes with the
  // header in the WRITE_WITH_IMM, the other 984072 = 15 x 65536 + 1032 in
  // 15 plain WRITEs.
  EXPECT_EQ(st.rdma_read, 16u);
  EXPECT_EQ(st.rdma_write, 15u);
  EXPECT_EQ(st.rdma_write_with_imm, 1u);
  EXPECT_EQ(server.large_requests(), 1);
}

TEST(Rendezvous, ResponseSmallerThanOnePieceIsOneWriteWithImm) {
  const ConnectionOptions o = Chunked(1 << 20, 2);
  ReverseServer server(o);
  const int port = server.Start();
  Client client(o);
  const std::string big = Pattern(300000);
  softrdma::ResetStats();
  Sink large;
  client.Call(port, big, &large);
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(large.status.ok()) << large.status;
  EXPECT_EQ(large.body, std::string(big.rbegin(), big.rend()));
  const softrdma::Stats st = softrdma::GetStats();
  EXPECT_EQ(st.rdma_read, 1u);
  EXPECT_EQ(st.rdma_write, 0u);
  EXPECT_EQ(st.rdma_write_with_imm, 1u);
}

TEST(Rendezvous, SmallCallAnsweredWhileALargeRequestIsStillBeingPulled) {
  // One 64 KiB piece in flight: the 16 MiB request takes 256 READ round
  // trips; a small call sent after it is answered between two of them.
  const ConnectionOptions o = Chunked(64 << 10, 1);
  ReverseServer server(o);
  const int port = server.Start();
  Client client(o);
  Sink warm;
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));

  std::atomic<int> order{0};
  const std::string big = Pattern(16 << 20);
  Sink large(&order), small(&order);
  client.Call(port, big, &large);
  client.Call(port, "xyz", &small);
  ASSERT_TRUE(small.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(small.status.ok()) << small.status;
  EXPECT_EQ(small.body, "zyx");
  const int large_seen_when_small_done = server.large_requests();
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(large.status.ok()) << large.status;
  EXPECT_EQ(large.body, std::string(big.rbegin(), big.rend()));
  EXPECT_EQ(small.finished_as, 1);
  EXPECT_EQ(large.finished_as, 2);
  EXPECT_EQ(large_seen_when_small_done, 0)
      << "the small call waited for the whole 16 MiB pull";
}

TEST(Rendezvous, CancelledRequestStopsBeingPulledAndIsNeverDelivered) {
  // 4 KiB pieces, one in flight: 4096 READs for the 16 MiB request, so the
  // cancel lands in the middle of the pull.
  const ConnectionOptions o = Chunked(4 << 10, 1);
  ReverseServer server(o);
  const int port = server.Start();
  Client client(o);
  Sink warm;
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));

  softrdma::ResetStats();
  Sink large;
  const uint32_t handle = client.Call(port, Pattern(16 << 20), &large);
  ASSERT_NE(handle, 0u);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (softrdma::GetStats().rdma_read < 8 && absl::Now() < give_up) {
    absl::SleepFor(absl::Microseconds(100));
  }
  ASSERT_GE(softrdma::GetStats().rdma_read, 8u) << "the pull never started";
  client.Cancel(handle);
  // A small call behind the cancel: answered once the server handled it.
  Sink after;
  client.Call(port, "q", &after);
  ASSERT_TRUE(after.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(after.status.ok()) << after.status;
  absl::SleepFor(absl::Milliseconds(200));  // pieces still in flight end
  const uint64_t reads = softrdma::GetStats().rdma_read;
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(softrdma::GetStats().rdma_read, reads) << "pieces still posted after the cancel";
  EXPECT_LT(reads, 4096u);
  EXPECT_EQ(server.large_requests(), 0);
  EXPECT_FALSE(large.done.HasBeenNotified());  // a cancelled call's sink is never called
}

// The link dies while a large response is being pushed (and, below, while a
// large request is being pulled): the call fails UNAVAILABLE and no buffer
// is freed while the device may still write or read it (pools keep
// nothing, so AddressSanitizer sees a device access to a freed buffer).
void DropMidTransfer(uint64_t drop_after_bytes) {
  const ConnectionOptions o = Chunked(16 << 10, 2);
  ReverseServer server(o, /*keep_bytes=*/0);
  const int port = server.Start();
  Client client(o, /*keep_bytes=*/0);
  Sink warm;
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(warm.status.ok()) << warm.status;
  softrdma::ResetFaults();
  softrdma::DropAfterBytes(drop_after_bytes);
  Sink large;
  client.Call(port, Pattern(4 << 20), &large);
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(large.status.code(), absl::StatusCode::kUnavailable) << large.status;
  softrdma::ResetFaults();
  absl::SleepFor(absl::Milliseconds(300));  // flushes and teardown
}

TEST(Rendezvous, LinkLostMidPushFailsTheCallAndFreesNoBufferInUse) {
  // 4 MiB pulled, then ~1 MiB of the 4 MiB push: dies in the push.
  DropMidTransfer((4u << 20) + (1u << 20));
}

TEST(Rendezvous, LinkLostMidPullFailsTheCallAndFreesNoBufferInUse) {
  DropMidTransfer(1u << 20);
}

TEST(Rendezvous, ResponsePullOfACancelledCallStopsAndReleasesTheServersBuffer) {
  // The server exposes a 32 MiB response; the client pulls it in 4 KiB
  // pieces (8192 READs) and cancels the call after a few.
  ConnectionOptions server_options = Chunked(1 << 20, 2);
  ReverseServer server(server_options);
  server.set_double_response();
  const int port = server.Start();
  ConnectionOptions client_options = Chunked(4 << 10, 1);
  Client client(client_options);
  Sink warm;
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(warm.status.ok()) << warm.status;

  const size_t request_bytes = 16 << 20;
  const size_t request_pieces = (request_bytes + (1 << 20) - 1) >> 20;  // the server's pull
  softrdma::ResetStats();
  Sink large;
  const uint32_t handle = client.Call(port, Pattern(request_bytes), &large);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (softrdma::GetStats().rdma_read < request_pieces + 8 && absl::Now() < give_up) {
    absl::SleepFor(absl::Microseconds(100));
  }
  ASSERT_GE(softrdma::GetStats().rdma_read, request_pieces + 8) << "the response pull never started";
  client.Cancel(handle);
  Sink after;  // the connection carries on
  client.Call(port, "q", &after);
  ASSERT_TRUE(after.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(after.body, "qq");
  absl::SleepFor(absl::Milliseconds(200));
  const uint64_t reads = softrdma::GetStats().rdma_read;
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(softrdma::GetStats().rdma_read, reads) << "pieces still posted after the cancel";
  EXPECT_LT(reads, request_pieces + 8192);
  EXPECT_FALSE(large.done.HasBeenNotified());
}

TEST(Rendezvous, OnlyBulkMovingSwitchesToLargePiecesAfterTheBulkThreshold) {
  // 64 KiB pieces while small messages flow, 1 MiB ones once
  // kRendezvousBulkAfterPieces pieces went by without one: a 16 MiB request
  // alone is 64 small pieces (4 MiB) then 12 large ones.
  ConnectionOptions o = Chunked(64 << 10, 2);
  o.rendezvous_bulk_chunk_bytes = 1 << 20;
  o.rendezvous_bulk_chunks_in_flight = 4;
  ReverseServer server(o);
  const int port = server.Start();
  Client client(Chunked(1 << 20, 4));
  Sink warm;
  client.Call(port, "abc", &warm);
  ASSERT_TRUE(warm.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The warm-up was small: the server starts in the small pacing.
  const std::string big = Pattern(16 << 20);
  softrdma::ResetStats();
  Sink large;
  client.Call(port, big, &large);
  ASSERT_TRUE(large.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(large.status.ok()) << large.status;
  EXPECT_EQ(large.body, std::string(big.rbegin(), big.rend()));
  static_assert(kRendezvousBulkAfterPieces == 64, "the counts below assume 64");
  EXPECT_EQ(softrdma::GetStats().rdma_read, 64u + 12u);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
