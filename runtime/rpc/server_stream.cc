// server_stream.cc: see server_stream.h.
#include "runtime/rpc/server_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/context_access.h"
#include "runtime/rpc/metadata.h"

namespace rdmarpc {
namespace internal {

bool ServerStreamState::Read(google::protobuf::MessageLite* message) {
  std::string payload;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || client_done_ || !inbox_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (cancelled_ || inbox_.empty() || !failure_.ok()) return false;
    payload = std::move(inbox_.front());
    inbox_.pop_front();
  }
  if (!message->ParseFromString(payload)) {
    absl::MutexLock lock(&mu_);
    failure_ = absl::InternalError(absl::StrCat("stream message of ", payload.size(),
                                                " bytes did not parse as ",
                                                message->GetTypeName()));
    return false;
  }
  if (++consumed_ >= kStreamWindow / 2) {
    const uint32_t n = consumed_;
    consumed_ = 0;
    loop_->Post([conn = conn_, token = token_, n] {
      if (*conn != nullptr) (*conn)->GrantWindow(token, n);
    });
  }
  return true;
}

bool ServerStreamState::Write(const google::protobuf::MessageLite& message) {
  const size_t size = message.ByteSizeLong();
  if (size > max_message_bytes_) {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      failure_ = absl::ResourceExhaustedError(absl::StrCat(
          "stream message of ", size, " bytes exceeds max_message_bytes ", max_message_bytes_));
    }
    return false;
  }
  std::string payload;
  message.SerializeToString(&payload);
  if (!headers_sent_) {
    headers_sent_ = true;
    const Metadata& initial = ServerContextAccess::InitialMetadata(context_);
    if (!initial.empty()) {
      absl::Status md = ValidateMetadata(initial, ~size_t{0}, "server initial metadata");
      std::string encoded = EncodeMetadata(initial);
      if (md.ok() && encoded.size() > max_header_bytes_) {
        md = absl::ResourceExhaustedError(absl::StrCat(
            "server initial metadata of ", encoded.size(), " encoded bytes exceeds the ",
            max_header_bytes_, " bytes a stream's headers carry on this connection (its eager "
            "limit); send it as trailing metadata"));
      }
      if (!md.ok()) {
        absl::MutexLock lock(&mu_);
        if (failure_.ok()) failure_ = std::move(md);
        return false;
      }
      loop_->Post([conn = conn_, token = token_, meta = std::move(encoded)]() mutable {
        if (*conn != nullptr) (*conn)->SendStreamHeaders(token, std::move(meta));
      });
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || send_window_ > 0;
    };
    mu_.Await(absl::Condition(&ready));
    if (cancelled_ || !failure_.ok()) return false;
    --send_window_;
  }
  loop_->Post([conn = conn_, token = token_, payload = std::move(payload)]() mutable {
    if (*conn != nullptr) (*conn)->SendStreamMessage(token, std::move(payload));
  });
  return true;
}

void ServerStreamState::OnMessage(absl::string_view payload, bool has_message,
                                  bool end_stream) {
  absl::MutexLock lock(&mu_);
  if (client_done_ || cancelled_) return;  // nothing may follow the half-close
  if (has_message && inbox_.size() >= kStreamWindow) {
    // The client sent beyond the window we granted: a broken or hostile
    // peer. The call fails; the connection's other calls go on.
    failure_ = absl::ResourceExhaustedError(absl::StrCat(
        "the client sent more than the ", kStreamWindow, " stream messages it was granted"));
    cancelled_ = true;
    return;
  }
  if (has_message) inbox_.emplace_back(payload);
  if (end_stream) client_done_ = true;
}

void ServerStreamState::OnWindow(uint32_t messages) {
  absl::MutexLock lock(&mu_);
  // A well-behaved client grants back only what it consumed; never let a
  // hostile one open the window past kStreamWindow (or wrap it).
  send_window_ = std::min<uint64_t>(uint64_t{send_window_} + messages, kStreamWindow);
}

void ServerStreamState::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

// ---- internal::ServerStream ----------------------------------------------------

bool ServerStream::Read(google::protobuf::MessageLite* message) { return state_->Read(message); }
bool ServerStream::Write(const google::protobuf::MessageLite& message) {
  return state_->Write(message);
}

}  // namespace internal
}  // namespace rdmarpc
