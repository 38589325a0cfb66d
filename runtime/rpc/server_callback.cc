// server_callback.cc: see server_callback.h; also the operations of
// rdmarpc/impl/callback_call.h's ServerReactorBase.
#include "runtime/rpc/server_callback.h"

#include <utility>

#include "runtime/rpc/attachment_access.h"
#include "runtime/rpc/context_access.h"

namespace rdmarpc {
namespace internal {

// ---- ServerReactorBase ----------------------------------------------------------

void ServerReactorBase::StartSendInitialMetadataOp() {
  ServerCallbackCall* call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
    if (call == nullptr) {
      backlog_.send_initial_metadata = true;
      return;
    }
  }
  call->StartSendInitialMetadata();
}

void ServerReactorBase::StartReadOp(google::protobuf::MessageLite* message, Buffer* attachment) {
  if (attachment != nullptr) *attachment = Buffer();  // also when the read fails
  ServerCallbackCall* call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
    if (call == nullptr) {
      backlog_.read = message;
      backlog_.read_attachment = attachment;
      return;
    }
  }
  call->StartRead(message, attachment);
}

void ServerReactorBase::StartWriteOp(const google::protobuf::MessageLite& message,
                                     const Buffer& attachment) {
  ServerCallbackCall* call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
    if (call == nullptr) {
      backlog_.write = &message;
      backlog_.write_attachment = attachment;
      return;
    }
  }
  call->StartWrite(message, attachment);
}

void ServerReactorBase::StartWriteAndFinishOp(const google::protobuf::MessageLite& message,
                                              absl::Status status, const Buffer& attachment) {
  ServerCallbackCall* call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
    if (call == nullptr) {
      backlog_.write = &message;
      backlog_.write_attachment = attachment;
      backlog_.write_and_finish = true;
      backlog_.finish = true;
      backlog_.finish_status = std::move(status);
      return;
    }
  }
  call->StartWriteAndFinish(message, std::move(status), attachment);
}

void ServerReactorBase::FinishOp(absl::Status status) {
  ServerCallbackCall* call;
  {
    absl::MutexLock lock(&mu_);
    call = call_;
    if (call == nullptr) {
      backlog_.finish = true;
      backlog_.finish_status = std::move(status);
      return;
    }
  }
  call->Finish(std::move(status));
}

void ServerReactorBase::Bind(ServerCallbackCall* call) {
  Backlog backlog;
  {
    absl::MutexLock lock(&mu_);
    call_ = call;
    backlog = std::move(backlog_);
  }
  // In the order a reactor may have started them.
  if (backlog.send_initial_metadata) call->StartSendInitialMetadata();
  if (backlog.read != nullptr) call->StartRead(backlog.read, backlog.read_attachment);
  if (backlog.write != nullptr && backlog.write_and_finish) {
    call->StartWriteAndFinish(*backlog.write, std::move(backlog.finish_status),
                              backlog.write_attachment);
    return;
  }
  if (backlog.write != nullptr) call->StartWrite(*backlog.write, backlog.write_attachment);
  if (backlog.finish) call->Finish(std::move(backlog.finish_status));
}

// ---- ServerCallbackCall ---------------------------------------------------------

void ServerCallbackCall::Bind(ServerReactorBase* reactor) {
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    reactor_ = reactor;
    cancelled = cancelled_;
  }
  if (cancelled) {
    // Cancelled while the method ran: OnCancel now that there is a reactor.
    gate_.Add();
    loop_->Post([this] {
      ServerReactorAccess::ReactCancel(reactor_);
      ReleaseGate();
    });
  }
  ServerReactorAccess::Bind(reactor, this);
}

void ServerCallbackCall::StartSendInitialMetadata() {
  gate_.Add();
  if (stream_ != nullptr) {
    stream_->StartSendHeaders();
    return;
  }
  // A unary answer carries its initial metadata: nothing to send now.
  loop_->Post([this] { OnHeadersSent(!cancelled()); });
}

void ServerCallbackCall::StartRead(google::protobuf::MessageLite* message, Buffer* attachment) {
  gate_.Add();
  stream_->StartRead(message, attachment);
}

void ServerCallbackCall::StartWrite(const google::protobuf::MessageLite& message,
                                    const Buffer& attachment) {
  gate_.Add();
  stream_->StartWrite(message, /*react=*/true, AttachmentAccess::ToTransport(attachment));
}

void ServerCallbackCall::StartWriteAndFinish(const google::protobuf::MessageLite& message,
                                             absl::Status status, const Buffer& attachment) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
  }
  stream_->StartWrite(message, /*react=*/false, AttachmentAccess::ToTransport(attachment));
  Finish(std::move(status));
}

void ServerCallbackCall::Finish(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;  // once, as gRPC's
    finished_ = true;
  }
  if (stream_ == nullptr) {
    if (interceptors_ != nullptr) {
      interceptors_->ServerSendInitialMetadata(
          ServerContextAccess::MutableInitialMetadata(context_));
      if (status.ok()) interceptors_->ServerSendMessage(*response_, response_->ByteSizeLong());
      interceptors_->ServerSendStatus(&status,
                                      ServerContextAccess::MutableTrailingMetadata(context_));
    }
    if (status.ok() && prepare_ok_response_ != nullptr) prepare_ok_response_();
    loop_->Post([this, status = std::move(status)]() mutable {
      AnswerOnWorker(std::move(status));
    });
    return;
  }
  // A client-streaming call's response goes before its trailers.
  if (kind_ == RpcKind::kClientStreaming && status.ok()) {
    stream_->StartWrite(
        *response_, /*react=*/false,
        AttachmentAccess::ToTransport(stream_->context()->response_attachment()));
  }
  if (interceptors_ != nullptr) {
    if (!stream_->headers_sent()) {
      interceptors_->ServerSendInitialMetadata(
          ServerContextAccess::MutableInitialMetadata(context_));
    }
    interceptors_->ServerSendStatus(&status,
                                    ServerContextAccess::MutableTrailingMetadata(context_));
  }
  stream_->FinishAfterWrites([this, status = std::move(status)]() mutable {
    AnswerOnWorker(std::move(status));
  });
}

void ServerCallbackCall::AnswerOnWorker(absl::Status status) {
  std::move(answer_)(std::move(status));
  // Reads still pending never complete now: they react false.
  if (stream_ != nullptr) stream_->Cancel();
  ReleaseGate();  // the finish
}

void ServerCallbackCall::OnCancelled() {
  ServerReactorBase* reactor;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    reactor = reactor_;
  }
  gate_.Add();  // nothing ends the call inside this function
  if (stream_ != nullptr) stream_->Cancel();
  if (reactor != nullptr) ServerReactorAccess::ReactCancel(reactor);
  ReleaseGate();
}

void ServerCallbackCall::OnHeadersSent(bool ok) {
  ServerReactorAccess::ReactSendInitialMetadata(reactor_, ok);
  ReleaseGate();
}

void ServerCallbackCall::OnReadDone(bool ok) {
  ServerReactorAccess::ReactRead(reactor_, ok);
  ReleaseGate();
}

void ServerCallbackCall::OnWriteDone(bool ok) {
  ServerReactorAccess::ReactWrite(reactor_, ok);
  ReleaseGate();
}

void ServerCallbackCall::ReleaseGate() {
  if (!gate_.Release()) return;
  if (reactor_ != nullptr) ServerReactorAccess::ReactDone(reactor_);
  // Frees this call: the function is moved out first.
  absl::AnyInvocable<void()> release = std::move(release_);
  std::move(release)();
}

}  // namespace internal
}  // namespace rdmarpc
