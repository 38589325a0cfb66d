// rpc_access_log_test.cc: the access-log interceptors (rdmarpc/access_log.h)
// write one record per finished call, on the server and on the channel, with
// the method, peer, status, duration and message counts and sizes.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "rdmarpc/access_log.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/rpc_fixture.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

using experimental::AccessLogRecord;
using experimental::RpcType;

class Records {
 public:
  experimental::AccessLogSink Sink() {
    return [this](const AccessLogRecord& r) {
      absl::MutexLock l(&mu_);
      records_.push_back(r);
    };
  }
  std::vector<AccessLogRecord> Take() {
    absl::MutexLock l(&mu_);
    return std::move(records_);
  }

 private:
  absl::Mutex mu_;
  std::vector<AccessLogRecord> records_ ABSL_GUARDED_BY(mu_);
};

struct LoggedEcho {
  LoggedEcho() : fixture(ServerWith(&server_records), ChannelWith(&client_records)) {}
  static ServerOptions ServerWith(Records* r) {
    ServerOptions o;
    o.interceptor_creators.push_back(
        std::make_shared<experimental::ServerAccessLogFactory>(r->Sink()));
    return o;
  }
  static ChannelOptions ChannelWith(Records* r) {
    ChannelOptions o;
    o.interceptor_creators.push_back(
        std::make_shared<experimental::ClientAccessLogFactory>(r->Sink()));
    return o;
  }
  Records server_records;
  Records client_records;
  EchoFixture fixture;
};

TEST(AccessLog, AnOkUnaryCallIsOneRecordOnEachSide) {
  LoggedEcho e;
  EchoRequest req;
  req.set_text("hello");
  EchoResponse resp;
  ClientContext ctx;
  ASSERT_TRUE(Echo(e.fixture.channel.get(), &ctx, req, &resp).ok());
  const std::vector<AccessLogRecord> server = e.server_records.Take();
  const std::vector<AccessLogRecord> client = e.client_records.Take();
  ASSERT_EQ(server.size(), 1u);
  ASSERT_EQ(client.size(), 1u);
  const uint64_t req_bytes = req.ByteSizeLong();   // 7
  const uint64_t resp_bytes = resp.ByteSizeLong();  // 7: the text echoed
  EXPECT_TRUE(server[0].server);
  EXPECT_EQ(server[0].method, kEchoMethod);
  EXPECT_EQ(server[0].type, RpcType::UNARY);
  EXPECT_TRUE(server[0].status.ok()) << server[0].status;
  EXPECT_EQ(server[0].recv_messages, 1u);
  EXPECT_EQ(server[0].recv_bytes, req_bytes);
  EXPECT_EQ(server[0].sent_messages, 1u);
  EXPECT_EQ(server[0].sent_bytes, resp_bytes);
  EXPECT_EQ(server[0].peer.rfind("127.0.0.1:", 0), 0u) << server[0].peer;
  EXPECT_FALSE(client[0].server);
  EXPECT_EQ(client[0].method, kEchoMethod);
  EXPECT_TRUE(client[0].status.ok()) << client[0].status;
  EXPECT_EQ(client[0].peer, absl::StrCat("127.0.0.1:", e.fixture.server.port()));
  EXPECT_EQ(client[0].sent_messages, 1u);
  EXPECT_EQ(client[0].sent_bytes, req_bytes);
  EXPECT_EQ(client[0].recv_messages, 1u);
  EXPECT_EQ(client[0].recv_bytes, resp_bytes);
  EXPECT_GE(client[0].duration, server[0].duration);
}

TEST(AccessLog, AFailedCallRecordsItsStatusAndNoResponse) {
  LoggedEcho e;
  EchoRequest req;
  req.set_text("fail");
  req.set_sleep_ms(30);
  EchoResponse resp;
  ClientContext ctx;
  ASSERT_EQ(Echo(e.fixture.channel.get(), &ctx, req, &resp).code(), absl::StatusCode::kNotFound);
  const std::vector<AccessLogRecord> server = e.server_records.Take();
  const std::vector<AccessLogRecord> client = e.client_records.Take();
  ASSERT_EQ(server.size(), 1u);
  ASSERT_EQ(client.size(), 1u);
  EXPECT_EQ(server[0].status, absl::NotFoundError("asked to fail"));
  EXPECT_EQ(server[0].recv_messages, 1u);
  EXPECT_EQ(server[0].sent_messages, 0u);
  EXPECT_EQ(server[0].sent_bytes, 0u);
  EXPECT_GE(server[0].duration, absl::Milliseconds(30));
  EXPECT_EQ(client[0].status, absl::NotFoundError("asked to fail"));
  EXPECT_EQ(client[0].recv_messages, 0u);
  EXPECT_EQ(client[0].sent_messages, 1u);
  EXPECT_GE(client[0].duration, absl::Milliseconds(30));
  const std::string line = experimental::FormatAccessLogRecord(server[0]);
  EXPECT_TRUE(absl::StrContains(
      line, absl::StrCat("access server ", kEchoMethod, " peer=", server[0].peer,
                         " status=NOT_FOUND:\"asked to fail\" duration_us=")))
      << line;
}

TEST(AccessLog, ACallThatReachedNoServerHasNoPeer) {
  Records records;
  int port = 0;
  {
    Server probe;
    ASSERT_TRUE(probe.Start("127.0.0.1:0").ok());
    port = probe.port();
    probe.Shutdown(absl::ZeroDuration());
    probe.Wait();
  }
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", port), LoggedEcho::ChannelWith(&records));
  ASSERT_TRUE(ch.ok()) << ch.status();
  EchoRequest req;
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(3));
  ASSERT_EQ(Echo(ch->get(), &ctx, req, &resp).code(), absl::StatusCode::kUnavailable);
  const std::vector<AccessLogRecord> client = records.Take();
  ASSERT_EQ(client.size(), 1u);
  EXPECT_EQ(client[0].peer, "");
  EXPECT_EQ(client[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client[0].sent_messages, 1u);
  EXPECT_EQ(client[0].recv_messages, 0u);
}

TEST(AccessLog, TheDefaultLineHasEveryField) {
  AccessLogRecord r;
  r.server = true;
  r.method = "/pkg.KvStore/Get";
  r.peer = "10.0.0.8:51234";
  r.status = absl::OkStatus();
  r.duration = absl::Microseconds(57);
  r.recv_messages = 1;
  r.recv_bytes = 12;
  r.sent_messages = 1;
  r.sent_bytes = 40;
  EXPECT_EQ(experimental::FormatAccessLogRecord(r),
            "access server /pkg.KvStore/Get peer=10.0.0.8:51234 status=OK duration_us=57 "
            "recv_msgs=1 recv_bytes=12 sent_msgs=1 sent_bytes=40");
  r.server = false;
  r.peer = "";
  r.status = absl::UnavailableError("no \"server\"");
  r.recv_messages = 0;
  r.recv_bytes = 0;
  EXPECT_EQ(experimental::FormatAccessLogRecord(r),
            "access client /pkg.KvStore/Get peer=- status=UNAVAILABLE:\"no \\\"server\\\"\" "
            "duration_us=57 recv_msgs=0 recv_bytes=0 sent_msgs=1 sent_bytes=40");
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
