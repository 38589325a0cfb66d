// A client-streaming upload in one process over softrdma: each iteration
// opens a stream, writes kChunksPerStream chunks of the given size and
// waits for the server's summary. The chunk goes either as a `bytes` field
// (serialised, copied into a registered buffer, pulled by the server and
// parsed) or as an rdmarpc::Buffer attachment beside an empty message
// (pulled by the server's RDMA READ straight from the client's Buffer, which
// is reused across chunks). bytes/s counts the chunks' bytes once.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench_stream.rdmarpc.pb.h"
#include "benchmark/benchmark.h"
#include "loopback_setup.h"
#include "rdmarpc/rdmarpc.h"

namespace rdmarpc {
namespace bench {
namespace {

constexpr int kChunksPerStream = 64;

class UploadImpl final : public BenchStream::Service {
 public:
  absl::Status Upload(ServerContext*, ServerReader<StreamChunk>* reader,
                      StreamSummary* summary) override {
    StreamChunk chunk;
    Buffer attachment;
    uint64_t chunks = 0;
    uint64_t bytes = 0;
    while (reader->Read(&chunk, &attachment)) {
      ++chunks;
      bytes += attachment ? attachment.size() : chunk.data().size();
    }
    summary->set_chunks(chunks);
    summary->set_bytes(bytes);
    return absl::OkStatus();
  }
};

using UploadSetup = LoopbackSetup<UploadImpl, BenchStream>;

// One stream of kChunksPerStream chunks; OK only when the server counted
// them all.
absl::Status UploadOnce(BenchStream::Stub& stub, const StreamChunk& chunk, const Buffer& piece,
                        size_t chunk_bytes) {
  ClientContext context;
  StreamSummary summary;
  std::unique_ptr<ClientWriterInterface<StreamChunk>> writer = stub.Upload(&context, &summary);
  for (int i = 0; i < kChunksPerStream; ++i) {
    if (!(piece ? writer->Write(chunk, piece) : writer->Write(chunk))) break;
  }
  absl::Status status = writer->Finish();
  if (!status.ok()) return status;
  const uint64_t want = uint64_t{kChunksPerStream} * chunk_bytes;
  if (summary.chunks() != kChunksPerStream || summary.bytes() != want) {
    return absl::DataLossError(absl::StrCat("server counted ", summary.chunks(), " chunks of ",
                                            summary.bytes(), " bytes, want ", kChunksPerStream,
                                            " of ", want));
  }
  return absl::OkStatus();
}

// state.range(0): chunk bytes; state.range(1): 1 = as an attachment.
void BM_StreamUpload(benchmark::State& state) {
  const size_t chunk_bytes = static_cast<size_t>(state.range(0));
  const bool as_attachment = state.range(1) != 0;
  UploadSetup setup;
  absl::Status status = setup.Start();
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  StreamChunk chunk;
  Buffer piece;
  if (as_attachment) {
    piece = Buffer::Allocate(chunk_bytes);
    std::memset(piece.data(), 's', chunk_bytes);
  } else {
    chunk.set_data(std::string(chunk_bytes, 's'));
  }
  // Untimed first stream: connects and registers (the Buffer, the pools).
  status = UploadOnce(*setup.stub, chunk, piece, chunk_bytes);
  if (!status.ok()) {
    state.SkipWithError(absl::StrCat("first stream: ", status.ToString()).c_str());
    return;
  }
  for (auto _ : state) {
    status = UploadOnce(*setup.stub, chunk, piece, chunk_bytes);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * kChunksPerStream);
  state.SetBytesProcessed(state.iterations() * kChunksPerStream *
                          static_cast<int64_t>(chunk_bytes));
}
BENCHMARK(BM_StreamUpload)
    ->ArgNames({"chunk_bytes", "attachment"})
    ->ArgsProduct({{64 << 10, 1 << 20, 4 << 20}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bench
}  // namespace rdmarpc
