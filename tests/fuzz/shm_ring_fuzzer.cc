// shm_ring_fuzzer.cc: the records of softrdma's same-host ring
// (runtime/softrdma/shm_record.h), which the peer process writes into
// memory this process reads. The input is a ring's bytes from position 0.
// Beyond not crashing: every record accepted lies within the ring, and
// every frame's payload or SGE list within its record.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "runtime/softrdma/shm_record.h"

namespace {

using softrdma::internal::Frame;
using softrdma::internal::ParseShmRecord;
using softrdma::internal::ShmRecord;

volatile uint64_t g_sink = 0;  // keeps the reads of the bodies

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "shm_ring_fuzzer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so that a read past the ring's end is one past a
  // heap block (ASan).
  std::unique_ptr<uint8_t[]> ring(new uint8_t[size > 0 ? size : 1]);
  if (size > 0) std::memcpy(ring.get(), data, size);
  size_t pos = 0;
  uint64_t sum = 0;  // reads every body byte (ASan checks each)
  while (pos < size) {
    Frame f;
    uint32_t rec = 0;
    softrdma::internal::HintOffer hint;
    const ShmRecord r = ParseShmRecord(ring.get() + pos, size - pos, &f, &rec, &hint);
    if (r == ShmRecord::kCorrupt) break;
    Check(rec >= 8 && rec % 8 == 0 && rec <= size - pos, "record size out of bounds");
    if (r == ShmRecord::kFrame) {
      const uint8_t* body = f.view != nullptr ? f.view : f.sgl;
      const size_t n = f.view != nullptr ? f.h.length : f.sgl_bytes;
      Check(body >= ring.get() + pos && body + n <= ring.get() + pos + rec,
            "frame body outside its record");
      for (size_t i = 0; i < n; ++i) sum += body[i];
    }
    if (r == ShmRecord::kHint) {
      Check(rec >= 8 + softrdma::internal::kHintBodyBytes, "hint body outside its record");
      sum += hint.slot + hint.inode;
    }
    pos += rec;
  }
  g_sink = sum;
  return 0;
}
