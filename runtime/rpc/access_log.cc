// access_log.cc: see rdmarpc/access_log.h.
#include "rdmarpc/access_log.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace rdmarpc {
namespace experimental {
namespace {

void DefaultSink(const AccessLogRecord& r) { LOG(INFO) << FormatAccessLogRecord(r); }

// Counts what passes and writes the record at the call's final hook.
class AccessLogInterceptor final : public Interceptor {
 public:
  AccessLogInterceptor(const AccessLogSink* sink, bool server, const ClientRpcInfo* client,
                       const ServerRpcInfo* server_info)
      : sink_(sink), client_(client), server_info_(server_info) {
    record_.server = server;
  }

  void Intercept(InterceptorBatchMethods* m) override {
    switch (m->hook_point()) {
      case InterceptionHookPoints::PRE_SEND_MESSAGE:
        record_.sent_messages++;
        record_.sent_bytes += m->GetSendMessageSize();
        break;
      case InterceptionHookPoints::POST_RECV_MESSAGE:
        record_.recv_messages++;
        record_.recv_bytes += m->GetRecvMessageSize();
        break;
      case InterceptionHookPoints::PRE_SEND_STATUS:  // server: the last hook
        record_.method = server_info_->method();
        record_.type = server_info_->type();
        record_.peer = server_info_->peer();
        record_.status = *m->GetSendStatus();
        record_.start = server_info_->start_time();
        record_.duration = server_info_->end_time() - server_info_->start_time();
        Write();
        break;
      case InterceptionHookPoints::POST_RECV_STATUS:  // client: the last hook
        record_.method = client_->method();
        record_.type = client_->type();
        record_.peer = client_->peer();
        record_.status = *m->GetRecvStatus();
        record_.start = client_->start_time();
        record_.duration = client_->end_time() - client_->start_time();
        Write();
        break;
      default:
        break;
    }
  }

 private:
  void Write() {
    if (*sink_) {
      (*sink_)(record_);
    } else {
      DefaultSink(record_);
    }
  }

  const AccessLogSink* const sink_;
  const ClientRpcInfo* const client_;
  const ServerRpcInfo* const server_info_;
  AccessLogRecord record_;
};

}  // namespace

std::string FormatAccessLogRecord(const AccessLogRecord& r) {
  std::string status = absl::StatusCodeToString(r.status.code());
  if (!r.status.ok()) absl::StrAppend(&status, ":\"", absl::CHexEscape(r.status.message()), "\"");
  return absl::StrFormat(
      "access %s %s peer=%s status=%s duration_us=%d recv_msgs=%d recv_bytes=%d sent_msgs=%d "
      "sent_bytes=%d",
      r.server ? "server" : "client", r.method, r.peer.empty() ? "-" : r.peer, status,
      absl::ToInt64Microseconds(r.duration), r.recv_messages, r.recv_bytes, r.sent_messages,
      r.sent_bytes);
}

ServerAccessLogFactory::ServerAccessLogFactory(AccessLogSink sink) : sink_(std::move(sink)) {}

Interceptor* ServerAccessLogFactory::CreateServerInterceptor(ServerRpcInfo* info) {
  return new AccessLogInterceptor(&sink_, /*server=*/true, nullptr, info);
}

ClientAccessLogFactory::ClientAccessLogFactory(AccessLogSink sink) : sink_(std::move(sink)) {}

Interceptor* ClientAccessLogFactory::CreateClientInterceptor(ClientRpcInfo* info) {
  return new AccessLogInterceptor(&sink_, /*server=*/false, info, nullptr);
}

}  // namespace experimental
}  // namespace rdmarpc
