// rpc_metrics_test.cc: the call metrics (grpc_server_* / grpc_client_*,
// named and labelled as go-grpc-prometheus does) and the transport's
// rdmarpc_* metrics, read back from RenderMetricsText with exact values.
//
// The registry is per process: each test reads the counters before and
// after what it does and asserts the difference, so the tests also pass
// when run together in one process.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/rdmarpc.h"
#include "runtime/rpc/metrics.h"
#include "tests/rpc/metrics_text.h"
#include "tests/rpc/stream_service.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

constexpr char kEchoService[] = "rdmarpc.test.EchoService";
constexpr char kStreams[] = "rdmarpc.test.Streams";

struct MetricsFixture {
  explicit MetricsFixture(bool server_metrics = true, bool client_metrics = true) {
    ServerOptions so;
    so.enable_metrics = server_metrics;
    server = std::make_unique<Server>(so);
    EXPECT_TRUE(server->AddService(&streams).ok());
    EXPECT_TRUE(server->AddService(&echo).ok());
    absl::Status s = server->Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    ChannelOptions co;
    co.enable_metrics = client_metrics;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server->port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  StreamService streams;
  EchoService echo;
  std::unique_ptr<Server> server;
  std::shared_ptr<Channel> channel;
};

// The value of a sample now (0 when absent).
double Now(absl::string_view name, const Labels& labels = {}) {
  return MetricValue(RenderMetricsText(), name, labels).value_or(0);
}

absl::Status EchoText(Channel* channel, const std::string& text, std::string data = "") {
  EchoRequest req;
  req.set_text(text);
  req.set_data(std::move(data));
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  return Echo(channel, &ctx, req, &resp);
}

TEST(CallMetrics, ServerMethodsShowEveryCodeAtZeroFromStart) {
  MetricsFixture f;
  const std::string text = RenderMetricsText();
  const Labels chat = CallLabels(kStreams, "Chat", "bidi_stream");
  ASSERT_TRUE(MetricValue(text, "grpc_server_started_total", chat).has_value()) << text;
  for (const char* code :
       {"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
        "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
        "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}) {
    EXPECT_TRUE(
        MetricValue(text, "grpc_server_handled_total", With(chat, "grpc_code", code)).has_value())
        << code;
  }
  EXPECT_TRUE(MetricValue(text, "grpc_server_handling_seconds_bucket", With(chat, "le", "+Inf"))
                  .has_value());
  EXPECT_TRUE(MetricValue(text, "grpc_server_handling_seconds_bucket", With(chat, "le", "0.005"))
                  .has_value());
  EXPECT_TRUE(MetricValue(text, "grpc_server_msg_received_total",
                          CallLabels(kStreams, "Collect", "client_stream"))
                  .has_value());
  EXPECT_TRUE(MetricValue(text, "grpc_server_msg_sent_total",
                          CallLabels(kStreams, "Expand", "server_stream"))
                  .has_value());
  EXPECT_TRUE(
      MetricValue(text, "grpc_server_started_total", CallLabels(kEchoService, "Echo", "unary"))
          .has_value());
}

TEST(CallMetrics, UnaryCallsCountedByCodeOnBothSides) {
  MetricsFixture f;
  const Labels echo = CallLabels(kEchoService, "Echo", "unary");
  auto snapshot = [&echo](const char* side) {
    const std::string p = absl::StrCat("grpc_", side, "_");
    return std::vector<double>{
        Now(p + "started_total", echo),
        Now(p + "handled_total", With(echo, "grpc_code", "OK")),
        Now(p + "handled_total", With(echo, "grpc_code", "NotFound")),
        Now(p + "msg_received_total", echo),
        Now(p + "msg_sent_total", echo),
        Now(p + "handling_seconds_count", echo),
        Now(p + "handling_seconds_bucket", With(echo, "le", "+Inf")),
        Now(p + "handling_seconds_bucket", With(echo, "le", "10")),
    };
  };
  const std::vector<double> server0 = snapshot("server");
  const std::vector<double> client0 = snapshot("client");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(EchoText(f.channel.get(), "hi").ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(EchoText(f.channel.get(), "fail").code(), absl::StatusCode::kNotFound);
  }
  const std::vector<double> server1 = snapshot("server");
  const std::vector<double> client1 = snapshot("client");
  // started, OK, NotFound, received, sent, histogram count, +Inf, le=10.
  // A failed call sends no response message.
  const std::vector<double> server_want = {5, 3, 2, 5, 3, 5, 5, 5};
  const std::vector<double> client_want = {5, 3, 2, 3, 5, 5, 5, 5};
  for (size_t i = 0; i < server_want.size(); ++i) {
    EXPECT_EQ(server1[i] - server0[i], server_want[i]) << "server value " << i;
    EXPECT_EQ(client1[i] - client0[i], client_want[i]) << "client value " << i;
  }
  EXPECT_GT(Now("grpc_server_handling_seconds_sum", echo), 0);
  EXPECT_GT(Now("grpc_client_handling_seconds_sum", echo), 0);
}

TEST(CallMetrics, StreamingCallsCountEveryMessage) {
  MetricsFixture f;
  const Labels expand = CallLabels(kStreams, "Expand", "server_stream");
  const Labels collect = CallLabels(kStreams, "Collect", "client_stream");
  const Labels chat = CallLabels(kStreams, "Chat", "bidi_stream");
  const double expand_sent0 = Now("grpc_server_msg_sent_total", expand);
  const double expand_recv0 = Now("grpc_client_msg_received_total", expand);
  const double expand_oor0 =
      Now("grpc_server_handled_total", With(expand, "grpc_code", "OutOfRange"));
  const double collect_recv0 = Now("grpc_server_msg_received_total", collect);
  const double collect_sent0 = Now("grpc_client_msg_sent_total", collect);
  const double chat_recv0 = Now("grpc_server_msg_received_total", chat);
  const double chat_sent0 = Now("grpc_server_msg_sent_total", chat);
  const double chat_ok0 = Now("grpc_client_handled_total", With(chat, "grpc_code", "OK"));

  {  // server streaming: 4 messages, then OUT_OF_RANGE
    EchoRequest req;
    req.set_tag(4);
    req.set_text("fail");
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
    EchoResponse resp;
    int n = 0;
    while (reader.Read(&resp)) ++n;
    EXPECT_EQ(n, 4);
    EXPECT_EQ(reader.Finish().code(), absl::StatusCode::kOutOfRange);
  }
  {  // client streaming: 3 messages
    EchoResponse resp;
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    ClientWriter<EchoRequest> writer(f.channel.get(), kCollectMethod, &ctx, &resp);
    EchoRequest req;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.Write(req));
    ASSERT_TRUE(writer.WritesDone());
    ASSERT_TRUE(writer.Finish().ok());
    EXPECT_EQ(resp.text(), "3");
  }
  {  // bidi: 2 each way
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
    for (int i = 0; i < 2; ++i) {
      EchoRequest req;
      req.set_text(absl::StrCat(i));
      ASSERT_TRUE(stream.Write(req));
      EchoResponse resp;
      ASSERT_TRUE(stream.Read(&resp));
    }
    ASSERT_TRUE(stream.WritesDone());
    ASSERT_TRUE(stream.Finish().ok());
  }
  EXPECT_EQ(Now("grpc_server_msg_sent_total", expand) - expand_sent0, 4);
  EXPECT_EQ(Now("grpc_client_msg_received_total", expand) - expand_recv0, 4);
  EXPECT_EQ(Now("grpc_server_handled_total", With(expand, "grpc_code", "OutOfRange")) - expand_oor0,
            1);
  EXPECT_EQ(Now("grpc_server_msg_received_total", collect) - collect_recv0, 3);
  EXPECT_EQ(Now("grpc_client_msg_sent_total", collect) - collect_sent0, 3);
  EXPECT_EQ(Now("grpc_server_msg_received_total", chat) - chat_recv0, 2);
  EXPECT_EQ(Now("grpc_server_msg_sent_total", chat) - chat_sent0, 2);
  EXPECT_EQ(Now("grpc_client_handled_total", With(chat, "grpc_code", "OK")) - chat_ok0, 1);
}

TEST(CallMetrics, OffByDefault) {
  MetricsFixture f(/*server_metrics=*/false, /*client_metrics=*/false);
  const Labels echo = CallLabels(kEchoService, "Echo", "unary");
  const double server0 = Now("grpc_server_started_total", echo);
  const double client0 = Now("grpc_client_started_total", echo);
  ASSERT_TRUE(EchoText(f.channel.get(), "hi").ok());
  EXPECT_EQ(Now("grpc_server_started_total", echo), server0);
  EXPECT_EQ(Now("grpc_client_started_total", echo), client0);
}

TEST(CallMetrics, RunsBeforeTheUsersInterceptorsAndSeesTheirFailure) {
  // A server interceptor that refuses every call with PERMISSION_DENIED:
  // the metrics interceptor, outermost, counts the code it ends with.
  class Refuse final : public experimental::Interceptor {
   public:
    void Intercept(experimental::InterceptorBatchMethods* m) override {
      if (m->QueryInterceptionHookPoint(
              experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
        m->Fail(absl::PermissionDeniedError("no"));
      }
    }
  };
  class RefuseFactory final : public experimental::ServerInterceptorFactoryInterface {
   public:
    experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo*) override {
      return new Refuse;
    }
  };
  ServerOptions so;
  so.enable_metrics = true;
  so.interceptor_creators.push_back(std::make_shared<RefuseFactory>());
  EchoService echo;
  Server server(so);
  ASSERT_TRUE(server.AddService(&echo).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), ChannelOptions());
  ASSERT_TRUE(ch.ok());
  const Labels denied =
      With(CallLabels(kEchoService, "Echo", "unary"), "grpc_code", "PermissionDenied");
  const double before = Now("grpc_server_handled_total", denied);
  EXPECT_EQ(EchoText(ch->get(), "hi").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Now("grpc_server_handled_total", denied) - before, 1);
  EXPECT_EQ(echo.calls(), 0);
}

