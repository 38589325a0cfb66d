// client_stream.cc: see client_stream.h.
#include "runtime/rpc/client_stream.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rdmarpc/client_callback.h"
#include "runtime/rpc/attachment_access.h"
#include "runtime/rpc/auth.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/stream_limits.h"
#include "runtime/rpc/status_payloads.h"

namespace rdmarpc {
namespace internal {

ClientStreamState::ClientStreamState(Channel* channel, absl::string_view method,
                                     ClientContext* context, RpcKind kind)
    : channel_handle_(channel),
      channel_(ChannelAccess::Impl(channel)),
      method_(method),
      context_(context),
      kind_(kind) {}

void ClientStreamState::Prepare(const google::protobuf::MessageLite* first) {
  if (channel_->inherited()) {
    // A forked child: no engine, no route; Start ends the stream here.
    refused_ = channel_->InheritedError();
    has_first_ = first != nullptr;
    return;
  }
  absl::Status intercepted;
  if (!channel_->options().interceptor_creators.empty()) {
    interceptors_ = InterceptorChain::ForClient(channel_->options().interceptor_creators,
                                                channel_handle_, method_, kind_, context_);
    if (interceptors_ != nullptr) {
      intercepted =
          interceptors_->ClientSendInitialMetadata(ClientContextAccess::MutableMetadata(context_));
    }
  }
  if (!intercepted.ok()) {
    refused_ = std::move(intercepted);  // nothing is sent
  } else if (reactor_ == nullptr && channel_->OnLoopThread()) {
    refused_ = absl::FailedPreconditionError(absl::StrCat(
        "stream ", method_, " opened from a completion callback of the same channel would "
        "deadlock (its blocking reads and writes need that thread); use a reactor "
        "(rdmarpc/client_callback.h)"));
  } else if (method_.size() > 1024) {
    refused_ = absl::InvalidArgumentError(
        absl::StrCat("method name of ", method_.size(), " bytes is longer than 1024"));
  } else if (absl::Status creds =
                 (channel_->options().call_credentials != nullptr ||
                  context_->credentials() != nullptr)
                     ? ApplyCallCredentials(channel_->options().call_credentials.get(),
                                            channel_->target(), method_, context_)
                     : absl::OkStatus();
             !creds.ok()) {
    refused_ = std::move(creds);
  } else if (absl::Status md = ValidateMetadata(ClientContextAccess::Metadata(context_),
                                                channel_->options().max_metadata_bytes,
                                                "client metadata");
             !md.ok()) {
    refused_ = std::move(md);
  } else if (first != nullptr) {
    const size_t size = first->ByteSizeLong();
    if (size > channel_->options().max_message_bytes) {
      refused_ = absl::ResourceExhaustedError(
          absl::StrCat("request of ", size, " bytes exceeds max_message_bytes ",
                       channel_->options().max_message_bytes));
    } else {
      if (interceptors_ != nullptr) {
        interceptors_->ClientSendMessage(*first, size);
        interceptors_->ClientSendClose();  // the request half-closes
      }
      first->SerializeToString(&first_payload_);
    }
  }
  has_first_ = first != nullptr;
  if (first != nullptr || kind_ == RpcKind::kServerStreaming) {
    absl::MutexLock lock(&mu_);
    writes_done_ = true;  // the request half-closes the client's side
  }
  route_ = channel_->PickRoute();
  loop_ = route_.loop;
  peer_ = route_.peer;
}

void ClientStreamState::Start() {
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);  // a reactor's StartWrite may refuse too
    refused = std::move(refused_);
  }
  if (!refused.ok()) {
    if (loop_ == nullptr) {
      // Refused in a forked child (Prepare): no engine to react on, so the
      // reactor hears its end on this thread.
      loop_ref_ = shared_from_this();
      {
        absl::MutexLock lock(&mu_);
        started_ = true;
      }
      ended_ = true;
      Deliver(std::move(refused));
      return;
    }
    if (reactor_ == nullptr) {
      if (interceptors_ != nullptr) {
        interceptors_->ClientRecvStatus(&refused,
                                        ClientContextAccess::ServerTrailingMetadata(context_));
      }
      absl::MutexLock lock(&mu_);
      done_ = true;
      status_ = std::move(refused);
      return;
    }
    loop_ref_ = shared_from_this();
    absl::MutexLock lock(&mu_);
    started_ = true;
    loop_->Post([self = shared_from_this(), status = std::move(refused)]() mutable {
      self->ended_ = true;
      self->Deliver(std::move(status));
    });
    return;
  }
  meta_ = EncodeMetadata(ClientContextAccess::Metadata(context_));
  loop_ref_ = shared_from_this();
  // Posted under the lock: a reactor's operation on another thread that
  // sees started_ posts its task after this one.
  absl::MutexLock lock(&mu_);
  started_ = true;
  loop_->Post([self = shared_from_this()]() mutable {
    self->StartOnLoop(self->route_, std::move(self->first_payload_), self->has_first_);
    // Writes and a half-close a reactor started before StartCall.
    if (self->reactor_ != nullptr) self->SendPendingWrites();
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
  if (route.pool == nullptr) {
    // The channel's resolver has no address yet: wait for one.
    park_id_ = channel_->Park(
        loop_, deadline,
        [self = shared_from_this(), first = std::move(first), has_first](absl::Status s) mutable {
          self->ResumeOnLoop(std::move(s), std::move(first), has_first);
        });
    return;
  }
  absl::StatusOr<Connection*> conn = route.pool->Get(route.slot);
  if (!conn.ok()) {
    End(absl::UnavailableError(conn.status().message()));
    return;
  }
  conn_ = *conn;
  counted_pool_ = route.pool;
  counted_pool_->CallStarted();
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
  // A server-streaming call's goes beside its request; the transport
  // fails other streams INVALID_ARGUMENT, saying so (their messages carry
  // attachments instead).
  if (context_ != nullptr)
    req.attachment = AttachmentAccess::ToTransport(context_->request_attachment());
  // May end the stream (OnFailure) before returning.
  conn_->StartCall(std::move(req), this);
  std::vector<HeldSend> held = std::move(held_sends_);
  held_sends_.clear();
  for (HeldSend& h : held) {
    if (ended_ || handle_ == 0) break;
    conn_->SendStreamMessage(handle_, std::move(h.payload), h.no_message, h.end_stream,
                             std::move(h.attachment));
  }
}

void ClientStreamState::ResumeOnLoop(absl::Status status, std::string first, bool has_first) {
  park_id_ = 0;
  if (ended_) return;
  if (bound_ && !ClientContextAccess::Unbind(context_)) {
    // TryCancel won: its task (already posted) ends the stream CANCELLED.
    end_deferred_ = true;
    ended_ = true;
    return;
  }
  bound_ = false;
  if (!status.ok()) {
    End(absl::Status(status.code(), absl::StrCat(method_, ": ", status.message())));
    return;
  }
  route_ = channel_->PickRouteOn(loop_);
  peer_ = route_.peer;
  StartOnLoop(route_, std::move(first), has_first);
}

void ClientStreamState::OnSent() { ClientContextAccess::SetPeer(context_, *peer_); }

void ClientStreamState::OnStreamHeaders(absl::string_view meta) {
  absl::Status s = TakeServerMetadata(meta, *peer_, channel_->options().max_metadata_bytes,
                                      ClientContextAccess::ServerInitialMetadata(context_),
                                      /*trailing=*/nullptr);
  if (!s.ok()) meta_error_ = std::move(s);
  heard_from_server_ = true;
  if (interceptors_ != nullptr) {
    interceptors_->ClientRecvInitialMetadata(ClientContextAccess::ServerInitialMetadata(context_));
  }
  MaybeReactInitialMetadata(true);
}

void ClientStreamState::OnResponseMetadata(absl::string_view meta) {
  absl::Status s = TakeServerMetadata(meta, *peer_, channel_->options().max_metadata_bytes,
                                      ClientContextAccess::ServerInitialMetadata(context_),
                                      ClientContextAccess::ServerTrailingMetadata(context_));
  if (!s.ok()) meta_error_ = std::move(s);
}

void ClientStreamState::OnStreamMessage(absl::string_view payload, Attachment attachment) {
  if (reactor_ != nullptr) {
    OnReactorMessage(payload, std::move(attachment));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (inbox_.size() < kStreamWindow) {
      inbox_.push_back(InboxMessage{std::string(payload),
                                    AttachmentAccess::FromTransport(std::move(attachment))});
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
  if (reactor_ != nullptr && write_pending_) {
    loop_->Post([self = shared_from_this()] { self->SendPendingWrites(); });
  }
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
  heard_from_server_ = true;
  if (!meta_error_.ok()) status = std::move(meta_error_);
  End(std::move(status));
}

void ClientStreamState::OnFailure(absl::Status status) {
  handle_ = 0;
  End(std::move(status));
}

void ClientStreamState::End(absl::Status status) {
  if (ended_) return;
  if (park_id_ != 0) channel_->Unpark(loop_, std::exchange(park_id_, 0));
  held_sends_.clear();
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
  if (park_id_ != 0) channel_->Unpark(loop_, std::exchange(park_id_, 0));
  held_sends_.clear();
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
  if (counted_pool_ != nullptr) std::exchange(counted_pool_, nullptr)->CallEnded();
  // Held to the end of this function: the last reference may be the
  // loop's when the user let go already.
  std::shared_ptr<ClientStreamState> ref = std::move(loop_ref_);
  if (reactor_ != nullptr && kind_ == RpcKind::kClientStreaming && status.ok() &&
      !got_response_) {
    status = absl::InternalError(
        absl::StrCat(method_, ": the server finished OK without sending its response"));
  }
  if (interceptors_ != nullptr) {
    if (heard_from_server_) {
      interceptors_->ClientRecvInitialMetadata(
          ClientContextAccess::ServerInitialMetadata(context_));
    }
    interceptors_->ClientRecvStatus(&status,
                                    ClientContextAccess::ServerTrailingMetadata(context_));
  }
  google::protobuf::MessageLite* read = nullptr;
  bool write = false;
  bool writes_done = false;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = std::move(status);
    if (reactor_ != nullptr) {
      read = std::exchange(pending_read_, nullptr);
      pending_read_attachment_ = nullptr;
      write = std::exchange(write_pending_, false);
      pending_write_.clear();
      pending_write_attachment_ = Attachment();
      writes_done = std::exchange(writes_done_pending_, false);
    }
  }
  if (reactor_ == nullptr) return;
  MaybeReactInitialMetadata(heard_from_server_);
  if (read != nullptr) React(Reaction::kRead, false);
  if (write) React(Reaction::kWrite, false);
  if (writes_done) React(Reaction::kWritesDone, false);
  ReleaseGate();  // the call's end
}

void ClientStreamState::FailFromUser(absl::Status status) {
  loop_->Post([self = shared_from_this(), status = std::move(status)]() mutable {
    self->FailOnLoop(std::move(status));
  });
}

void ClientStreamState::FailOnLoop(absl::Status status) {
  if (ended_) return;
  if (handle_ != 0 && conn_ != nullptr) conn_->CancelCall(handle_);
  handle_ = 0;
  End(std::move(status));
}

bool ClientStreamState::Write(const google::protobuf::MessageLite& message,
                              Attachment attachment) {
  const size_t size = message.ByteSizeLong();
  if (absl::Status fits = CheckStreamMessageSize(size, attachment.length,
                                                 channel_->options().max_message_bytes);
      !fits.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return false;
    }
    FailFromUser(std::move(fits));
    return false;
  }
  if (interceptors_ != nullptr) {
    {
      absl::MutexLock lock(&mu_);
      if (done_ || writes_done_) return false;  // nothing to observe
    }
    interceptors_->ClientSendMessage(message, size);
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
    loop_->Post([self = shared_from_this(), payload = std::move(payload),
                 attachment = std::move(attachment)]() mutable {
      self->SendOnLoop(std::move(payload), /*no_message=*/false, /*end_stream=*/false,
                       std::move(attachment));
    });
  }
  return true;
}

bool ClientStreamState::WritesDone() {
  {
    absl::MutexLock lock(&mu_);
    if (done_ || writes_done_) return false;
    writes_done_ = true;
    loop_->Post([self = shared_from_this()] {
      self->SendOnLoop(std::string(), /*no_message=*/true, /*end_stream=*/true);
    });
  }
  // Outside the lock: a hook may take its time.
  if (interceptors_ != nullptr) interceptors_->ClientSendClose();
  return true;
}

bool ClientStreamState::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  std::string payload;
  Buffer received;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_ || !inbox_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (inbox_.empty()) return false;
    payload = std::move(inbox_.front().payload);
    received = std::move(inbox_.front().attachment);
    inbox_.pop_front();
  }
  if (!message->ParseFromString(payload)) {
    FailFromUser(absl::InternalError(absl::StrCat("message of ", payload.size(), " bytes from ",
                                                  method_, " did not parse as ",
                                                  message->GetTypeName())));
    return false;
  }
  if (interceptors_ != nullptr) interceptors_->ClientRecvMessage(message, payload.size());
  if (attachment != nullptr) *attachment = std::move(received);
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

// ---- reactor side -------------------------------------------------------------

void ClientStreamState::SetReactor(ClientReactorBase* reactor,
                                   google::protobuf::MessageLite* response) {
  reactor_ = reactor;
  response_ = response;
}

void ClientStreamState::StartRead(google::protobuf::MessageLite* message,
                                  Buffer* attachment) {
  gate_.Add();
  std::string payload;
  bool have = false;
  {
    absl::MutexLock lock(&mu_);
    if (!inbox_.empty()) {
      payload = std::move(inbox_.front().payload);
      if (attachment != nullptr) *attachment = std::move(inbox_.front().attachment);
      inbox_.pop_front();
      have = true;
    } else if (!done_) {
      pending_read_ = message;
      pending_read_attachment_ = attachment;
      return;
    }
  }
  loop_->Post([self = shared_from_this(), message, payload = std::move(payload), have] {
    self->CompleteRead(message, have, payload);
  });
}

void ClientStreamState::StartWrite(const google::protobuf::MessageLite& message, bool last,
                                   Attachment attachment) {
  gate_.Add();
  const size_t size = message.ByteSizeLong();
  if (absl::Status status = CheckStreamMessageSize(size, attachment.length,
                                                   channel_->options().max_message_bytes);
      !status.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (!started_) {
        // Before StartCall: the call fails when it starts, and this write
        // reacts then.
        if (refused_.ok()) refused_ = std::move(status);
        write_pending_ = true;
        return;
      }
    }
    loop_->Post([self = shared_from_this(), status = std::move(status)]() mutable {
      self->FailOnLoop(std::move(status));
      self->React(Reaction::kWrite, false);
    });
    return;
  }
  if (interceptors_ != nullptr) {
    bool sends;
    {
      absl::MutexLock lock(&mu_);
      sends = !done_ && !writes_done_ && refused_.ok();
    }
    if (sends) {
      interceptors_->ClientSendMessage(message, size);
      if (last) interceptors_->ClientSendClose();
    }
  }
  std::string payload;
  message.SerializeToString(&payload);
  absl::MutexLock lock(&mu_);
  if (done_ || writes_done_) {
    loop_->Post([self = shared_from_this()] { self->React(Reaction::kWrite, false); });
    return;
  }
  if (last) writes_done_ = true;
  if (!started_ || send_window_ == 0) {
    write_pending_ = true;
    pending_write_ = std::move(payload);
    pending_write_attachment_ = std::move(attachment);
    pending_write_last_ = last;
    return;
  }
  --send_window_;
  // Posted under the lock, as Write does.
  loop_->Post([self = shared_from_this(), payload = std::move(payload),
               attachment = std::move(attachment), last]() mutable {
    const bool ok =
        self->SendOnLoop(std::move(payload), /*no_message=*/false, last, std::move(attachment));
    self->React(Reaction::kWrite, ok);
  });
}

