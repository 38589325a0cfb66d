// metadata.h: call metadata on the wire, and gRPC's rules for it.
//
// The transport carries metadata as opaque bytes (WireHeader::meta_len);
// this is what they hold. A request's metadata is one list; a response's
// (and a stream's trailers') is two — initial, then trailing — as
// u32 initial-list length, initial list, trailing list. A list is, per
// entry in order: u32 key length, key, u32 value length, value (integers
// little-endian).
//
// Keys and values follow gRPC's rules (its PROTOCOL-HTTP2.md): keys are
// non-empty, lowercase ASCII letters, digits, '-', '_' and '.', and do not
// start with "grpc-" (reserved for the framework); values of keys ending in
// "-bin" are any bytes, other values printable ASCII (0x20..0x7E).
#ifndef RDMARPC_RUNTIME_RPC_METADATA_H_
#define RDMARPC_RUNTIME_RPC_METADATA_H_

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

using Metadata = std::multimap<std::string, std::string>;

// Bytes of keys and values, the measure max_metadata_bytes bounds.
size_t MetadataBytes(const Metadata& md);
// OK, or INTERNAL naming the first bad key or value, or RESOURCE_EXHAUSTED
// when `md` holds more than `limit` bytes (naming both). `what` names the
// list in messages ("client metadata"). `allow_pushback`: the one reserved
// key a server may set in its trailing metadata, "grpc-retry-pushback-ms"
// (gRFC A6 pushback), passes.
absl::Status ValidateMetadata(const Metadata& md, size_t limit, absl::string_view what,
                              bool allow_pushback = false);

std::string EncodeMetadata(const Metadata& md);
// Adds the entries encoded in `bytes` to `*md`; false when malformed.
bool DecodeMetadata(absl::string_view bytes, Metadata* md);

// A response's metadata (`bytes`, from `peer`) added to `*initial` and
// `*trailing` (`trailing` nullptr: a stream's headers, one list). INTERNAL
// when it does not decode, RESOURCE_EXHAUSTED naming both sizes when a list
// holds more than `limit` bytes (each list on its own, as gRPC bounds each
// header block); on either error nothing is added to either list.
absl::Status TakeServerMetadata(absl::string_view bytes, absl::string_view peer, size_t limit,
                                Metadata* initial, Metadata* trailing);

// A response's two lists.
std::string EncodeResponseMetadata(const Metadata& initial, const Metadata& trailing);
bool DecodeResponseMetadata(absl::string_view bytes, Metadata* initial, Metadata* trailing);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_METADATA_H_
