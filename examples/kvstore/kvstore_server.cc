// kvstore_server: serves rdmarpc.examples.KvStore from memory (and
// grpc.health.v1.Health and grpc.reflection's ServerReflection, v1 and
// v1alpha) until SIGINT or SIGTERM.
//
//   kvstore_server --listen=127.0.0.1:7100 [--workers=2]
//
// Prints "listening on HOST:PORT" on stdout once it accepts calls (port 0
// picks a free port).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health/health_check_service.h"
#include "kvstore.pb.h"
#include "kvstore.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"
#include "reflection/proto_server_reflection.h"

DEFINE_string(listen, "127.0.0.1:7100", "Address to listen on, HOST:PORT (port 0 picks a free one)");
DEFINE_int32(workers, 2, "Server worker threads, each owning one completion queue");
DEFINE_string(register, "",
              "Register the server for discovery: etcd://HOST:PORT[,HOST:PORT...]/PREFIX "
              "(its address under PREFIX, with a lease kept alive; revoked on shutdown)");
DEFINE_int32(register_ttl_s, 10, "TTL of the --register lease, in seconds");
DEFINE_string(register_address, "",
              "The address --register publishes, IP:PORT (default: the one bound; "
              "required with a wildcard --listen such as 0.0.0.0 or [::])");

namespace {

namespace kv = rdmarpc::examples;

// Largest value accepted by Put, in bytes.
constexpr size_t kMaxValueBytes = 64 << 20;
// Messages carry the key and protobuf framing besides the value.
constexpr size_t kMaxMessageBytes = kMaxValueBytes + (1 << 20);
// Largest value accepted by PutStream, in bytes.
constexpr uint64_t kMaxStreamedValueBytes = uint64_t{2} << 30;
// GetStream's chunk size when the request names none: 1 MiB, large enough
// that per-message costs vanish beside the copy, small enough that a
// window of chunks (internal::kStreamWindow) stays at 16 MiB.
constexpr uint32_t kDefaultChunkBytes = 1 << 20;

// Values are immutable once stored and shared, so Get and GetStream copy
// a handle under the lock, not the bytes. A value put as an attachment is
// the very Buffer the transport pulled it into (no copy), and a Get with
// as_attachment sends that Buffer back as it is.
using Value = rdmarpc::Buffer;

class KvStoreImpl final : public kv::KvStore::Service {
 public:
  absl::Status Put(rdmarpc::ServerContext* context, const kv::PutRequest& request,
                   kv::PutResponse* response) override {
    if (request.key().empty()) return absl::InvalidArgumentError("Put: empty key");
    const rdmarpc::Buffer& attachment = context->request_attachment();
    if (attachment && !request.value().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Put: key \"", request.key(), "\" has a value of ", request.value().size(),
                       " bytes in the message and an attachment of ", attachment.size(), " bytes"));
    }
    const size_t size = attachment ? attachment.size() : request.value().size();
    if (size > kMaxValueBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Put: value of key \"", request.key(), "\" is ", size,
                       " bytes, more than the limit of ", kMaxValueBytes));
    }
    // Copied (from the message) outside the lock: a 64 MiB copy must not
    // stall every other call. An attachment is kept as it arrived.
    response->set_replaced(
        Store(request.key(), attachment ? attachment : rdmarpc::Buffer::CopyOf(request.value())));
    return absl::OkStatus();
  }

  absl::Status PutStream(rdmarpc::ServerContext* /*context*/,
                         rdmarpc::ServerReader<kv::PutChunk>* reader,
                         kv::PutResponse* response) override {
    kv::PutChunk chunk;
    rdmarpc::Buffer piece;  // a chunk's bytes sent as its attachment
    if (!reader->Read(&chunk, &piece)) return absl::InvalidArgumentError("PutStream: no chunks");
    const std::string key = chunk.key();
    if (key.empty()) return absl::InvalidArgumentError("PutStream: empty key");
    auto value = std::make_shared<std::string>();  // kept by the Buffer below
    // The hint saves the doublings of a growing string, up to the limit.
    value->reserve(std::min(chunk.total_bytes(), kMaxStreamedValueBytes));
    uint64_t chunks = 0;
    do {
      ++chunks;
      if (!chunk.key().empty() && chunk.key() != key) {
        return absl::InvalidArgumentError(absl::StrCat("PutStream: chunk ", chunks, " names key \"",
                                                       chunk.key(), "\", the first \"", key, "\""));
      }
      if (piece && !chunk.data().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PutStream: chunk ", chunks, " has ", chunk.data().size(),
            " bytes in the message and an attachment of ", piece.size(), " bytes"));
      }
      const absl::string_view data = piece ? piece.view() : absl::string_view(chunk.data());
      if (value->size() + data.size() > kMaxStreamedValueBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PutStream: value of key \"", key, "\" exceeds ", kMaxStreamedValueBytes,
            " bytes at chunk ", chunks));
      }
      value->append(data.data(), data.size());
    } while (reader->Read(&chunk, &piece));
    char* data = value->data();
    const size_t size = value->size();
    response->set_replaced(Store(key, rdmarpc::Buffer::Wrap(data, size, [value] {})));
    return absl::OkStatus();
  }

  absl::Status Get(rdmarpc::ServerContext* context, const kv::GetRequest& request,
                   kv::GetResponse* response) override {
    Value value = Find(request.key());
    if (!value) return NotFound(request.key());
    if (request.as_attachment()) {
      context->set_response_attachment(std::move(value));
    } else {
      response->set_value(value.data(), value.size());
    }
    return absl::OkStatus();
  }

  absl::Status GetStream(rdmarpc::ServerContext* /*context*/, const kv::GetRequest& request,
                         rdmarpc::ServerWriter<kv::GetChunk>* writer) override {
    const uint32_t chunk_bytes =
        request.chunk_bytes() == 0 ? kDefaultChunkBytes : request.chunk_bytes();
    if (chunk_bytes > kMaxValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat("GetStream: chunk_bytes ", chunk_bytes,
                                                     " exceeds ", kMaxValueBytes));
    }
    Value value = Find(request.key());
    if (!value) return NotFound(request.key());
    kv::GetChunk chunk;
    chunk.set_total_bytes(value.size());
    size_t offset = 0;
    do {
      const size_t n = std::min<size_t>(chunk_bytes, value.size() - offset);
      bool written;
      if (request.as_attachment()) {
        // The stored bytes themselves: the client's NIC reads the slice.
        written = writer->Write(chunk, value.Slice(offset, n));
      } else {
        chunk.set_data(value.data() + offset, n);
        written = writer->Write(chunk);
      }
      offset += n;
      if (!written) return absl::CancelledError("GetStream: stream ended");
    } while (offset < value.size());
    return absl::OkStatus();
  }

  absl::Status Delete(rdmarpc::ServerContext* /*context*/, const kv::DeleteRequest& request,
                      kv::DeleteResponse* /*response*/) override {
    Value doomed;  // freed after the lock is released
    absl::MutexLock lock(&mu_);
    auto it = values_.find(request.key());
    if (it == values_.end()) return NotFound(request.key());
    doomed = std::move(it->second);
    values_.erase(it);
    return absl::OkStatus();
  }

  absl::Status List(rdmarpc::ServerContext* /*context*/, const kv::ListRequest& request,
                    kv::ListResponse* response) override {
    std::vector<std::string> keys;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& entry : values_) {
        if (absl::StartsWith(entry.first, request.prefix())) keys.push_back(entry.first);
      }
    }
    std::sort(keys.begin(), keys.end());
    for (std::string& key : keys) response->add_keys(std::move(key));
    return absl::OkStatus();
  }

 private:
  // Stores `value` under `key`; whether it replaced a value.
  bool Store(const std::string& key, Value value) {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = values_.try_emplace(key);
    // The old value goes into `value`, a parameter, so the last reference
    // to it (a value of up to 2 GiB) is dropped after the lock is released.
    std::swap(it->second, value);
    return !inserted;
  }

  Value Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = values_.find(key);
    return it == values_.end() ? Value() : it->second;
  }

  static absl::Status NotFound(const std::string& key) {
    return absl::NotFoundError(absl::StrCat("key \"", key, "\" not found"));
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Value> values_ ABSL_GUARDED_BY(mu_);
};

