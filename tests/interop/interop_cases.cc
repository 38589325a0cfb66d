#include "interop_cases.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/testing/empty.pb.h"
#include "grpc/testing/messages.pb.h"

namespace rdmarpc_interop {
namespace {

using grpc::testing::Empty;
using grpc::testing::SimpleRequest;
using grpc::testing::SimpleResponse;
using grpc::testing::StreamingInputCallRequest;
using grpc::testing::StreamingInputCallResponse;
using grpc::testing::StreamingOutputCallRequest;
using grpc::testing::StreamingOutputCallResponse;

using Metadata = std::multimap<std::string, std::string>;

// The sizes the descriptions use: large_unary's request and response, and
// the four requests (client_streaming, ping_pong) and responses
// (server_streaming, ping_pong) of the streaming cases.
constexpr int kLargeRequestSize = 271828;
constexpr int kLargeResponseSize = 314159;
constexpr int kStreamRequestSizes[] = {27182, 8, 1828, 45904};
constexpr int kStreamResponseSizes[] = {31415, 9, 2653, 58979};
constexpr int kAggregatedRequestSize = 74922;
static_assert(kStreamRequestSizes[0] + kStreamRequestSizes[1] + kStreamRequestSizes[2] +
                      kStreamRequestSizes[3] ==
                  kAggregatedRequestSize,
              "client_streaming's aggregate is the sum of its four requests");

// custom_metadata's entries; the trailing one is binary, the bytes ab ab ab.
constexpr absl::string_view kEchoInitialKey = "x-grpc-test-echo-initial";
constexpr absl::string_view kEchoInitialValue = "test_initial_metadata_value";
constexpr absl::string_view kEchoTrailingKey = "x-grpc-test-echo-trailing-bin";
constexpr absl::string_view kEchoTrailingValue = "\xab\xab\xab";

// status_code_and_message and special_status_message.
constexpr int kEchoedCode = 2;  // UNKNOWN
constexpr absl::string_view kStatusMessage = "test status message";
constexpr absl::string_view kSpecialStatusMessage =
    "\t\ntest with whitespace\r\nand Unicode BMP \u263A and non-BMP \U0001F608\t\n";

// An assertion that did not hold.
template <class... Args>
absl::Status Fail(const Args&... args) {
  return absl::FailedPreconditionError(absl::StrCat(args...));
}

// The name of a status code as gRPC writes it, with its number.
std::string CodeName(absl::StatusCode code) {
  return absl::StrCat(absl::StatusCodeToString(code), " (", static_cast<int>(code), ")");
}

// A status for messages: the code's name and the message, escaped so that
// whitespace and non-ASCII bytes show.
std::string Describe(const absl::Status& status) {
  return absl::StrCat(CodeName(status.code()), " \"", absl::CHexEscape(status.message()), "\"");
}

// `step`'s call must have succeeded; its own status otherwise, named.
absl::Status ExpectOk(absl::string_view step, const absl::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(status.code(), absl::StrCat(step, ": want OK, got ", Describe(status)));
}

// `step`'s call must have ended with `code` (and, when given, exactly
// `message`).
absl::Status ExpectStatus(absl::string_view step, const absl::Status& status,
                          absl::StatusCode code) {
  if (status.code() == code) return absl::OkStatus();
  return Fail(step, ": want ", CodeName(code), ", got ", Describe(status));
}
absl::Status ExpectStatus(absl::string_view step, const absl::Status& status, absl::StatusCode code,
                          absl::string_view message) {
  if (status.code() == code && status.message() == message) return absl::OkStatus();
  return Fail(step, ": want ", CodeName(code), " \"", absl::CHexEscape(message), "\", got ",
              Describe(status));
}

// A payload body must be `size` zero bytes.
absl::Status ExpectZeros(absl::string_view step, const std::string& body, int size) {
  if (body.size() != static_cast<size_t>(size)) {
    return Fail(step, ": want a payload of ", size, " bytes, got ", body.size());
  }
  size_t nonzero = body.find_first_not_of('\0');
  if (nonzero != std::string::npos) {
    return Fail(step, ": payload byte ", nonzero, " is ",
                static_cast<int>(static_cast<unsigned char>(body[nonzero])), ", want 0");
  }
  return absl::OkStatus();
}

// `metadata` must hold `key` exactly once, with `value`.
absl::Status ExpectEntry(absl::string_view step, absl::string_view which, const Metadata& metadata,
                         absl::string_view key, absl::string_view value) {
  auto [begin, end] = metadata.equal_range(std::string(key));
  const auto count = std::distance(begin, end);
  if (count != 1) {
    std::string keys;
    for (const auto& entry : metadata)
      absl::StrAppend(&keys, keys.empty() ? "" : ", ", entry.first);
    return Fail(step, ": want one \"", key, "\" in the ", which, " metadata, got ", count,
                " (keys: [", keys, "])");
  }
  if (begin->second != value) {
    return Fail(step, ": ", which, " metadata \"", key, "\" is \"", absl::CHexEscape(begin->second),
                "\", want \"", absl::CHexEscape(value), "\"");
  }
  return absl::OkStatus();
}

SimpleRequest LargeUnaryRequest(int request_size, int response_size) {
  SimpleRequest request;
  request.set_response_type(grpc::testing::COMPRESSABLE);
  request.set_response_size(response_size);
  request.mutable_payload()->mutable_body()->assign(static_cast<size_t>(request_size), '\0');
  return request;
}

StreamingOutputCallRequest StreamRequest(int response_size, int request_size) {
  StreamingOutputCallRequest request;
  request.set_response_type(grpc::testing::COMPRESSABLE);
  request.add_response_parameters()->set_size(response_size);
  request.mutable_payload()->mutable_body()->assign(static_cast<size_t>(request_size), '\0');
  return request;
}

// One large_unary call with the given sizes on `stub`; OK when it succeeded
// with a response of `response_size` zero bytes.
absl::Status OneLargeUnary(grpc::testing::TestService::Stub* stub, int request_size,
                           int response_size, absl::Time deadline) {
  rdmarpc::ClientContext context;
  context.set_deadline(deadline);
  SimpleResponse response;
  absl::Status status =
      stub->UnaryCall(&context, LargeUnaryRequest(request_size, response_size), &response);
  if (absl::Status s = ExpectOk("UnaryCall", status); !s.ok()) return s;
  return ExpectZeros("UnaryCall response", response.payload().body(), response_size);
}

}  // namespace

InteropClient::InteropClient(std::string server, rdmarpc::ChannelOptions options)
    : server_(std::move(server)), options_(options) {}

absl::Status InteropClient::Init() {
  absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
      rdmarpc::CreateChannel(server_, options_);
  if (!channel.ok()) return channel.status();
  channel_ = *std::move(channel);
  stub_ = grpc::testing::TestService::NewStub(channel_);
  return absl::OkStatus();
}

namespace {

// The cases, in the order of the descriptions.
struct Case {
  const char* name;
  absl::Status (*run)(InteropClient& client, const SoakOptions& soak);
};
constexpr Case kCases[] = {
    {"empty_unary", [](InteropClient& c, const SoakOptions&) { return c.EmptyUnary(); }},
    {"large_unary", [](InteropClient& c, const SoakOptions&) { return c.LargeUnary(); }},
    {"client_streaming", [](InteropClient& c, const SoakOptions&) { return c.ClientStreaming(); }},
    {"server_streaming", [](InteropClient& c, const SoakOptions&) { return c.ServerStreaming(); }},
    {"ping_pong", [](InteropClient& c, const SoakOptions&) { return c.PingPong(); }},
    {"empty_stream", [](InteropClient& c, const SoakOptions&) { return c.EmptyStream(); }},
    {"cancel_after_begin",
     [](InteropClient& c, const SoakOptions&) { return c.CancelAfterBegin(); }},
    {"cancel_after_first_response",
     [](InteropClient& c, const SoakOptions&) { return c.CancelAfterFirstResponse(); }},
    {"timeout_on_sleeping_server",
     [](InteropClient& c, const SoakOptions&) { return c.TimeoutOnSleepingServer(); }},
    {"custom_metadata", [](InteropClient& c, const SoakOptions&) { return c.CustomMetadata(); }},
    {"status_code_and_message",
     [](InteropClient& c, const SoakOptions&) { return c.StatusCodeAndMessage(); }},
    {"special_status_message",
     [](InteropClient& c, const SoakOptions&) { return c.SpecialStatusMessage(); }},
    {"unimplemented_method",
     [](InteropClient& c, const SoakOptions&) { return c.UnimplementedMethod(); }},
    {"unimplemented_service",
     [](InteropClient& c, const SoakOptions&) { return c.UnimplementedService(); }},
    {"rpc_soak", [](InteropClient& c, const SoakOptions& soak) { return c.RpcSoak(soak); }},
    {"channel_soak", [](InteropClient& c, const SoakOptions& soak) { return c.ChannelSoak(soak); }},
};

}  // namespace

const std::vector<std::string>& InteropClient::CaseNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const Case& c : kCases) v->push_back(c.name);
    return v;
  }();
  return *names;
}

