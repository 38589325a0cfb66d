// server_stream.cc: see server_stream.h.
#include "runtime/rpc/server_stream.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/attachment_access.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/stream_limits.h"

namespace rdmarpc {
namespace internal {

bool ServerStreamState::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  std::string payload;
  Buffer received;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || client_done_ || !inbox_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (cancelled_ || inbox_.empty() || !failure_.ok()) return false;
    payload = std::move(inbox_.front().payload);
    received = std::move(inbox_.front().attachment);
    inbox_.pop_front();
  }
  if (!message->ParseFromString(payload)) {
    absl::MutexLock lock(&mu_);
    failure_ = absl::InternalError(absl::StrCat("stream message of ", payload.size(),
                                                " bytes did not parse as ",
                                                message->GetTypeName()));
    return false;
  }
  if (interceptors_ != nullptr) interceptors_->ServerRecvMessage(message, payload.size());
  if (attachment != nullptr && received) {
    absl::MutexLock lock(&mu_);
    WatchHandedOut(received);
  }
  if (attachment != nullptr) *attachment = std::move(received);
  if (++consumed_ >= kStreamWindow / 2) {
    const uint32_t n = consumed_;
    consumed_ = 0;
    loop_->Post([conn = conn_, token = token_, n] {
      if (*conn != nullptr) (*conn)->GrantWindow(token, n);
    });
  }
  return true;
}

bool ServerStreamState::SendHeadersOnce() {
  if (headers_sent_.exchange(true, std::memory_order_acq_rel)) return true;
  if (interceptors_ != nullptr) {
    interceptors_->ServerSendInitialMetadata(ServerContextAccess::MutableInitialMetadata(context_));
  }
  const Metadata& initial = ServerContextAccess::InitialMetadata(context_);
  if (initial.empty()) return true;
  absl::Status md = ValidateMetadata(initial, ~size_t{0}, "server initial metadata");
  std::string encoded = EncodeMetadata(initial);
  if (md.ok() && encoded.size() > max_header_bytes_) {
    md = absl::ResourceExhaustedError(absl::StrCat(
        "server initial metadata of ", encoded.size(), " encoded bytes exceeds max_message_bytes ",
        max_header_bytes_));
  }
  if (!md.ok()) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(md);
    return false;
  }
  loop_->Post([conn = conn_, token = token_, meta = std::move(encoded)]() mutable {
    if (*conn != nullptr) (*conn)->SendStreamHeaders(token, std::move(meta));
  });
  return true;
}

bool ServerStreamState::Write(const google::protobuf::MessageLite& message,
                              Attachment attachment) {
  const size_t size = message.ByteSizeLong();
  if (absl::Status fits = CheckStreamMessageSize(size, attachment.length, max_message_bytes_);
      !fits.ok()) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(fits);
    return false;
  }
  if (!SendHeadersOnce()) return false;
  if (interceptors_ != nullptr) interceptors_->ServerSendMessage(message, size);
  std::string payload;
  message.SerializeToString(&payload);
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || send_window_ > 0;
    };
    mu_.Await(absl::Condition(&ready));
    if (cancelled_ || !failure_.ok()) return false;
    --send_window_;
  }
  // The state lives until the call's answer, which the handler's thread
  // posts after this.
  loop_->Post([this, payload = std::move(payload), attachment = std::move(attachment)]() mutable {
    SendOnWorker(std::move(payload), std::move(attachment));
  });
  return true;
}

bool ServerStreamState::SendOnWorker(std::string payload, Attachment attachment) {
  if (*conn_ == nullptr) return false;
  if (attachment) {
    absl::MutexLock lock(&mu_);
    UnwatchWritten(attachment);
  }
  (*conn_)->SendStreamMessage(token_, std::move(payload), std::move(attachment));
  return true;
}