TEST(TransportMetrics, CountWorkRequestsDoorbellsAndConnections) {
  MetricsFixture f(false, false);
  ASSERT_TRUE(EchoText(f.channel.get(), "warm up").ok());
  // Client and server side of the one connection, both in this process.
  EXPECT_GE(Now("rdmarpc_connections", {{"state", "established"}}), 2);
  EXPECT_GE(Now("rdmarpc_connections_established_total"), 2);
  EXPECT_GE(Now("rdmarpc_engines"), 2);
  EXPECT_GT(Now("rdmarpc_registered_memory_bytes"), 0);
  EXPECT_GT(Now("rdmarpc_memory_regions"), 0);
  const Labels send_imm = {{"opcode", "send_with_imm"}};
  const double wrs0 = Now("rdmarpc_work_requests_posted_total", send_imm);
  const double doorbells0 = Now("rdmarpc_doorbells_total", {{"queue", "send"}});
  const double recv_completions0 = Now("rdmarpc_completions_total", {{"queue", "recv"}});
  constexpr int kCalls = 10;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(EchoText(f.channel.get(), "x").ok());
  // One SEND_WITH_IMM each way per small unary call, one doorbell each, and
  // one receive completion at each end.
  EXPECT_EQ(Now("rdmarpc_work_requests_posted_total", send_imm) - wrs0, 2 * kCalls);
  EXPECT_EQ(Now("rdmarpc_doorbells_total", {{"queue", "send"}}) - doorbells0, 2 * kCalls);
  EXPECT_EQ(Now("rdmarpc_completions_total", {{"queue", "recv"}}) - recv_completions0, 2 * kCalls);
}

