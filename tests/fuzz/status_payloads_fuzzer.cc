// status_payloads_fuzzer.cc: the details of an error status as a server
// sends them (runtime/rpc/status_payloads.h). Beyond not crashing: a
// refused input leaves the status unchanged, and what decodes re-encodes
// and decodes to the same payloads.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/rpc/status_payloads.h"

using rdmarpc::internal::DecodeStatusPayloads;
using rdmarpc::internal::EncodeStatusPayloads;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::Status status = absl::InternalError("fuzz");
  const absl::Status before = status;
  if (!DecodeStatusPayloads(bytes, &status)) {
    if (status != before) {
      std::fprintf(stderr, "status_payloads_fuzzer: a refused input changed the status\n");
      std::abort();
    }
    return 0;
  }
  absl::Status again = absl::InternalError("fuzz");
  if (!DecodeStatusPayloads(EncodeStatusPayloads(status), &again) || again != status) {
    std::fprintf(stderr, "status_payloads_fuzzer: payloads do not round-trip\n");
    std::abort();
  }
  return 0;
}