void ServerStreamState::OnMessage(absl::string_view payload, bool has_message, bool end_stream,
                                  Attachment attachment) {
  google::protobuf::MessageLite* read = nullptr;
  bool overflow = false;
  {
    absl::MutexLock lock(&mu_);
    if (client_done_ || cancelled_) return;  // nothing may follow the half-close
    if (end_stream) client_done_ = true;
    if (pending_read_ != nullptr && (has_message || end_stream)) {
      read = std::exchange(pending_read_, nullptr);  // a reactor waits for it
      if (pending_read_attachment_ != nullptr) {
        Buffer& out = *std::exchange(pending_read_attachment_, nullptr);
        out = AttachmentAccess::FromTransport(std::move(attachment));
        if (out) WatchHandedOut(out);
      }
    } else if (has_message && inbox_.size() >= kStreamWindow) {
      // The client sent beyond the window we granted: a broken or hostile
      // peer. The call fails; the connection's other calls go on.
      failure_ = absl::ResourceExhaustedError(absl::StrCat(
          "the client sent more than the ", kStreamWindow, " stream messages it was granted"));
      overflow = true;
    } else if (has_message) {
      inbox_.push_back(InboxMessage{std::string(payload),
                                    AttachmentAccess::FromTransport(std::move(attachment))});
    }
  }
  if (read != nullptr) CompleteRead(read, has_message, payload);
  if (overflow) Cancel();
}

void ServerStreamState::OnWindow(uint32_t messages) {
  bool write_pending;
  {
    absl::MutexLock lock(&mu_);
    // A well-behaved client grants back only what it consumed; never let a
    // hostile one open the window past kStreamWindow (or wrap it).
    send_window_ = std::min<uint64_t>(uint64_t{send_window_} + messages, kStreamWindow);
    write_pending = write_pending_;
  }
  // A reactor's write waits: sent here, in the upcall (the connection only
  // queues it), so that nothing outlives a cancel that follows.
  if (write_pending) SendPendingWrite();
}

void ServerStreamState::Cancel() {
  google::protobuf::MessageLite* read = nullptr;
  bool write = false;
  bool react = false;
  absl::AnyInvocable<void() &&> finish;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    read = std::exchange(pending_read_, nullptr);
    pending_read_attachment_ = nullptr;
    write = std::exchange(write_pending_, false);
    react = pending_write_react_;
    pending_write_.clear();
    pending_write_attachment_ = Attachment();
    finish = std::move(finish_);
    finish_ = nullptr;
  }
  // The finish goes after this upcall (it answers the call, which callers
  // iterating the worker's calls must not see inline).
  if (finish) loop_->Post([finish = std::move(finish)]() mutable { std::move(finish)(); });
  if (read != nullptr) reactions_->OnReadDone(false);
  if (write && react) reactions_->OnWriteDone(false);
}

// ---- callback side --------------------------------------------------------------

void ServerStreamState::StartSendHeaders() {
  const bool ok = SendHeadersOnce();
  loop_->Post([this, ok] {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      cancelled = cancelled_;
    }
    reactions_->OnHeadersSent(ok && !cancelled);
  });
}

void ServerStreamState::StartRead(google::protobuf::MessageLite* message,
                                  Buffer* attachment) {
  std::string payload;
  bool have = false;
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_ && failure_.ok()) {
      if (!inbox_.empty()) {
        payload = std::move(inbox_.front().payload);
        if (attachment != nullptr) {
          *attachment = std::move(inbox_.front().attachment);
          if (*attachment) WatchHandedOut(*attachment);
        }
        inbox_.pop_front();
        have = true;
      } else if (!client_done_) {
        pending_read_ = message;
        pending_read_attachment_ = attachment;
        return;
      }
    }
  }
  loop_->Post([this, message, have, payload = std::move(payload)] {
    CompleteRead(message, have, payload);
  });
}

void ServerStreamState::CompleteRead(google::protobuf::MessageLite* message, bool have,
                                     absl::string_view payload) {
  bool ok = have;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) ok = false;
  }
  if (ok && !message->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    ok = false;
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      failure_ = absl::InternalError(absl::StrCat("stream message of ", payload.size(),
                                                  " bytes did not parse as ",
                                                  message->GetTypeName()));
    }
  }
  if (ok) {
    if (interceptors_ != nullptr) interceptors_->ServerRecvMessage(message, payload.size());
    CountRead();
  }
  reactions_->OnReadDone(ok);
}

void ServerStreamState::CountRead() {
  if (++consumed_ < kStreamWindow / 2) return;
  const uint32_t n = consumed_;
  consumed_ = 0;
  if (*conn_ != nullptr) (*conn_)->GrantWindow(token_, n);
}

