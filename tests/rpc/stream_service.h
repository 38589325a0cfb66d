// stream_service.h: a hand-written streaming service (the shape
// protoc-gen-rdmarpc generates) for the runtime's stream tests.
#ifndef RDMARPC_TESTS_RPC_STREAM_SERVICE_H_
#define RDMARPC_TESTS_RPC_STREAM_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rdmarpc/rdmarpc.h"
#include "rpc_test.pb.h"

namespace rdmarpc {
namespace test {

inline constexpr char kCollectMethod[] = "/rdmarpc.test.Streams/Collect";
inline constexpr char kExpandMethod[] = "/rdmarpc.test.Streams/Expand";
inline constexpr char kChatMethod[] = "/rdmarpc.test.Streams/Chat";
inline constexpr char kUnknownStreamMethod[] = "/rdmarpc.test.Streams/Nope";

// Deterministic bytes for message `i` of `n` bytes, so order and content
// can be checked exactly.
inline std::string PatternBytes(int i, size_t n) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) s[k] = static_cast<char>((i * 31 + k * 7) % 251);
  return s;
}

class StreamService final : public rdmarpc::Service {
 public:
  StreamService() : Service("rdmarpc.test.Streams") {
    using namespace internal;  // NOLINT: the handler templates
    AddMethod(std::make_unique<ClientStreamingMethodHandler<StreamService, EchoRequest,
                                                            EchoResponse>>(
        kCollectMethod, this, &StreamService::Collect));
    AddMethod(std::make_unique<ServerStreamingMethodHandler<StreamService, EchoRequest,
                                                            EchoResponse>>(
        kExpandMethod, this, &StreamService::Expand));
    AddMethod(std::make_unique<BidiStreamingMethodHandler<StreamService, EchoRequest,
                                                          EchoResponse>>(
        kChatMethod, this, &StreamService::Chat));
  }

  // Reads every message; answers their count in text and their data
  // concatenated. req.text() == "fail" makes it fail with details.
  absl::Status Collect(ServerContext*, ServerReader<EchoRequest>* reader, EchoResponse* resp) {
    EchoRequest req;
    int n = 0;
    std::string all;
    while (reader->Read(&req)) {
      ++n;
      all += req.data();
      if (req.text() == "fail") {
        absl::Status s = absl::AbortedError(absl::StrCat("failed after ", n));
        s.SetPayload("why", absl::Cord("because"));
        return s;
      }
    }
    resp->set_text(absl::StrCat(n));
    resp->set_data(all);
    return absl::OkStatus();
  }

  // Writes req.tag() messages; message i has text "i" and
  // PatternBytes(i, size) as data, size = req.reply_bytes() except every
  // 10th, which is req.sleep_ms() bytes (0: same). Counts writes done.
  // With text "big-headers", 20,000 bytes of initial metadata ("big") go
  // before the messages.
  absl::Status Expand(ServerContext* ctx, const EchoRequest& req,
                      ServerWriter<EchoResponse>* writer) {
    expand_started_.fetch_add(1);
    if (req.text() == "big-headers") ctx->AddInitialMetadata("big", std::string(20000, 'b'));
    for (int i = 0; i < req.tag(); ++i) {
      EchoResponse resp;
      resp.set_text(absl::StrCat(i));
      const int64_t size = (i % 10 == 9 && req.sleep_ms() > 0) ? req.sleep_ms() : req.reply_bytes();
      resp.set_data(PatternBytes(i, static_cast<size_t>(size)));
      if (!writer->Write(resp)) {
        write_failed_.fetch_add(1);
        if (ctx->IsCancelled()) saw_cancel_.fetch_add(1);
        return absl::CancelledError("write failed");
      }
      written_.fetch_add(1);
    }
    if (req.text() == "fail") return absl::OutOfRangeError("ran out");
    return absl::OkStatus();
  }

  // Echoes every message back (text and data), then OK.
  // Client metadata goes back as initial and trailing metadata.
  absl::Status Chat(ServerContext* ctx, ServerReaderWriter<EchoResponse, EchoRequest>* stream) {
    for (const auto& [k, v] : ctx->client_metadata()) {
      ctx->AddInitialMetadata(k, v);
      ctx->AddTrailingMetadata(k, v);
    }
    EchoRequest req;
    while (stream->Read(&req)) {
      EchoResponse resp;
      resp.set_text(req.text());
      resp.set_data(req.data());
      if (!stream->Write(resp)) return absl::CancelledError("write failed");
    }
    return absl::OkStatus();
  }

  std::atomic<int> expand_started_{0};
  std::atomic<int> written_{0};
  std::atomic<int> write_failed_{0};
  std::atomic<int> saw_cancel_{0};
};

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_STREAM_SERVICE_H_
