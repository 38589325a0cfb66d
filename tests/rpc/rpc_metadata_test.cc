// rpc_metadata_test.cc: custom metadata both ways on unary calls and
// streams, gRPC's key rules, the size limit, and metadata too large for the
// eager prefix (it travels with the payload).
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/call_model_service.h"
#include "tests/rpc/stream_service.h"

namespace rdmarpc {
namespace test {
namespace {

using Md = std::multimap<std::string, std::string>;

struct Fixture {
  explicit Fixture(ChannelOptions co = ChannelOptions(), ServerOptions so = ServerOptions())
      : server(so) {
    EXPECT_TRUE(server.AddService(&service).ok());
    EXPECT_TRUE(server.AddService(&streams).ok());
    absl::Status s = server.Start("127.0.0.1:0");
    EXPECT_TRUE(s.ok()) << s;
    auto ch = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
    EXPECT_TRUE(ch.ok()) << ch.status();
    channel = *ch;
  }
  absl::Status Call(ClientContext* ctx, const EchoRequest& req, EchoResponse* resp) {
    ctx->set_timeout(absl::Seconds(30));
    return internal::BlockingUnaryCall(channel.get(), kEchoMetadataMethod, ctx, req, resp);
  }
  CallModelService service;
  StreamService streams;
  Server server;
  std::shared_ptr<Channel> channel;
};

Md Sample() {
  return Md{{"x-user", "alice"},
            {"x-user", "bob"},  // a key may repeat
            {"x-trace-bin", std::string("\0\x01\xff\x7f", 4)},
            {"empty", ""}};
}

TEST(Metadata, UnaryCarriesClientMetadataAndGetsInitialAndTrailingBack) {
  Fixture f;
  ClientContext ctx;
  for (const auto& [k, v] : Sample()) ctx.AddMetadata(k, v);
  EchoRequest req;
  req.set_data("payload");
  EchoResponse resp;
  absl::Status s = f.Call(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.text(), "4");
  EXPECT_EQ(resp.data(), "payload");
  EXPECT_EQ(ctx.GetServerInitialMetadata(), Sample());
  EXPECT_EQ(ctx.GetServerTrailingMetadata(), Sample());
}

TEST(Metadata, ArrivesWithAnErrorStatusToo) {
  Fixture f;
  ClientContext ctx;
  ctx.AddMetadata("x-why", "because");
  EchoRequest req;
  req.set_tag(static_cast<int>(absl::StatusCode::kNotFound));
  EchoResponse resp;
  absl::Status s = f.Call(&ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(ctx.GetServerTrailingMetadata(), (Md{{"x-why", "because"}}));
}

TEST(Metadata, NoMetadataMeansEmptyMaps) {
  Fixture f;
  ClientContext ctx;
  EchoRequest req;
  EchoResponse resp;
  ASSERT_TRUE(f.Call(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.text(), "0");
  EXPECT_TRUE(ctx.GetServerInitialMetadata().empty());
  EXPECT_TRUE(ctx.GetServerTrailingMetadata().empty());
}

TEST(Metadata, BadKeysAndValuesFailInternalNamingThemBeforeSending) {
  Fixture f;
  struct Case {
    std::string key, value, want;
  };
  for (const Case& c : {Case{"X-Upper", "v", "key \"X-Upper\" has a character"},
                        Case{"grpc-timeout", "1S", "reserved prefix grpc-"},
                        Case{"", "v", "has an empty key"},
                        Case{"text", std::string("a\nb"), "non-printable byte"}}) {
    ClientContext ctx;
    ctx.AddMetadata(c.key, c.value);
    EchoRequest req;
    EchoResponse resp;
    absl::Status s = f.Call(&ctx, req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << c.key << ": " << s;
    EXPECT_NE(s.message().find(c.want), absl::string_view::npos) << s;
  }
  EXPECT_EQ(f.service.started_.load(), 0);
}

TEST(Metadata, OverTheClientLimitIsResourceExhaustedNamingBothSizes) {
  Fixture f;
  ClientContext ctx;
  ctx.AddMetadata("big", std::string(9000, 'x'));
  EchoRequest req;
  EchoResponse resp;
  absl::Status s = f.Call(&ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("client metadata of 9003 bytes exceeds max_metadata_bytes 8192"),
            absl::string_view::npos)
      << s;
}

TEST(Metadata, OverTheServerLimitIsResourceExhaustedNamingBothSizes) {
  ServerOptions so;
  so.max_metadata_bytes = 100;
  Fixture f(ChannelOptions(), so);
  ClientContext ctx;
  ctx.AddMetadata("k", std::string(200, 'v'));
  EchoRequest req;
  EchoResponse resp;
  absl::Status s = f.Call(&ctx, req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("client metadata of 201 bytes exceeds max_metadata_bytes 100"),
            absl::string_view::npos)
      << s;
}

TEST(Metadata, LargerThanTheEagerLimitTravelsWithThePayloadBothWays) {
  ChannelOptions co;
  co.eager_limit_bytes = 1024;  // metadata below of ~6 KiB cannot ride in the prefix
  Fixture f(co);
  for (size_t data_bytes : {size_t{10}, size_t{200000}}) {  // eager and rendezvous payloads
    ClientContext ctx;
    Md md{{"a", std::string(3000, 'a')}, {"b-bin", std::string(3000, '\0')}};
    for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
    EchoRequest req;
    req.set_data(std::string(data_bytes, 'd'));
    EchoResponse resp;
    absl::Status s = f.Call(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << data_bytes << ": " << s;
    EXPECT_EQ(resp.data(), req.data());
    EXPECT_EQ(ctx.GetServerInitialMetadata(), md);
    EXPECT_EQ(ctx.GetServerTrailingMetadata(), md);
  }
}

TEST(Metadata, StreamsCarryItToo) {
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  for (const auto& [k, v] : Sample()) ctx.AddMetadata(k, v);
  ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
  EchoRequest req;
  req.set_text("hi");
  ASSERT_TRUE(stream.Write(req));
  EchoResponse resp;
  ASSERT_TRUE(stream.Read(&resp));
  // Initial metadata came before the first message.
  EXPECT_EQ(ctx.GetServerInitialMetadata(), Sample());
  ASSERT_TRUE(stream.WritesDone());
  ASSERT_TRUE(stream.Finish().ok());
  EXPECT_EQ(ctx.GetServerTrailingMetadata(), Sample());
}

TEST(Metadata, StreamHeadersLargerThanTheEagerLimitTravelByRendezvous) {
  // 20 KiB each way: the client's with its opening frame, the server's
  // initial metadata as a kHeaders frame pulled by RDMA READ, its trailing
  // metadata with the trailers; byte-exact, in order before the messages.
  ChannelOptions co;
  co.max_metadata_bytes = 64 << 10;
  ServerOptions so;
  so.max_metadata_bytes = 64 << 10;
  Fixture f(co, so);
  std::string binary(20000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 131);
  const Md md{{"big-bin", binary}, {"x-small", "s"}};
  for (int round = 0; round < 2; ++round) {
    ClientContext ctx;
    ctx.set_timeout(absl::Seconds(30));
    for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
    ClientReaderWriter<EchoRequest, EchoResponse> stream(f.channel.get(), kChatMethod, &ctx);
    for (int i = 0; i < 3; ++i) {
      EchoRequest req;
      req.set_text(absl::StrCat("m", i));
      ASSERT_TRUE(stream.Write(req));
      EchoResponse resp;
      ASSERT_TRUE(stream.Read(&resp)) << i;
      EXPECT_EQ(resp.text(), absl::StrCat("m", i));
      EXPECT_EQ(ctx.GetServerInitialMetadata(), md) << i;
    }
    ASSERT_TRUE(stream.WritesDone());
    absl::Status s = stream.Finish();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(ctx.GetServerTrailingMetadata(), md);
  }
}

TEST(Metadata, StreamHeadersOverTheClientLimitAreResourceExhausted) {
  // The server sends 20,000 bytes of initial metadata (by rendezvous); this
  // client takes at most 8 KiB (the default max_metadata_bytes).
  Fixture f;
  ClientContext ctx;
  ctx.set_timeout(absl::Seconds(30));
  EchoRequest req;
  req.set_text("big-headers");
  req.set_tag(3);
  ClientReader<EchoResponse> reader(f.channel.get(), kExpandMethod, &ctx, req);
  EchoResponse resp;
  int read = 0;
  while (reader.Read(&resp)) ++read;
  absl::Status s = reader.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("8192"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("200"), absl::string_view::npos) << s;
  // The messages still arrive; Finish reports the refused headers, which
  // the caller never sees.
  EXPECT_EQ(read, 3);
  EXPECT_TRUE(ctx.GetServerInitialMetadata().empty());
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