void ClientStreamState::StartWritesDone() {
  gate_.Add();
  if (interceptors_ != nullptr) {
    bool closes;
    {
      absl::MutexLock lock(&mu_);
      closes = !done_ && !writes_done_ && refused_.ok();
    }
    if (closes) interceptors_->ClientSendClose();
  }
  absl::MutexLock lock(&mu_);
  if (done_ || writes_done_) {
    loop_->Post([self = shared_from_this()] { self->React(Reaction::kWritesDone, false); });
    return;
  }
  writes_done_ = true;
  if (!started_ || write_pending_) {
    writes_done_pending_ = true;  // after that write
    return;
  }
  loop_->Post([self = shared_from_this()] {
    const bool ok = self->SendOnLoop(std::string(), /*no_message=*/true, /*end_stream=*/true);
    self->React(Reaction::kWritesDone, ok);
  });
}

void ClientStreamState::AddHolds(int holds) { gate_.Add(holds); }

void ClientStreamState::RemoveHold() {
  // OnDone never runs inline in a user's call: it goes to the loop.
  if (gate_.Release()) loop_->Post([self = shared_from_this()] { self->ReactDone(); });
}

void ClientStreamState::OnReactorMessage(absl::string_view payload, Attachment attachment) {
  heard_from_server_ = true;
  MaybeReactInitialMetadata(true);
  if (kind_ == RpcKind::kClientStreaming) {
    if (got_response_) return;  // only the first is the response, as ClientWriter reads it
    if (!response_->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      FailOnLoop(absl::InternalError(absl::StrCat("response of ", payload.size(),
                                                    " bytes from ", method_,
                                                    " did not parse as ",
                                                    response_->GetTypeName())));
      return;
    }
    got_response_ = true;
    // The response's attachment, as a unary call's, in the context.
    ClientContextAccess::SetResponseAttachment(
        context_, AttachmentAccess::FromTransport(std::move(attachment)));
    if (interceptors_ != nullptr) interceptors_->ClientRecvMessage(response_, payload.size());
    return;
  }
  google::protobuf::MessageLite* read = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (pending_read_ != nullptr) {
      read = std::exchange(pending_read_, nullptr);
      if (pending_read_attachment_ != nullptr) {
        *std::exchange(pending_read_attachment_, nullptr) =
            AttachmentAccess::FromTransport(std::move(attachment));
      }
    } else if (inbox_.size() < kStreamWindow) {
      inbox_.push_back(InboxMessage{std::string(payload),
                                    AttachmentAccess::FromTransport(std::move(attachment))});
      return;
    }
  }
  if (read == nullptr) {
    // Beyond the window we granted, as in OnStreamMessage.
    FailOnLoop(absl::ResourceExhaustedError(absl::StrCat(
        *peer_, " sent more than the ", kStreamWindow, " stream messages it was granted")));
    return;
  }
  CompleteRead(read, /*have=*/true, payload);
}

