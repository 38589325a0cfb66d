// kvstore_server: serves rdmarpc.examples.KvStore from memory until SIGINT or
// SIGTERM.
//
//   kvstore_server --listen=127.0.0.1:7100 [--workers=2]
//
// Prints "listening on HOST:PORT" on stdout once it accepts calls (port 0
// picks a free port).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "health/health_service.h"
#include "kvstore.pb.h"
#include "kvstore.rdmarpc.pb.h"
#include "rdmarpc/rdmarpc.h"

DEFINE_string(listen, "127.0.0.1:7100", "Address to listen on, HOST:PORT (port 0 picks a free one)");
DEFINE_int32(workers, 2, "Server worker threads, each owning one completion queue");

namespace {

namespace kv = rdmarpc::examples;

// Largest value accepted, in bytes.
constexpr size_t kMaxValueBytes = 64 << 20;
// Messages carry the key and protobuf framing besides the value.
constexpr size_t kMaxMessageBytes = kMaxValueBytes + (1 << 20);

class KvStoreImpl final : public kv::KvStore::Service {
 public:
  absl::Status Put(rdmarpc::ServerContext* /*context*/, const kv::PutRequest& request,
                   kv::PutResponse* response) override {
    if (request.key().empty()) return absl::InvalidArgumentError("Put: empty key");
    if (request.value().size() > kMaxValueBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Put: value of key \"", request.key(), "\" is ", request.value().size(),
                       " bytes, more than the limit of ", kMaxValueBytes));
    }
    // Copy outside the lock: a 64 MiB copy must not stall every other call.
    std::string value = request.value();
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = values_.try_emplace(request.key());
    it->second.swap(value);
    response->set_replaced(!inserted);
    return absl::OkStatus();
  }

  absl::Status Get(rdmarpc::ServerContext* /*context*/, const kv::GetRequest& request,
                   kv::GetResponse* response) override {
    // Copying under the lock keeps the handler simple; a store serving many
    // large concurrent reads would hold values in shared_ptrs instead.
    absl::MutexLock lock(&mu_);
    auto it = values_.find(request.key());
    if (it == values_.end()) return NotFound(request.key());
    response->set_value(it->second);
    return absl::OkStatus();
  }

  absl::Status Delete(rdmarpc::ServerContext* /*context*/, const kv::DeleteRequest& request,
                      kv::DeleteResponse* /*response*/) override {
    std::string doomed;  // freed after the lock is released
    absl::MutexLock lock(&mu_);
    auto it = values_.find(request.key());
    if (it == values_.end()) return NotFound(request.key());
    doomed.swap(it->second);
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
  static absl::Status NotFound(const std::string& key) {
    return absl::NotFoundError(absl::StrCat("key \"", key, "\" not found"));
  }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

absl::string_view HostOf(absl::string_view address) {
  size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("kvstore_server --listen=HOST:PORT [--workers=N]");
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
  rdmarpc::HealthService health;
  rdmarpc::ServerOptions options;
  options.num_workers = FLAGS_workers;
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
