// stream_limits.h: the size check a stream message passes before it is
// sent, the same on both ends of a stream.
#ifndef RDMARPC_RUNTIME_RPC_STREAM_LIMITS_H_
#define RDMARPC_RUNTIME_RPC_STREAM_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdmarpc {
namespace internal {

// OK when a message of `message_bytes` (serialised) and its attachment of
// `attachment_bytes` each fit `max_message_bytes`; RESOURCE_EXHAUSTED
// naming the one that does not (the message first) otherwise.
inline absl::Status CheckStreamMessageSize(size_t message_bytes, size_t attachment_bytes,
                                           size_t max_message_bytes) {
  if (message_bytes > max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("stream message of ", message_bytes,
                                                     " bytes exceeds max_message_bytes ",
                                                     max_message_bytes));
  }
  if (attachment_bytes > max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("stream message attachment of ",
                                                     attachment_bytes,
                                                     " bytes exceeds max_message_bytes ",
                                                     max_message_bytes));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_STREAM_LIMITS_H_