void ServerStreamState::StartWrite(const google::protobuf::MessageLite& message, bool react,
                                   Attachment attachment) {
  const size_t size = message.ByteSizeLong();
  bool ok = true;
  if (absl::Status fits = CheckStreamMessageSize(size, attachment.length, max_message_bytes_);
      !fits.ok()) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(fits);
    ok = false;
  }
  std::string payload;
  if (ok) ok = SendHeadersOnce();
  if (ok) {
    if (interceptors_ != nullptr) interceptors_->ServerSendMessage(message, size);
    message.SerializeToString(&payload);
  }
  absl::MutexLock lock(&mu_);
  if (!ok || cancelled_ || !failure_.ok()) {
    if (react) loop_->Post([this] { reactions_->OnWriteDone(false); });
    return;
  }
  if (send_window_ == 0) {
    write_pending_ = true;
    pending_write_ = std::move(payload);
    pending_write_attachment_ = std::move(attachment);
    pending_write_react_ = react;
    return;
  }
  --send_window_;
  // Posted under the lock: a Finish on another thread cannot overtake it.
  loop_->Post([this, payload = std::move(payload), attachment = std::move(attachment),
               react]() mutable {
    bool sent = false;
    {
      absl::MutexLock lock(&mu_);
      sent = !cancelled_;
    }
    sent = sent && SendOnWorker(std::move(payload), std::move(attachment));
    if (react) reactions_->OnWriteDone(sent);
  });
}

void ServerStreamState::SendPendingWrite() {
  std::string payload;
  Attachment attachment;
  bool react = false;
  absl::AnyInvocable<void() &&> finish;
  {
    absl::MutexLock lock(&mu_);
    if (!write_pending_ || send_window_ == 0) return;
    --send_window_;
    write_pending_ = false;
    payload = std::move(pending_write_);
    pending_write_.clear();
    attachment = std::move(pending_write_attachment_);
    pending_write_attachment_ = Attachment();
    react = pending_write_react_;
    finish = std::move(finish_);
    finish_ = nullptr;
  }
  const bool sent = SendOnWorker(std::move(payload), std::move(attachment));
  if (finish) loop_->Post([finish = std::move(finish)]() mutable { std::move(finish)(); });
  if (react) reactions_->OnWriteDone(sent);
}

void ServerStreamState::FinishAfterWrites(absl::AnyInvocable<void() &&> finish) {
  absl::MutexLock lock(&mu_);
  if (write_pending_) {
    finish_ = std::move(finish);
    return;
  }
  loop_->Post([finish = std::move(finish)]() mutable { std::move(finish)(); });
}

void ServerStreamState::WatchHandedOut(const Buffer& attachment) {
  if (handed_out_.size() >= prune_at_) {
    handed_out_.erase(std::remove_if(handed_out_.begin(), handed_out_.end(),
                                     [](const std::weak_ptr<ExternalRegion>& w) {
                                       return w.expired();
                                     }),
                      handed_out_.end());
    prune_at_ = std::max<size_t>(16, 2 * handed_out_.size());
  }
  handed_out_.push_back(AttachmentAccess::Watch(attachment));
}

void ServerStreamState::UnwatchWritten(const Attachment& attachment) {
  if (!attachment) return;
  // Usually the last one read (an echo), so searched from the back.
  for (auto it = handed_out_.rbegin(); it != handed_out_.rend(); ++it) {
    if (AttachmentAccess::Watches(*it, attachment)) {
      handed_out_.erase(std::next(it).base());
      return;
    }
  }
}

void ServerStreamState::ExemptKeptAttachments() {
  std::vector<std::weak_ptr<ExternalRegion>> handed_out;
  {
    absl::MutexLock lock(&mu_);
    handed_out.swap(handed_out_);
  }
  for (const std::weak_ptr<ExternalRegion>& w : handed_out) AttachmentAccess::ExemptIfStillHeld(w);
}

// ---- internal::ServerStream ----------------------------------------------------

bool ServerStream::Read(google::protobuf::MessageLite* message) { return state_->Read(message); }
bool ServerStream::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  if (attachment != nullptr) *attachment = Buffer();  // also when the read fails
  return state_->Read(message, attachment);
}
bool ServerStream::Write(const google::protobuf::MessageLite& message) {
  return state_->Write(message);
}
bool ServerStream::Write(const google::protobuf::MessageLite& message, const Buffer& attachment) {
  return state_->Write(message, AttachmentAccess::ToTransport(attachment));
}

}  // namespace internal
}  // namespace rdmarpc