TEST(TransportMetrics, CountRendezvousTransfersAndBytes) {
  MetricsFixture f(false, false);
  const double transfers0 = Now("rdmarpc_rendezvous_transfers_total", {{"direction", "read"}}) +
                            Now("rdmarpc_rendezvous_transfers_total", {{"direction", "write"}});
  const double bytes0 = Now("rdmarpc_rendezvous_bytes_total", {{"direction", "read"}}) +
                        Now("rdmarpc_rendezvous_bytes_total", {{"direction", "write"}});
  const double reads0 = Now("rdmarpc_work_requests_posted_total", {{"opcode", "rdma_read"}});
  constexpr size_t kBytes = 200 * 1000;  // far above the 8 KiB eager limit
  ASSERT_TRUE(EchoText(f.channel.get(), "big", std::string(kBytes, 'b')).ok());
  // The request is pulled by the server, the response moved to the client:
  // two transfers, each of a little more than kBytes (protobuf framing).
  EXPECT_EQ(Now("rdmarpc_rendezvous_transfers_total", {{"direction", "read"}}) +
                Now("rdmarpc_rendezvous_transfers_total", {{"direction", "write"}}) - transfers0,
            2);
  const double moved = Now("rdmarpc_rendezvous_bytes_total", {{"direction", "read"}}) +
                       Now("rdmarpc_rendezvous_bytes_total", {{"direction", "write"}}) - bytes0;
  EXPECT_GE(moved, 2.0 * kBytes);
  EXPECT_LE(moved, 2.0 * (kBytes + 64));
  EXPECT_GE(Now("rdmarpc_work_requests_posted_total", {{"opcode", "rdma_read"}}) - reads0, 1);
}

