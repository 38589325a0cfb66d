// status_payloads.h: the binary details of a non-OK status on the wire.
//
// absl::Status payloads (type URL → bytes, e.g. a google.rpc.Status-shaped
// message under "type.googleapis.com/google.rpc.Status", as gRPC's
// grpc-status-details-bin carries) travel as the payload of an error
// response, which is otherwise empty; so details of any size up to
// max_message_bytes go eagerly or by rendezvous like any message.
//
// Encoding, repeated for every payload in absl::Status::ForEachPayload
// order: u32 type-URL length, the type URL, u32 value length, the value
// (integers little-endian).
#ifndef RDMARPC_RUNTIME_RPC_STATUS_PAYLOADS_H_
#define RDMARPC_RUNTIME_RPC_STATUS_PAYLOADS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

// The payloads of `status`, encoded; empty when it has none.
std::string EncodeStatusPayloads(const absl::Status& status);
// Adds the payloads encoded in `bytes` to `*status` (not OK). False, with
// `*status` unchanged, when `bytes` is malformed (a length overruns it).
bool DecodeStatusPayloads(absl::string_view bytes, absl::Status* status);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_STATUS_PAYLOADS_H_
