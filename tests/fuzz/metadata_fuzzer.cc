// metadata_fuzzer.cc: call metadata as it arrives from a peer
// (runtime/rpc/metadata.h): a request's list, and a response's two lists
// through TakeServerMetadata with a small limit. Beyond not crashing: what
// decodes re-encodes and decodes to the same entries, and a list over the
// limit leaves nothing behind.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "runtime/rpc/metadata.h"

namespace {

using rdmarpc::internal::DecodeMetadata;
using rdmarpc::internal::DecodeResponseMetadata;
using rdmarpc::internal::EncodeMetadata;
using rdmarpc::internal::EncodeResponseMetadata;
using rdmarpc::internal::Metadata;
using rdmarpc::internal::MetadataBytes;
using rdmarpc::internal::TakeServerMetadata;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "metadata_fuzzer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  Metadata md;
  if (DecodeMetadata(bytes, &md)) {
    Metadata again;
    Check(DecodeMetadata(EncodeMetadata(md), &again) && again == md,
          "request metadata does not round-trip");
  }
  Metadata initial, trailing;
  if (DecodeResponseMetadata(bytes, &initial, &trailing)) {
    Metadata i2, t2;
    Check(DecodeResponseMetadata(EncodeResponseMetadata(initial, trailing), &i2, &t2) &&
              i2 == initial && t2 == trailing,
          "response metadata does not round-trip");
  }
  constexpr size_t kLimit = 64;
  Metadata taken_initial, taken_trailing;
  const absl::Status s =
      TakeServerMetadata(bytes, "fuzz:1", kLimit, &taken_initial, &taken_trailing);
  if (s.ok()) {
    Check(MetadataBytes(taken_initial) <= kLimit && MetadataBytes(taken_trailing) <= kLimit,
          "a list over the limit was taken");
  } else {
    Check(taken_initial.empty() && taken_trailing.empty(), "a refused list left entries");
  }
  return 0;
}