TEST(MetricsText, HistogramBucketsClimbToTheirCountAndSumIsSeconds) {
  MetricsFixture f;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(EchoText(f.channel.get(), "hi").ok());
  const std::string text = RenderMetricsText();
  for (const char* side : {"server", "client"}) {
    const std::string family = absl::StrCat("grpc_", side, "_handling_seconds");
    const Labels echo = CallLabels(kEchoService, "Echo", "unary");
    double previous = 0;
    int buckets = 0;
    for (const MetricSample& m : ParseMetrics(text)) {
      if (m.name != family + "_bucket") continue;
      Labels without_le = m.labels;
      without_le.erase("le");
      if (without_le != echo) continue;
      EXPECT_GE(m.value, previous) << side << " le=" << m.labels.at("le");
      previous = m.value;
      ++buckets;
    }
    EXPECT_EQ(buckets, 20) << side;  // 19 bounds and +Inf, in order
    const double count = MetricValue(text, family + "_count", echo).value_or(-1);
    EXPECT_EQ(previous, count) << side << ": +Inf is the count";
    EXPECT_GE(count, 3) << side;
    // A loopback echo takes microseconds to milliseconds, not seconds.
    const double sum = MetricValue(text, family + "_sum", echo).value_or(-1);
    EXPECT_GT(sum, 0) << side;
    EXPECT_LT(sum / count, 1.0) << side;
  }
}

TEST(MetricsText, LabelValuesAreEscaped) {
  // A client may name any method (a generic stub): quotes, backslashes and
  // newlines must not break the exposition.
  internal::GetMethodMetrics(internal::MetricsSide::kClient, "/odd.Svc/a\"b\\c\nd",
                             experimental::RpcType::UNARY)
      ->Started();
  const std::string text = RenderMetricsText();
  EXPECT_TRUE(absl::StrContains(
      text,
      "grpc_client_started_total{grpc_method=\"a\\\"b\\\\c\\nd\",grpc_service=\"odd.Svc\","
      "grpc_type=\"unary\"} 1\n"))
      << text;
}

TEST(MetricsText, EveryFamilyHasHelpAndTypeBeforeItsSamples) {
  MetricsFixture f;
  ASSERT_TRUE(EchoText(f.channel.get(), "hi").ok());
  const std::string text = RenderMetricsText();
  std::string family;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# HELP ")) {
      family = std::string(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      EXPECT_TRUE(absl::StartsWith(line.substr(7), family + " ")) << line;
      continue;
    }
    // Histogram samples carry the family name and a suffix.
    EXPECT_TRUE(absl::StartsWith(line, family)) << line << " after family " << family;
  }
  EXPECT_TRUE(absl::StrContains(text, "# TYPE grpc_server_handling_seconds histogram\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE rdmarpc_connections gauge\n"));
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
