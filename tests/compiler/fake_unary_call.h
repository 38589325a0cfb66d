// tests/compiler/fake_unary_call.h: a stand-in for the runtime's
// BlockingUnaryCall/AsyncUnaryCall (rdmarpc/impl/unary_call.h) that records
// what a generated Stub passed, so stub tests need neither a server nor the
// runtime library. Single-threaded tests only.
#ifndef RDMARPC_TESTS_COMPILER_FAKE_UNARY_CALL_H_
#define RDMARPC_TESTS_COMPILER_FAKE_UNARY_CALL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rdmarpc/channel.h"

namespace fake_call {

struct RecordedCall {
  int calls = 0;  // calls since Reset()
  bool async = false;
  rdmarpc::Channel* channel = nullptr;
  std::string method;
  absl::Time deadline;  // context->deadline() when the call was made
  const google::protobuf::MessageLite* request = nullptr;
  google::protobuf::MessageLite* response = nullptr;
  // The IDL policy the Stub passed (IdlMethodConfig's JSON); empty: none.
  std::string idl_config_json;
};

// The last call made through the fake.
const RecordedCall& LastCall();

// Forgets recorded calls; later calls return `status` (async ones pass it to
// `done`, inline).
void Reset(absl::Status status);

}  // namespace fake_call

#endif  // RDMARPC_TESTS_COMPILER_FAKE_UNARY_CALL_H_
