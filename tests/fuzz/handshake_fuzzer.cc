// handshake_fuzzer.cc: the rdma_cm private data of connect, accept and
// reject (handshake.h), which any host that reaches the port can send.
// Beyond not crashing: what decodes re-encodes to the same fields and
// connection token.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/transport/handshake.h"

using rdmarpc::internal::DecodeHandshake;
using rdmarpc::internal::EncodeHandshake;
using rdmarpc::internal::kHandshakeBytes;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // As an accept or reject (no token), then as a connect request.
  auto plain = DecodeHandshake(data, size);
  if (plain.ok() && !plain->token.empty()) {
    std::fprintf(stderr, "handshake_fuzzer: an accept or reject read as carrying a token\n");
    std::abort();
  }
  auto h = DecodeHandshake(data, size, /*connect_request=*/true);
  if (!h.ok()) return 0;
  char out[kHandshakeBytes];
  EncodeHandshake(*h, out);
  std::string bytes(out, sizeof(out));
  if (!h->token.empty()) {
    bytes.push_back(static_cast<char>(h->token.size()));
    bytes += h->token;
  }
  auto again = DecodeHandshake(bytes.data(), bytes.size(), /*connect_request=*/true);
  if (!again.ok() || again->version != h->version || again->recv_depth != h->recv_depth ||
      again->recv_buffer_bytes != h->recv_buffer_bytes || again->features != h->features ||
      again->reject_reason != h->reject_reason || again->token != h->token) {
    std::fprintf(stderr, "handshake_fuzzer: private data does not round-trip\n");
    std::abort();
  }
  return 0;
}