absl::Status InteropClient::Run(absl::string_view name, const SoakOptions& soak) {
  for (const Case& c : kCases) {
    if (name == c.name) return c.run(*this, soak);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown test case \"", name, "\""));
}

absl::Status InteropClient::Connect() {
  rdmarpc::ClientContext context;
  Empty response;
  return ExpectOk("EmptyCall making the connection",
                  stub_->EmptyCall(&context, Empty(), &response));
}

// Asserts: the call succeeded; the response is non-null (an Empty).
absl::Status InteropClient::EmptyUnary() {
  rdmarpc::ClientContext context;
  Empty response;
  return ExpectOk("EmptyCall", stub_->EmptyCall(&context, Empty(), &response));
}

// Asserts: the call succeeded; the response body is 314159 (zero) bytes.
absl::Status InteropClient::LargeUnary() {
  rdmarpc::ClientContext context;
  SimpleResponse response;
  absl::Status status = stub_->UnaryCall(
      &context, LargeUnaryRequest(kLargeRequestSize, kLargeResponseSize), &response);
  if (absl::Status s = ExpectOk("UnaryCall", status); !s.ok()) return s;
  if (response.payload().type() != grpc::testing::COMPRESSABLE) {
    return Fail("UnaryCall: response payload type ", response.payload().type(),
                ", want COMPRESSABLE");
  }
  return ExpectZeros("UnaryCall response", response.payload().body(), kLargeResponseSize);
}