void ClientStreamState::CompleteRead(google::protobuf::MessageLite* message, bool have,
                                     absl::string_view payload) {
  bool ok = have;
  if (ok && !message->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    ok = false;
    FailOnLoop(absl::InternalError(absl::StrCat("message of ", payload.size(), " bytes from ",
                                                  method_, " did not parse as ",
                                                  message->GetTypeName())));
  }
  if (ok && interceptors_ != nullptr) interceptors_->ClientRecvMessage(message, payload.size());
  if (ok && ++consumed_ >= kStreamWindow / 2) {
    const uint32_t n = consumed_;
    consumed_ = 0;
    loop_->Post([self = shared_from_this(), n] {
      if (self->ended_ || self->handle_ == 0) return;
      self->conn_->GrantWindow(self->handle_, n);
    });
  }
  React(Reaction::kRead, ok);
}

void ClientStreamState::SendPendingWrites() {
  std::string payload;
  Attachment attachment;
  bool write = false;
  bool last = false;
  bool writes_done = false;
  {
    absl::MutexLock lock(&mu_);
    if (write_pending_ && send_window_ > 0) {
      --send_window_;
      write = true;
      write_pending_ = false;
      payload = std::move(pending_write_);
      pending_write_.clear();
      attachment = std::move(pending_write_attachment_);
      pending_write_attachment_ = Attachment();
      last = pending_write_last_;
    }
    if (!write_pending_ && writes_done_pending_) {
      writes_done_pending_ = false;
      writes_done = true;
    }
  }
  if (write) {
    const bool ok = SendOnLoop(std::move(payload), /*no_message=*/false, last,
                               std::move(attachment));
    React(Reaction::kWrite, ok);
  }
  if (writes_done) {
    const bool ok = SendOnLoop(std::string(), /*no_message=*/true, /*end_stream=*/true);
    React(Reaction::kWritesDone, ok);
  }
}

