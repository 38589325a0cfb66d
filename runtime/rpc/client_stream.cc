// client_stream.cc: see client_stream.h.
#include "runtime/rpc/client_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/status_payloads.h"

namespace rdmarpc {
namespace internal {

ClientStreamState::ClientStreamState(ChannelImpl* channel, absl::string_view method,
                                     ClientContext* context, RpcKind kind)
    : channel_(channel), method_(method), context_(context), kind_(kind) {}

void ClientStreamState::Start(const google::protobuf::MessageLite* first) {
  std::string payload;
  absl::Status refused;
  if (channel_->OnLoopThread()) {
    refused = absl::FailedPreconditionError(absl::StrCat(
        "stream ", method_, " opened from a completion callback of the same channel would "
        "deadlock (its blocking reads and writes need that thread)"));
  } else if (method_.size() > 1024) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("method name of ", method_.size(), " bytes is longer than 1024"));
  } else if (absl::Status md = ValidateMetadata(ClientContextAccess::Metadata(context_),
                                                channel_->options().max_metadata_bytes,
                                                "client metadata");
             !md.ok()) {
    refused = std::move(md);
  } else if (first != nullptr) {
    const size_t size = first->ByteSizeLong();
    if (size > channel_->options().max_message_bytes) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("request of ", size, " bytes exceeds max_message_bytes ",
                       channel_->options().max_message_bytes));
    } else {
      first->SerializeToString(&payload);
    }
  }
  if (first != nullptr || kind_ == RpcKind::kServerStreaming) {
    absl::MutexLock lock(&mu_);
    writes_done_ = true;  // the request half-closes the client's side
  }
  if (!refused.ok()) {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = std::move(refused);
    return;
  }
  meta_ = EncodeMetadata(ClientContextAccess::Metadata(context_));
  const ChannelImpl::Route route = channel_->PickRoute();
  loop_ = route.loop;
  peer_ = route.peer;
  loop_ref_ = shared_from_this();
  loop_->Post([this, route, payload = std::move(payload), has_first = first != nullptr]() mutable {
    StartOnLoop(route, std::move(payload), has_first);
  });
}

void ClientStreamState::StartOnLoop(ChannelImpl::Route route, std::string first,
                                      bool has_first) {
  const absl::Time deadline = context_->deadline();
  if (absl::Now() >= deadline) {
    End(absl::DeadlineExceededError(
        absl::StrCat("deadline passed before ", method_, " was sent to ", *peer_)));
    return;
  }
  if (!ClientContextAccess::Bind(context_, this)) {
    ClientContextAccess::FinishCancel(context_);
    End(absl::CancelledError(
        absl::StrCat(method_, " was cancelled (ClientContext::TryCancel) before it was sent")));
    return;
  }
  bound_ = true;
  absl::StatusOr<Connection*> conn = route.pool->Get(route.slot);
  if (!conn.ok()) {
    End(absl::UnavailableError(conn.status().message()));
    return;
  }
  conn_ = *conn;
  if (deadline != absl::InfiniteFuture()) {
    timer_ = loop_->AddTimer(deadline, [this] {
      timer_ = 0;
      if (handle_ != 0) conn_->CancelCall(handle_);
      End(absl::DeadlineExceededError(
          absl::StrCat(method_, " to ", *peer_, " exceeded its deadline")));
    });
  }
  OutgoingRequest req;
  req.method = method_;
  req.payload = std::move(first);
  req.meta = std::move(meta_);
  req.stream = true;
  req.no_message = !has_first;
  req.end_stream = has_first;
  req.deadline = deadline;
  // May end the stream (OnFailure) before returning.
  conn_->StartCall(std::move(req), this);
}

void ClientStreamState::OnSent() { ClientContextAccess::SetPeer(context_, *peer_); }

void ClientStreamState::OnStreamHeaders(absl::string_view meta) {
  absl::Status s = TakeServerMetadata(meta, *peer_, channel_->options().max_metadata_bytes,
                                      ClientContextAccess::ServerInitialMetadata(context_),
                                      /*trailing=*/nullptr);
  if (!s.ok()) meta_error_ = std::move(s);
}

void ClientStreamState::OnResponseMetadata(absl::string_view meta) {
  absl::Status s = TakeServerMetadata(meta, *peer_, channel_->options().max_metadata_bytes,
                                      ClientContextAccess::ServerInitialMetadata(context_),
                                      ClientContextAccess::ServerTrailingMetadata(context_));
  if (!s.ok()) meta_error_ = std::move(s);
}

void ClientStreamState::OnStreamMessage(absl::string_view payload) {
  {
    absl::MutexLock lock(&mu_);
    if (inbox_.size() < kStreamWindow) {
      inbox_.emplace_back(payload);
      return;
    }
  }
  // The server sent beyond the window we granted: a broken or hostile peer.
  // Only this call fails.
  if (handle_ != 0 && conn_ != nullptr) conn_->CancelCall(handle_);
  handle_ = 0;
  End(absl::ResourceExhaustedError(absl::StrCat(
      *peer_, " sent more than the ", kStreamWindow, " stream messages it was granted")));
}

void ClientStreamState::OnWindow(uint32_t messages) {
  absl::MutexLock lock(&mu_);
  // A well-behaved server grants back only what it consumed; never let a
  // hostile one open the window past kStreamWindow (or wrap it).
  send_window_ = std::min<uint64_t>(uint64_t{send_window_} + messages, kStreamWindow);
}

