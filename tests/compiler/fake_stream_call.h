// tests/compiler/fake_stream_call.h: a stand-in for the runtime's streaming
// call objects (rdmarpc/impl/stream_call.h), so tests of generated streaming
// code need neither a server nor the runtime library.
//
// Client side: every internal::ClientStream a generated Stub opens (through
// the ClientReader/ClientWriter/ClientReaderWriter of rdmarpc/sync_stream.h)
// records what it was opened with and what was written to it; its Read
// returns the messages a test scripted with Reset, and Finish the scripted
// status. Server side: a test makes an internal::ServerStream over a
// ServerStreamState (defined below; the runtime only declares it), fills in
// what the client "sent" and hands it to MethodHandler::InvokeStream.
//
// It defines runtime symbols (ClientStream's and ServerStream's members, and
// the two state classes), so a test binary links it instead of the runtime
// library, never beside it. Single-threaded tests only.
#ifndef RDMARPC_TESTS_COMPILER_FAKE_STREAM_CALL_H_
#define RDMARPC_TESTS_COMPILER_FAKE_STREAM_CALL_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/impl/callback_call.h"
#include "rdmarpc/impl/stream_call.h"

namespace fake_stream {

// The last client stream opened since Reset().
struct RecordedStream {
  int opened = 0;  // streams opened since Reset()
  rdmarpc::Channel* channel = nullptr;
  std::string method;
  rdmarpc::internal::RpcKind kind = rdmarpc::internal::RpcKind::kUnary;
  absl::Time deadline;   // context->deadline() when the stream was opened
  bool has_first = false;  // a first message was passed (server streaming)
  std::string first;       // that message, serialised
  std::vector<std::string> written;  // messages passed to Write, serialised
  int writes_done = 0;  // WritesDone calls
  int reads = 0;        // Read calls that returned a message
  int finishes = 0;     // Finish calls
  bool destroyed_unfinished = false;  // destroyed without Finish (a cancel)
  // Bound to a reactor (ClientCallbackStream::Bind) rather than opened by
  // a blocking reader or writer; `response_target` is what Bind was given.
  bool reactor = false;
  const void* response_target = nullptr;
  int start_calls = 0;  // ClientCallbackStream::StartCall calls
};

const RecordedStream& LastStream();

// Forgets recorded streams. Each stream opened later reads `reads` (messages
// serialised, in order; one that does not parse makes Read return false),
// then Read returns false; its Finish returns `status`.
void Reset(std::vector<std::string> reads, absl::Status status);

}  // namespace fake_stream

namespace rdmarpc {
namespace internal {

// The fake's server end of a stream: what ServerStream::Read hands out and
// what ServerStream::Write was given.
class ServerStreamState {
 public:
  std::deque<std::string> incoming;  // messages the client sent, serialised
  std::vector<std::string> written;  // messages the handler wrote, serialised
  bool cancelled = false;            // Read and Write return false
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_COMPILER_FAKE_STREAM_CALL_H_