bool ClientStreamState::SendOnLoop(std::string payload, bool no_message, bool end_stream,
                                   Attachment attachment) {
  if (!ended_ && park_id_ != 0) {
    held_sends_.push_back(
        HeldSend{std::move(payload), no_message, end_stream, std::move(attachment)});
    return true;
  }
  if (ended_ || handle_ == 0) return false;
  conn_->SendStreamMessage(handle_, std::move(payload), no_message, end_stream,
                           std::move(attachment));
  return true;
}

void ClientStreamState::MaybeReactInitialMetadata(bool ok) {
  if (reactor_ == nullptr || initial_metadata_reacted_) return;
  initial_metadata_reacted_ = true;
  ClientReactorAccess::ReactInitialMetadata(reactor_, ok);
}

void ClientStreamState::React(Reaction reaction, bool ok) {
  switch (reaction) {
    case Reaction::kRead:
      ClientReactorAccess::ReactRead(reactor_, ok);
      break;
    case Reaction::kWrite:
      ClientReactorAccess::ReactWrite(reactor_, ok);
      break;
    case Reaction::kWritesDone:
      ClientReactorAccess::ReactWritesDone(reactor_, ok);
      break;
  }
  ReleaseGate();
}

void ClientStreamState::ReleaseGate() {
  if (gate_.Release()) ReactDone();
}