// Sends 27182, 8, 1828 and 45904 bytes, half-closes. Asserts: the call
// succeeded; aggregated_payload_size is 74922.
absl::Status InteropClient::ClientStreaming() {
  rdmarpc::ClientContext context;
  StreamingInputCallResponse response;
  auto writer = stub_->StreamingInputCall(&context, &response);
  for (int size : kStreamRequestSizes) {
    StreamingInputCallRequest request;
    request.mutable_payload()->mutable_body()->assign(static_cast<size_t>(size), '\0');
    if (!writer->Write(request)) {
      return ExpectOk(absl::StrCat("StreamingInputCall, after Write of ", size, " bytes failed"),
                      writer->Finish());
    }
  }
  if (!writer->WritesDone()) {
    return ExpectOk("StreamingInputCall, after WritesDone failed", writer->Finish());
  }
  if (absl::Status s = ExpectOk("StreamingInputCall", writer->Finish()); !s.ok()) return s;
  if (response.aggregated_payload_size() != kAggregatedRequestSize) {
    return Fail("StreamingInputCall: aggregated_payload_size ", response.aggregated_payload_size(),
                ", want ", kAggregatedRequestSize);
  }
  return absl::OkStatus();
}

// Asks for 31415, 9, 2653 and 58979 bytes. Asserts: the call succeeded;
// exactly four responses, of those sizes in that order (zeros).
absl::Status InteropClient::ServerStreaming() {
  rdmarpc::ClientContext context;
  StreamingOutputCallRequest request;
  request.set_response_type(grpc::testing::COMPRESSABLE);
  for (int size : kStreamResponseSizes) request.add_response_parameters()->set_size(size);
  auto reader = stub_->StreamingOutputCall(&context, request);
  std::vector<std::string> bodies;
  StreamingOutputCallResponse response;
  while (reader->Read(&response)) bodies.push_back(response.payload().body());
  if (absl::Status s = ExpectOk("StreamingOutputCall", reader->Finish()); !s.ok()) return s;
  const size_t want = std::size(kStreamResponseSizes);
  if (bodies.size() != want) {
    return Fail("StreamingOutputCall: ", bodies.size(), " responses, want ", want);
  }
  for (size_t i = 0; i < want; ++i) {
    absl::Status s = ExpectZeros(absl::StrCat("StreamingOutputCall response ", i), bodies[i],
                                 kStreamResponseSizes[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Four rounds of one request (27182/8/1828/45904 bytes, asking for
// 31415/9/2653/58979) and its one response, then a half-close. Asserts: the
// call succeeded; exactly four responses, of those sizes in that order.
absl::Status InteropClient::PingPong() {
  rdmarpc::ClientContext context;
  auto stream = stub_->FullDuplexCall(&context);
  const size_t rounds = std::size(kStreamRequestSizes);
  for (size_t i = 0; i < rounds; ++i) {
    if (!stream->Write(StreamRequest(kStreamResponseSizes[i], kStreamRequestSizes[i]))) {
      return ExpectOk(absl::StrCat("FullDuplexCall, after Write ", i, " failed"), stream->Finish());
    }
    StreamingOutputCallResponse response;
    if (!stream->Read(&response)) {
      absl::Status status = stream->Finish();
      if (!status.ok()) {
        return ExpectOk(absl::StrCat("FullDuplexCall, after Read ", i, " failed"), status);
      }
      return Fail("FullDuplexCall: the server finished OK after ", i, " responses, want ", rounds);
    }
    absl::Status s = ExpectZeros(absl::StrCat("FullDuplexCall response ", i),
                                 response.payload().body(), kStreamResponseSizes[i]);
    if (!s.ok()) return s;
  }
  if (!stream->WritesDone()) {
    return ExpectOk("FullDuplexCall, after WritesDone failed", stream->Finish());
  }
  StreamingOutputCallResponse extra;
  if (stream->Read(&extra)) {
    return Fail("FullDuplexCall: a fifth response (", extra.payload().body().size(),
                " bytes) after the half-close, want exactly ", rounds);
  }
  return ExpectOk("FullDuplexCall", stream->Finish());
}

// Half-closes at once. Asserts: the call succeeded; no responses.
absl::Status InteropClient::EmptyStream() {
  rdmarpc::ClientContext context;
  auto stream = stub_->FullDuplexCall(&context);
  if (!stream->WritesDone()) {
    return ExpectOk("FullDuplexCall, after WritesDone failed", stream->Finish());
  }
  int responses = 0;
  StreamingOutputCallResponse response;
  while (stream->Read(&response)) ++responses;
  if (absl::Status s = ExpectOk("FullDuplexCall", stream->Finish()); !s.ok()) return s;
  if (responses != 0) return Fail("FullDuplexCall: ", responses, " responses, want 0");
  return absl::OkStatus();
}

// Starts StreamingInputCall and cancels it at once. Asserts: CANCELLED.
//
// Connect() first, so that the stream is opened on a connection at once;
// otherwise the cancel would end the call while the connection is still
// being made, before anything was sent.
absl::Status InteropClient::CancelAfterBegin() {
  if (absl::Status s = Connect(); !s.ok()) return s;
  rdmarpc::ClientContext context;
  StreamingInputCallResponse response;
  auto writer = stub_->StreamingInputCall(&context, &response);
  context.TryCancel();
  return ExpectStatus("StreamingInputCall cancelled after begin", writer->Finish(),
                      absl::StatusCode::kCancelled);
}

// Sends one request (27182 bytes, asking for 31415), reads the response,
// cancels. Asserts: CANCELLED (and, before it, the one response).
absl::Status InteropClient::CancelAfterFirstResponse() {
  rdmarpc::ClientContext context;
  auto stream = stub_->FullDuplexCall(&context);
  if (!stream->Write(StreamRequest(kStreamResponseSizes[0], kStreamRequestSizes[0]))) {
    return ExpectOk("FullDuplexCall, after Write failed", stream->Finish());
  }
  StreamingOutputCallResponse response;
  if (!stream->Read(&response)) {
    absl::Status status = stream->Finish();
    return Fail("FullDuplexCall: no first response to cancel after; the call ended ",
                Describe(status));
  }
  if (absl::Status s = ExpectZeros("FullDuplexCall first response", response.payload().body(),
                                   kStreamResponseSizes[0]);
      !s.ok()) {
    return s;
  }
  context.TryCancel();
  return ExpectStatus("FullDuplexCall cancelled after the first response", stream->Finish(),
                      absl::StatusCode::kCancelled);
}

// FullDuplexCall with a 1 ms timeout and one request the server answers with
// nothing (no response_parameters); the client never half-closes before the
// deadline. Asserts: DEADLINE_EXCEEDED.
//
// Connect() first, so that the 1 ms are spent on the stream at the server
// rather than on connection set-up (where the deadline would end the call
// before anything reached the server).
absl::Status InteropClient::TimeoutOnSleepingServer() {
  if (absl::Status s = Connect(); !s.ok()) return s;
  rdmarpc::ClientContext context;
  context.set_timeout(absl::Milliseconds(1));
  auto stream = stub_->FullDuplexCall(&context);
  StreamingOutputCallRequest request;
  request.mutable_payload()->mutable_body()->assign(static_cast<size_t>(kStreamRequestSizes[0]),
                                                    '\0');
  // The write may already fail when the deadline passed first; either way
  // the status tells.
  stream->Write(request);
  // Read before Finish: Finish half-closes, after which the server could
  // finish OK. Nothing comes until the deadline ends the call.
  StreamingOutputCallResponse response;
  if (stream->Read(&response)) {
    return Fail("FullDuplexCall: got a response of ", response.payload().body().size(),
                " bytes, want none before DEADLINE_EXCEEDED");
  }
  return ExpectStatus("FullDuplexCall with a 1 ms timeout", stream->Finish(),
                      absl::StatusCode::kDeadlineExceeded);
}

// UnaryCall (271828 bytes, asking for 314159) and FullDuplexCall (the same
// sizes, then a half-close), each with both echo entries. Asserts for each:
// the call succeeded; the initial metadata holds "x-grpc-test-echo-initial"
// = "test_initial_metadata_value" and the trailing metadata
// "x-grpc-test-echo-trailing-bin" = ab ab ab.
absl::Status InteropClient::CustomMetadata() {
  {
    rdmarpc::ClientContext context;
    context.AddMetadata(kEchoInitialKey, kEchoInitialValue);
    context.AddMetadata(kEchoTrailingKey, kEchoTrailingValue);
    SimpleResponse response;
    absl::Status status = stub_->UnaryCall(
        &context, LargeUnaryRequest(kLargeRequestSize, kLargeResponseSize), &response);
    if (absl::Status s = ExpectOk("UnaryCall", status); !s.ok()) return s;
    if (absl::Status s =
            ExpectZeros("UnaryCall response", response.payload().body(), kLargeResponseSize);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ExpectEntry("UnaryCall", "initial", context.GetServerInitialMetadata(),
                                     kEchoInitialKey, kEchoInitialValue);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ExpectEntry("UnaryCall", "trailing", context.GetServerTrailingMetadata(),
                                     kEchoTrailingKey, kEchoTrailingValue);
        !s.ok()) {
      return s;
    }
  }
  rdmarpc::ClientContext context;
  context.AddMetadata(kEchoInitialKey, kEchoInitialValue);
  context.AddMetadata(kEchoTrailingKey, kEchoTrailingValue);
  auto stream = stub_->FullDuplexCall(&context);
  if (!stream->Write(StreamRequest(kLargeResponseSize, kLargeRequestSize))) {
    return ExpectOk("FullDuplexCall, after Write failed", stream->Finish());
  }
  if (!stream->WritesDone()) {
    return ExpectOk("FullDuplexCall, after WritesDone failed", stream->Finish());
  }
  std::vector<std::string> bodies;
  StreamingOutputCallResponse response;
  while (stream->Read(&response)) bodies.push_back(response.payload().body());
  if (absl::Status s = ExpectOk("FullDuplexCall", stream->Finish()); !s.ok()) return s;
  if (bodies.size() != 1) return Fail("FullDuplexCall: ", bodies.size(), " responses, want 1");
  if (absl::Status s = ExpectZeros("FullDuplexCall response", bodies[0], kLargeResponseSize);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ExpectEntry("FullDuplexCall", "initial", context.GetServerInitialMetadata(),
                                   kEchoInitialKey, kEchoInitialValue);
      !s.ok()) {
    return s;
  }
  return ExpectEntry("FullDuplexCall", "trailing", context.GetServerTrailingMetadata(),
                     kEchoTrailingKey, kEchoTrailingValue);
}

// UnaryCall and FullDuplexCall (then a half-close), each asking for code 2
// "test status message". Asserts for each: that code and that message.
absl::Status InteropClient::StatusCodeAndMessage() {
  {
    rdmarpc::ClientContext context;
    SimpleRequest request;
    request.mutable_response_status()->set_code(kEchoedCode);
    request.mutable_response_status()->set_message(std::string(kStatusMessage));
    SimpleResponse response;
    absl::Status s = ExpectStatus("UnaryCall", stub_->UnaryCall(&context, request, &response),
                                  static_cast<absl::StatusCode>(kEchoedCode), kStatusMessage);
    if (!s.ok()) return s;
  }
  rdmarpc::ClientContext context;
  auto stream = stub_->FullDuplexCall(&context);
  StreamingOutputCallRequest request;
  request.mutable_response_status()->set_code(kEchoedCode);
  request.mutable_response_status()->set_message(std::string(kStatusMessage));
  // The server ends the call on reading this request, so the half-close
  // may find the stream ended already; the status is what is checked.
  stream->Write(request);
  stream->WritesDone();
  return ExpectStatus("FullDuplexCall", stream->Finish(),
                      static_cast<absl::StatusCode>(kEchoedCode), kStatusMessage);
}

// UnaryCall asking for code 2 and a message of tabs, CR LF, a BMP and a
// non-BMP character. Asserts: that code, and the message byte for byte.
absl::Status InteropClient::SpecialStatusMessage() {
  rdmarpc::ClientContext context;
  SimpleRequest request;
  request.mutable_response_status()->set_code(kEchoedCode);
  request.mutable_response_status()->set_message(std::string(kSpecialStatusMessage));
  SimpleResponse response;
  return ExpectStatus("UnaryCall", stub_->UnaryCall(&context, request, &response),
                      static_cast<absl::StatusCode>(kEchoedCode), kSpecialStatusMessage);
}

// TestService/UnimplementedCall, which the server does not implement.
// Asserts: UNIMPLEMENTED.
absl::Status InteropClient::UnimplementedMethod() {
  rdmarpc::ClientContext context;
  Empty response;
  return ExpectStatus("TestService/UnimplementedCall",
                      stub_->UnimplementedCall(&context, Empty(), &response),
                      absl::StatusCode::kUnimplemented);
}

// UnimplementedService/UnimplementedCall, a service the server does not
// register. Asserts: UNIMPLEMENTED.
absl::Status InteropClient::UnimplementedService() {
  auto stub = grpc::testing::UnimplementedService::NewStub(channel_);
  rdmarpc::ClientContext context;
  Empty response;
  return ExpectStatus("UnimplementedService/UnimplementedCall",
                      stub->UnimplementedCall(&context, Empty(), &response),
                      absl::StatusCode::kUnimplemented);
}

absl::Status InteropClient::RpcSoak(const SoakOptions& soak) { return Soak(soak, false); }

absl::Status InteropClient::ChannelSoak(const SoakOptions& soak) { return Soak(soak, true); }

// Each iteration is one large_unary call (soak.request_size bytes, asking
// for soak.response_size), on this client's channel or on a new one. It
// fails when the call fails, its response is wrong, or it took longer than
// soak.max_latency. The soak passes when every iteration ran before
// soak.overall_timeout and at most soak.max_failures failed. One line per
// failed iteration and a summary go to stdout.
absl::Status InteropClient::Soak(const SoakOptions& soak, bool fresh_channel) {
  const char* name = fresh_channel ? "channel_soak" : "rpc_soak";
  const absl::Time start = absl::Now();
  const absl::Time deadline = soak.overall_timeout > absl::ZeroDuration()
                                  ? start + soak.overall_timeout
                                  : absl::InfiniteFuture();
  int done = 0;
  int failures = 0;
  std::vector<absl::Duration> latencies;
  for (; done < soak.iterations && absl::Now() < deadline; ++done) {
    const absl::Time begin = absl::Now();
    absl::Status status;
    if (fresh_channel) {
      absl::StatusOr<std::shared_ptr<rdmarpc::Channel>> channel =
          rdmarpc::CreateChannel(server_, options_);
      status = channel.ok() ? OneLargeUnary(grpc::testing::TestService::NewStub(*channel).get(),
                                            soak.request_size, soak.response_size, deadline)
                            : channel.status();
    } else {
      status = OneLargeUnary(stub_.get(), soak.request_size, soak.response_size, deadline);
    }
    const absl::Duration latency = absl::Now() - begin;
    latencies.push_back(latency);
    if (status.ok() && soak.max_latency > absl::ZeroDuration() && latency > soak.max_latency) {
      status = Fail("took ", absl::FormatDuration(latency), ", more than the ",
                    absl::FormatDuration(soak.max_latency), " allowed");
    }
    if (!status.ok()) {
      ++failures;
      printf("%s: iteration %d failed after %s: %s\n", name, done,
             absl::FormatDuration(latency).c_str(), status.ToString().c_str());
    }
    const absl::Time next = begin + soak.min_time_between_rpcs;
    if (done + 1 < soak.iterations && absl::Now() < next) absl::SleepFor(next - absl::Now());
  }
  std::sort(latencies.begin(), latencies.end());
  auto percentile = [&latencies](int p) {
    if (latencies.empty()) return std::string("-");
    size_t i = std::min(latencies.size() - 1, latencies.size() * static_cast<size_t>(p) / 100);
    return absl::FormatDuration(latencies[i]);
  };
  printf("%s: %d of %d iterations in %s, %d failed; latency p50 %s p90 %s max %s\n", name, done,
         soak.iterations, absl::FormatDuration(absl::Now() - start).c_str(), failures,
         percentile(50).c_str(), percentile(90).c_str(), percentile(100).c_str());
  fflush(stdout);
  if (done < soak.iterations) {
    return Fail(name, ": only ", done, " of ", soak.iterations, " iterations within ",
                absl::FormatDuration(soak.overall_timeout));
  }
  if (failures > soak.max_failures) {
    return Fail(name, ": ", failures, " of ", soak.iterations, " iterations failed, at most ",
                soak.max_failures, " may");
  }
  return absl::OkStatus();
}

}  // namespace rdmarpc_interop
