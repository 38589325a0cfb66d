// rdmarpc/access_log.h: access-log interceptors, one record per finished
// call: method, peer, status, duration and message sizes.
//
// Turn it on by registering the factory (interceptor.h), on a server, a
// channel, or both:
//
//   rdmarpc::ServerOptions options;
//   options.interceptor_creators.push_back(
//       std::make_shared<rdmarpc::experimental::ServerAccessLogFactory>());
//
// By default each record is one glog INFO line,
//   access server /pkg.Service/Method peer=10.0.0.8:51234 status=OK
//       duration_us=57 recv_msgs=1 recv_bytes=12 sent_msgs=1 sent_bytes=40
// ("access client ..." from a channel; the error message follows the code
// for a failed call: status=NOT_FOUND:"no such key"). Give the factory an
// AccessLogSink to write records elsewhere (a file, a structured logger).
//
// Sizes are serialised message bytes as interceptors see them
// (InterceptorBatchMethods::Get*MessageSize), without framing or metadata.
// Cost: one interceptor per call (bench/HISTORY.md, "Measured: interceptors").
#ifndef RDMARPC_ACCESS_LOG_H_
#define RDMARPC_ACCESS_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rdmarpc/export.h"
#include "rdmarpc/interceptor.h"

namespace rdmarpc {
namespace experimental {

// One finished call.
struct AccessLogRecord {
  bool server = false;       // true: recorded by a server; false: by a channel
  std::string method;        // "/package.Service/Method"
  RpcType type = RpcType::UNARY;
  // The other side, "ip:port"; empty (written "-" in the line) when no
  // server was reached.
  std::string peer;
  // Server: the status the handler (or an interceptor) produced, even when
  // the client was gone by then (it may have seen DEADLINE_EXCEEDED or
  // CANCELLED). Client: the status the caller got.
  absl::Status status;
  absl::Time start;          // when the call started (server: its handler was about to run)
  absl::Duration duration;   // start to final status
  uint64_t recv_messages = 0;  // messages received (server: requests; client: responses)
  uint64_t recv_bytes = 0;
  // Messages handed to the call for sending (server: responses; client:
  // requests), whether or not the peer received them.
  uint64_t sent_messages = 0;
  uint64_t sent_bytes = 0;
};

// The one-line form of a record written by the default sink (above).
RDMARPC_EXPORT std::string FormatAccessLogRecord(const AccessLogRecord& r);

// Receives each record, on the thread of the call's last hook (a handler
// thread, a worker, or the thread polling a channel): it must be thread-safe
// and must not block.
using AccessLogSink = std::function<void(const AccessLogRecord&)>;

// Logs every call of a server. Thread-safe; shared by all its calls.
class RDMARPC_EXPORT ServerAccessLogFactory final : public ServerInterceptorFactoryInterface {
 public:
  // Empty `sink`: glog INFO lines (FormatAccessLogRecord).
  explicit ServerAccessLogFactory(AccessLogSink sink = nullptr);
  Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override;

 private:
  AccessLogSink sink_;
};

// Logs every call of a channel. Thread-safe; shared by all its calls.
class RDMARPC_EXPORT ClientAccessLogFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit ClientAccessLogFactory(AccessLogSink sink = nullptr);
  Interceptor* CreateClientInterceptor(ClientRpcInfo* info) override;

 private:
  AccessLogSink sink_;
};

}  // namespace experimental
}  // namespace rdmarpc

#endif  // RDMARPC_ACCESS_LOG_H_