void ClientStreamState::ReactDone() {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = status_;
  }
  // Last touch of the reactor: OnDone may delete it (and its reference to
  // this state; the caller's task holds another).
  ClientReactorAccess::ReactDone(reactor_, status);
}

// ---- internal::ClientCallbackStream ---------------------------------------------

void ClientCallbackStream::Bind(ClientReactorBase* reactor, Channel* channel,
                                absl::string_view method, ClientContext* context, RpcKind kind,
                                const google::protobuf::MessageLite* first,
                                google::protobuf::MessageLite* response) {
  ClientCallbackStream* stream = ClientReactorAccess::Stream(reactor);
  stream->state_ =
      std::make_shared<ClientStreamState>(channel, method, context, kind);
  stream->state_->SetReactor(reactor, response);
  stream->state_->Prepare(first);
}

void ClientCallbackStream::StartCall() { state_->Start(); }
void ClientCallbackStream::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  if (attachment != nullptr) *attachment = Buffer();  // also when the read fails
  state_->StartRead(message, attachment);
}
void ClientCallbackStream::Write(const google::protobuf::MessageLite& message, bool last,
                                 const Buffer& attachment) {
  state_->StartWrite(message, last, AttachmentAccess::ToTransport(attachment));
}
void ClientCallbackStream::WritesDone() { state_->StartWritesDone(); }
void ClientCallbackStream::AddHolds(int holds) { state_->AddHolds(holds); }
void ClientCallbackStream::RemoveHold() { state_->RemoveHold(); }

