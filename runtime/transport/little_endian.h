// little_endian.h: the byte order of rdmarpc's wire formats (header.h,
// handshake.h). The hosts we run on are little-endian, so these compile to
// plain moves, but the wire format does not depend on it.
#ifndef RDMARPC_RUNTIME_TRANSPORT_LITTLE_ENDIAN_H_
#define RDMARPC_RUNTIME_TRANSPORT_LITTLE_ENDIAN_H_

#include <cstddef>

namespace rdmarpc {
namespace internal {

// Stores `v` at `out` (sizeof(T) bytes), least significant byte first.
template <typename T>
inline void PutLittleEndian(char* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Loads a T stored by PutLittleEndian at `in`.
template <typename T>
inline T GetLittleEndian(const char* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(in[i])) << (8 * i));
  }
  return v;
}

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_TRANSPORT_LITTLE_ENDIAN_H_
