// softrdma_wire_fuzzer.cc: what softrdma reads from a peer's TCP socket
// (runtime/softrdma/wire.h): a frame header (the first 32 bytes) and the
// rdma_cm parameters of CONNECT_REQ / ACCEPT (the rest), same-host hello
// included. Beyond not crashing: the header re-encodes to its bytes (the
// reserved byte aside), and decoded parameters re-encode and decode to the
// same values.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/softrdma/wire.h"

namespace {

using softrdma::internal::ConnParams;
using softrdma::internal::DecodeConnParams;
using softrdma::internal::DecodeHeader;
using softrdma::internal::EncodeConnParams;
using softrdma::internal::EncodeHeader;
using softrdma::internal::kHeaderSize;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "softrdma_wire_fuzzer: %s\n", what);
    std::abort();
  }
}

bool Same(const ConnParams& a, const ConnParams& b) {
  return a.qp_num == b.qp_num && a.responder_resources == b.responder_resources &&
         a.initiator_depth == b.initiator_depth && a.retry_count == b.retry_count &&
         a.rnr_retry_count == b.rnr_retry_count && a.private_data_len == b.private_data_len &&
         std::memcmp(a.private_data, b.private_data, a.private_data_len) == 0 &&
         a.shm.present == b.shm.present &&
         (!a.shm.present ||
          (a.shm.accept == b.shm.accept &&
           std::memcmp(a.shm.boot_id, b.shm.boot_id, sizeof(a.shm.boot_id)) == 0 &&
           a.shm.netns_ino == b.shm.netns_ino && a.shm.netns_dev == b.shm.netns_dev &&
           a.shm.pid == b.shm.pid && a.shm.probe_addr == b.shm.probe_addr &&
           a.shm.probe_value == b.shm.probe_value && a.shm.name_len == b.shm.name_len &&
           std::memcmp(a.shm.name, b.shm.name, a.shm.name_len) == 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeaderSize) return 0;
  uint8_t again[kHeaderSize];
  EncodeHeader(DecodeHeader(data), again);
  Check(std::memcmp(again, data, 3) == 0 && std::memcmp(again + 4, data + 4, kHeaderSize - 4) == 0,
        "frame header does not round-trip");
  ConnParams p;
  if (!DecodeConnParams(data + kHeaderSize, size - kHeaderSize, &p)) return 0;
  const std::vector<uint8_t> encoded = EncodeConnParams(p);
  ConnParams q;
  Check(DecodeConnParams(encoded.data(), encoded.size(), &q) && Same(p, q),
        "connection parameters do not round-trip");
  return 0;
}