void ClientStreamState::OnResponse(absl::StatusCode code, absl::string_view message,
                                   absl::string_view payload) {
  absl::Status status(code, message);
  if (code != absl::StatusCode::kOk && !payload.empty() &&
      !DecodeStatusPayloads(payload, &status)) {
    status = absl::InternalError(absl::StrCat("status details of ", payload.size(), " bytes from ",
                                              *peer_, " did not decode; the status was ",
                                              absl::StatusCodeToString(code), ": ", message));
  }
  handle_ = 0;  // the connection forgot the call
  if (!meta_error_.ok()) status = std::move(meta_error_);
  End(std::move(status));
}

void ClientStreamState::OnFailure(absl::Status status) {
  handle_ = 0;
  End(std::move(status));
}

void ClientStreamState::End(absl::Status status) {
  if (ended_) return;
  if (timer_ != 0) loop_->CancelTimer(timer_);
  timer_ = 0;
  if (bound_ && !ClientContextAccess::Unbind(context_)) {
    // TryCancel won: its task (already posted) ends the stream CANCELLED.
    end_deferred_ = true;
    ended_ = true;
    return;
  }
  ended_ = true;
  Deliver(std::move(status));
}

void ClientStreamState::RequestCancel() {
  loop_->Post([self = shared_from_this()] { self->OnCancelRequested(); });
}

void ClientStreamState::OnCancelRequested() {
  if (timer_ != 0) loop_->CancelTimer(timer_);
  timer_ = 0;
  if (!end_deferred_ && handle_ != 0 && conn_ != nullptr) conn_->CancelCall(handle_);
  handle_ = 0;
  ended_ = true;
  ClientContextAccess::FinishCancel(context_);
  Deliver(absl::CancelledError(
      absl::StrCat(method_, " to ", *peer_, " was cancelled (ClientContext::TryCancel)")));
}

void ClientStreamState::Deliver(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = std::move(status);
  }
  // Last: may free this when the user let go already.
  std::shared_ptr<ClientStreamState> ref = std::move(loop_ref_);
}

void ClientStreamState::FailFromUser(absl::Status status) {
  loop_->Post([self = shared_from_this(), status = std::move(status)]() mutable {
    if (self->ended_) return;
    if (self->handle_ != 0 && self->conn_ != nullptr) self->conn_->CancelCall(self->handle_);
    self->handle_ = 0;
    self->End(std::move(status));
  });
}

bool ClientStreamState::Write(const google::protobuf::MessageLite& message) {
  const size_t size = message.ByteSizeLong();
  if (size > channel_->options().max_message_bytes) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return false;
    }
    FailFromUser(absl::ResourceExhaustedError(
        absl::StrCat("stream message of ", size, " bytes exceeds max_message_bytes ",
                     channel_->options().max_message_bytes)));
    return false;
  }
  std::string payload;
  message.SerializeToString(&payload);
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_ || send_window_ > 0;
    };
    mu_.Await(absl::Condition(&ready));
    if (done_ || writes_done_) return false;
    --send_window_;
    // Posted under the lock: a WritesDone on another thread cannot post the
    // half-close ahead of this message.
    loop_->Post([self = shared_from_this(), payload = std::move(payload)]() mutable {
      if (self->ended_ || self->handle_ == 0) return;
      self->conn_->SendStreamMessage(self->handle_, std::move(payload), /*no_message=*/false,
                                     /*end_stream=*/false);
    });
  }
  return true;
}

bool ClientStreamState::WritesDone() {
  absl::MutexLock lock(&mu_);
  if (done_ || writes_done_) return false;
  writes_done_ = true;
  loop_->Post([self = shared_from_this()] {
    if (self->ended_ || self->handle_ == 0) return;
    self->conn_->SendStreamMessage(self->handle_, std::string(), /*no_message=*/true,
                                   /*end_stream=*/true);
  });
  return true;
}

bool ClientStreamState::Read(google::protobuf::MessageLite* message) {
  std::string payload;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_ || !inbox_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (inbox_.empty()) return false;
    payload = std::move(inbox_.front());
    inbox_.pop_front();
  }
  if (!message->ParseFromString(payload)) {
    FailFromUser(absl::InternalError(absl::StrCat("message of ", payload.size(), " bytes from ",
                                                  method_, " did not parse as ",
                                                  message->GetTypeName())));
    return false;
  }
  // Grant the window back in batches of half of it (one kWindow frame per
  // kStreamWindow / 2 messages read).
  if (++consumed_ >= kStreamWindow / 2) {
    const uint32_t n = consumed_;
    consumed_ = 0;
    loop_->Post([self = shared_from_this(), n] {
      if (self->ended_ || self->handle_ == 0) return;
      self->conn_->GrantWindow(self->handle_, n);
    });
  }
  return true;
}

absl::Status ClientStreamState::Finish() {
  WritesDone();
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; };
  mu_.Await(absl::Condition(&done));
  inbox_.clear();
  return status_;
}

void ClientStreamState::CancelAndWait() {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
  }
  context_->TryCancel();
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; };
  mu_.Await(absl::Condition(&done));
}

// ---- internal::ClientStream ----------------------------------------------------

ClientStream::ClientStream(Channel* channel, absl::string_view method, ClientContext* context,
                           RpcKind kind, const google::protobuf::MessageLite* first)
    : state_(std::make_shared<ClientStreamState>(ChannelAccess::Impl(channel), method, context,
                                                 kind)) {
  state_->Start(first);
}

ClientStream::~ClientStream() {
  if (!finished_) state_->CancelAndWait();
}

bool ClientStream::Write(const google::protobuf::MessageLite& message) {
  return state_->Write(message);
}
bool ClientStream::WritesDone() { return state_->WritesDone(); }
bool ClientStream::Read(google::protobuf::MessageLite* message) { return state_->Read(message); }
absl::Status ClientStream::Finish() {
  finished_ = true;
  return state_->Finish();
}

}  // namespace internal
}  // namespace rdmarpc