absl::string_view HostOf(absl::string_view address) {
  size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "kvstore_server --listen=HOST:PORT [--workers=N] "
      "[--register=etcd://HOST:PORT/PREFIX [--register_ttl_s=S] [--register_address=IP:PORT]]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_workers < 1) {
    fprintf(stderr, "kvstore_server: --workers must be at least 1, got %d\n", FLAGS_workers);
    return 2;
  }

  // Only sigwait() below sees SIGINT/SIGTERM; see echo_server.cc.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  KvStoreImpl store;
  rdmarpc::HealthCheckService health;
  rdmarpc::reflection::ProtoServerReflection reflection;  // outlives the server
  rdmarpc::ServerOptions options;
  options.num_workers = FLAGS_workers;
  options.register_target = FLAGS_register;
  options.register_ttl = absl::Seconds(FLAGS_register_ttl_s);
  options.register_address = FLAGS_register_address;
  options.max_message_bytes = kMaxMessageBytes;
  rdmarpc::Server server(options);
  for (rdmarpc::Service* service : {static_cast<rdmarpc::Service*>(&store),
                                    static_cast<rdmarpc::Service*>(&health)}) {
    absl::Status status = server.AddService(service);
    if (!status.ok()) {
      LOG(ERROR) << "AddService(" << service->full_name() << "): " << status;
      return 1;
    }
  }
  // grpc.reflection.v1 and v1alpha, so tools (grpcurl-style clients) can
  // list the services and fetch their .proto descriptors.
  if (absl::Status added = reflection.AddToServer(&server); !added.ok()) {
    LOG(ERROR) << "ProtoServerReflection::AddToServer: " << added;
    return 1;
  }
  absl::Status status = server.Start(FLAGS_listen);
  if (!status.ok()) {
    fprintf(stderr, "kvstore_server: %s %s\n", absl::StatusCodeToString(status.code()).c_str(),
            std::string(status.message()).c_str());
    return 1;
  }
  health.SetServingStatus(store.full_name(), true);

  std::string bound = absl::StrCat(HostOf(FLAGS_listen), ":", server.port());
  LOG(INFO) << "kvstore_server listening on " << bound;
  printf("listening on %s\n", bound.c_str());
  fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "kvstore_server: " << strsignal(signal_number) << ", shutting down";
  health.Shutdown();
  server.Shutdown();
  server.Wait();
  return 0;
}
