// Wire-format codec (runtime/transport/header.h): what every message pays on
// the send side (EncodeImm + EncodePrefix) and on the receive side (DecodeImm
// + DecodeMessage), without any verbs call.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "runtime/transport/header.h"

namespace rdmarpc {
namespace internal {
namespace {

// A typical method name, carried as aux in every request.
constexpr absl::string_view kMethod = "/rdmarpc.bench.BenchEcho/Echo";

WireHeader RequestHeader(uint32_t payload_len) {
  WireHeader h;
  h.kind = MsgKind::kRequest;
  h.credits = 8;
  h.aux_len = static_cast<uint16_t>(kMethod.size());
  h.payload_len = payload_len;
  h.timeout_us = 5'000'000;
  return h;
}

void BM_ImmEncodeDecode(benchmark::State& state) {
  Imm imm;
  imm.kind = MsgKind::kResponse;
  imm.generation = 0x123;
  uint16_t slot = 0;
  for (auto _ : state) {
    imm.slot = slot++;
    uint32_t wire = EncodeImm(imm);
    benchmark::DoNotOptimize(wire);
    absl::StatusOr<Imm> decoded = DecodeImm(wire);
    benchmark::DoNotOptimize(decoded);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ImmEncodeDecode);

// Header + method name + a 32 B payload copied behind them: a small eager
// request as the client lays it into its registered send buffer.
void BM_EncodeEagerRequest(benchmark::State& state) {
  const WireHeader h = RequestHeader(32);
  const std::string payload(32, 'p');
  std::array<char, 256> out{};
  for (auto _ : state) {
    size_t n = EncodePrefix(h, kMethod, RemoteBuffer{}, RemoteBuffer{}, out.data());
    std::memcpy(out.data() + n, payload.data(), payload.size());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeEagerRequest);

// A rendezvous request: payload remote, reply buffer advertised, so both
// RemoteBuffer descriptors are encoded.
void BM_EncodeRendezvousRequest(benchmark::State& state) {
  WireHeader h = RequestHeader(1 << 20);
  h.flags = kFlagPayloadRemote | kFlagReplyBuffer;
  const RemoteBuffer payload{0x7f0000001000, 0x1234, 1 << 20};
  const RemoteBuffer reply{0x7f0000201000, 0x5678, 1 << 20};
  std::array<char, 256> out{};
  for (auto _ : state) {
    size_t n = EncodePrefix(h, kMethod, payload, reply, out.data());
    benchmark::DoNotOptimize(n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeRendezvousRequest);

void BM_DecodeEagerRequest(benchmark::State& state) {
  const WireHeader h = RequestHeader(32);
  std::string message(EncodedPrefixBytes(h) + 32, 'p');
  EncodePrefix(h, kMethod, RemoteBuffer{}, RemoteBuffer{}, message.data());
  for (auto _ : state) {
    absl::StatusOr<ParsedMessage> parsed = DecodeMessage(message);
    benchmark::DoNotOptimize(parsed);
  }
  // Checked once, outside the timed loop: a benchmark of a failing decode
  // would measure the error path.
  absl::StatusOr<ParsedMessage> parsed = DecodeMessage(message);
  if (!parsed.ok() || parsed->payload.size() != 32 || parsed->aux != kMethod) {
    state.SkipWithError("DecodeMessage did not return the encoded request");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeEagerRequest);

void BM_DecodeRendezvousRequest(benchmark::State& state) {
  WireHeader h = RequestHeader(1 << 20);
  h.flags = kFlagPayloadRemote | kFlagReplyBuffer;
  std::string message(EncodedPrefixBytes(h), '\0');
  EncodePrefix(h, kMethod, RemoteBuffer{0x7f0000001000, 0x1234, 1 << 20},
               RemoteBuffer{0x7f0000201000, 0x5678, 1 << 20}, message.data());
  for (auto _ : state) {
    absl::StatusOr<ParsedMessage> parsed = DecodeMessage(message);
    benchmark::DoNotOptimize(parsed);
  }
  absl::StatusOr<ParsedMessage> parsed = DecodeMessage(message);
  if (!parsed.ok() || parsed->payload_remote.rkey != 0x1234 ||
      parsed->reply_buffer.rkey != 0x5678) {
    state.SkipWithError("DecodeMessage did not return the encoded descriptors");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeRendezvousRequest);

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
