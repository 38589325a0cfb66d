// attachment_pattern.h: attachments of known bytes for the attachment
// tests, so every byte that arrives can be checked.
#ifndef RDMARPC_TESTS_RPC_ATTACHMENT_PATTERN_H_
#define RDMARPC_TESTS_RPC_ATTACHMENT_PATTERN_H_

#include <cstddef>
#include <cstdint>

#include "rdmarpc/buffer.h"

namespace rdmarpc {
namespace test {

// Byte `i` of the pattern `seed` names.
inline uint8_t PatternByte(size_t i, int seed) {
  return static_cast<uint8_t>((i * 131 + seed) & 0xFF);
}

// `n` bytes of pattern `seed` in a Buffer of their own (0 bytes: an
// attachment that is not sent).
inline Buffer Pattern(size_t n, int seed) {
  Buffer b = Buffer::Allocate(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<char>(PatternByte(i, seed));
  return b;
}

}  // namespace test
}  // namespace rdmarpc

#endif  // RDMARPC_TESTS_RPC_ATTACHMENT_PATTERN_H_
