// Messages near the top of max_message_bytes go end to end byte for byte:
// a 1 GiB echo (request and response each 1 GiB + framing), given a server
// pool that holds them. Runs alone (RUN_SERIAL): it needs several GiB.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdmarpc/rdmarpc.h"
#include "tests/rpc/test_service.h"

namespace rdmarpc {
namespace test {
namespace {

// Byte i of a payload: not periodic in any power of two below 2^32, so a
// misplaced chunk shows.
char PatternByte(uint64_t i) { return static_cast<char>((i * 2654435761u) >> 13); }

TEST(HugeMessage, OneGibEchoIsByteExact) {
  constexpr size_t kPayload = size_t{1} << 30;
  ServerOptions so;
  so.max_message_bytes = kPayload + 4096;
  so.large_buffer_pool_bytes = 2 * (kPayload + 4096);
  EchoService service;
  Server server(so);
  ASSERT_TRUE(server.AddService(&service).ok());
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ChannelOptions co;
  co.max_message_bytes = kPayload + 4096;
  auto channel = CreateChannel(absl::StrCat("127.0.0.1:", server.port()), co);
  ASSERT_TRUE(channel.ok()) << channel.status();
  EchoRequest req;
  std::string* data = req.mutable_data();
  data->resize(kPayload);
  for (size_t i = 0; i < kPayload; ++i) (*data)[i] = PatternByte(i);
  EchoResponse resp;
  ClientContext ctx;
  ctx.set_deadline(absl::Now() + absl::Minutes(5));
  absl::Status s = Echo(channel->get(), &ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(resp.data().size(), kPayload);
  size_t first_bad = kPayload;
  for (size_t i = 0; i < kPayload; ++i) {
    if (resp.data()[i] != PatternByte(i)) {
      first_bad = i;
      break;
    }
  }
  EXPECT_EQ(first_bad, kPayload) << "first wrong byte";
}

}  // namespace
}  // namespace test
}  // namespace rdmarpc
