// etcd_client.h: the few etcd v3 operations the etcd resolver and server
// registration need, over etcd's JSON gateway (the HTTP endpoints /v3/kv/...,
// /v3/lease/..., /v3/watch that etcd serves on its client port, as etcd's
// api-guide "grpc_gateway" describes: bytes base64, 64-bit integers as JSON
// strings). cpp-httplib speaks HTTP; protobuf's JSON parser reads the answers
// (into google.protobuf.Struct).
//
// Target: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX". Each operation tries the
// endpoints in turn, starting with the last one that answered.
//
// Thread safety: the requests may be made from several threads, but
// WaitForChange from one at a time; Stop may be called from any thread and
// ends a WaitForChange in progress (not another request, which ends within
// its timeout).
#ifndef RDMARPC_RUNTIME_RPC_ETCD_CLIENT_H_
#define RDMARPC_RUNTIME_RPC_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace httplib {
class Client;
}

namespace rdmarpc {
namespace internal {

struct EtcdTarget {
  std::vector<std::string> endpoints;  // "HOST:PORT", "[IPV6]:PORT"
  std::string prefix;                  // without a trailing '/'
};
// INVALID_ARGUMENT naming the bad part.
absl::StatusOr<EtcdTarget> ParseEtcdTarget(absl::string_view target);

// The key a server registers under `prefix` for `address`, and the range
// the resolver reads: PREFIX/ADDRESS, and every key starting with PREFIX/.
std::string RegistrationKey(absl::string_view prefix, absl::string_view address);
std::string RegistrationRange(absl::string_view prefix);

class EtcdClient {
 public:
  // `timeout` bounds each request (connect and each read), except
  // WaitForChange's wait for an event.
  EtcdClient(std::vector<std::string> endpoints, absl::Duration timeout);
  ~EtcdClient();

  struct KeyValue {
    std::string key;
    std::string value;
  };
  struct Range {
    std::vector<KeyValue> kvs;
    int64_t revision = 0;  // the store's revision the answer is from
  };
  // Every key starting with `prefix`. UNAVAILABLE when no endpoint
  // answers (naming each and why), INTERNAL for an answer that does not
  // parse.
  absl::StatusOr<Range> GetPrefix(absl::string_view prefix);
  // A lease of `ttl_seconds`; its id. UNAVAILABLE as GetPrefix; INTERNAL
  // when etcd's answer grants none.
  absl::StatusOr<int64_t> GrantLease(int64_t ttl_seconds);
  // Refreshes the lease. NOT_FOUND when it has expired (or was revoked):
  // grant a new one; UNAVAILABLE as GetPrefix.
  absl::Status KeepAlive(int64_t lease);
  // Revokes the lease and deletes its keys. NOT_FOUND when it is gone
  // already; UNAVAILABLE as GetPrefix.
  absl::Status Revoke(int64_t lease);
  // Puts `key` = `value` attached to `lease` (0: none). NOT_FOUND for an
  // expired lease; UNAVAILABLE as GetPrefix.
  absl::Status Put(absl::string_view key, absl::string_view value, int64_t lease);
  // Returns OK once a key starting with `prefix` changed after `revision`
  // (an etcd watch from revision + 1), CANCELLED after Stop, UNAVAILABLE
  // when the watch could not be made or broke, DEADLINE_EXCEEDED after
  // `max_wait` without a change.
  absl::Status WaitForChange(absl::string_view prefix, int64_t revision, absl::Duration max_wait);
  // Ends a WaitForChange in progress and every later one. Any thread.
  void Stop();

 private:
  // POSTs `body` (JSON) to `path` on each endpoint in turn; the answer's
  // body on HTTP 200.
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body);
  const std::vector<std::string> endpoints_;
  const absl::Duration timeout_;
  std::atomic<size_t> preferred_{0};
  std::atomic<bool> stopped_{false};
  absl::Mutex mu_;
  httplib::Client* watching_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_ETCD_CLIENT_H_