// ---- internal::ClientStream ----------------------------------------------------

ClientStream::ClientStream(Channel* channel, absl::string_view method, ClientContext* context,
                           RpcKind kind, const google::protobuf::MessageLite* first)
    : state_(std::make_shared<ClientStreamState>(channel, method, context, kind)) {
  state_->Prepare(first);
  state_->Start();
}

ClientStream::~ClientStream() {
  if (!finished_) state_->CancelAndWait();
}

bool ClientStream::Write(const google::protobuf::MessageLite& message) {
  return state_->Write(message);
}
bool ClientStream::Write(const google::protobuf::MessageLite& message, const Buffer& attachment) {
  return state_->Write(message, AttachmentAccess::ToTransport(attachment));
}
bool ClientStream::WritesDone() { return state_->WritesDone(); }
bool ClientStream::Read(google::protobuf::MessageLite* message) { return state_->Read(message); }
bool ClientStream::ReadResponse(google::protobuf::MessageLite* response) {
  Buffer attachment;
  const bool got = state_->Read(response, &attachment);
  if (got) ClientContextAccess::SetResponseAttachment(state_->context(), std::move(attachment));
  return got;
}
bool ClientStream::Read(google::protobuf::MessageLite* message, Buffer* attachment) {
  if (attachment != nullptr) *attachment = Buffer();  // also when the read fails
  return state_->Read(message, attachment);
}
absl::Status ClientStream::Finish() {
  finished_ = true;
  return state_->Finish();
}

}  // namespace internal
}  // namespace rdmarpc
