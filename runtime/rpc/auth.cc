// auth.cc: AuthContext, and the runtime's side of rdmarpc/security.h
// (see auth.h).
#include "runtime/rpc/auth.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rdmarpc/server_context.h"
#include "runtime/rpc/context_access.h"
#include "runtime/transport/handshake.h"

namespace rdmarpc {

static_assert(kMaxConnectionTokenBytes == internal::kMaxConnectTokenBytes,
              "security.h's token limit is the handshake's");

bool AuthContext::IsPeerAuthenticated() const {
  return !identity_property_name_.empty() && properties_.count(identity_property_name_) > 0;
}

std::vector<std::string> AuthContext::GetPeerIdentity() const {
  if (!IsPeerAuthenticated()) return {};
  return FindPropertyValues(identity_property_name_);
}

std::vector<std::string> AuthContext::FindPropertyValues(absl::string_view name) const {
  std::vector<std::string> values;
  auto [begin, end] = properties_.equal_range(std::string(name));
  for (auto it = begin; it != end; ++it) values.push_back(it->second);
  return values;
}

void AuthContext::AddProperty(absl::string_view name, absl::string_view value) {
  properties_.emplace(std::string(name), std::string(value));
}

bool AuthContext::SetPeerIdentityPropertyName(absl::string_view name) {
  if (properties_.count(std::string(name)) == 0) return false;
  identity_property_name_ = std::string(name);
  return true;
}

std::shared_ptr<const AuthContext> ServerContext::auth_context() const {
  if (auth_context_ != nullptr) return auth_context_;
  static const auto* const kEmpty =
      new std::shared_ptr<const AuthContext>(std::make_shared<const AuthContext>());
  return *kEmpty;
}

namespace internal {

absl::Status CredentialsStatus(const absl::Status& s, absl::string_view what) {
  if (s.ok()) return s;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kDataLoss:
      return absl::InternalError(
          absl::StrCat(what, " returned ", absl::StatusCodeToString(s.code()),
                       ", a code kept for servers (gRFC A54): ", s.message()));
    default:
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
}

absl::Status ApplyCallCredentials(CallCredentials* channel_credentials, absl::string_view target,
                                  absl::string_view method, ClientContext* context) {
  CallCredentials* own = context->credentials().get();
  for (CallCredentials* c : {channel_credentials, own}) {
    if (c == nullptr) continue;
    absl::Status s = c->GetMetadata(target, method, ClientContextAccess::MutableMetadata(context));
    if (!s.ok()) {
      return CredentialsStatus(s, absl::StrCat(c == own ? "the call's" : "the channel's",
                                               " call credentials for ", method));
    }
  }
  return absl::OkStatus();
}

std::function<absl::StatusOr<std::string>(absl::string_view peer)> ConnectTokenFn(
    std::shared_ptr<ConnectionCredentials> credentials) {
  return [credentials =
              std::move(credentials)](absl::string_view peer) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> token = credentials->GetToken(peer);
    if (!token.ok()) return CredentialsStatus(token.status(), "connection credentials");
    return token;
  };
}

absl::AnyInvocable<absl::Status(absl::string_view token, absl::string_view peer,
                                std::shared_ptr<const void>* identity) const>
CheckTokenFn(std::shared_ptr<ConnectionAuthenticator> authenticator) {
  return [authenticator = std::move(authenticator)](absl::string_view token, absl::string_view peer,
                                                    std::shared_ptr<const void>* identity) {
    auto context = std::make_shared<AuthContext>();
    absl::Status s = authenticator->Authenticate(token, peer, context.get());
    if (s.ok()) *identity = std::shared_ptr<const AuthContext>(std::move(context));
    return s;
  };
}

namespace {

class AuthMetadataInterceptor final : public experimental::Interceptor {
 public:
  AuthMetadataInterceptor(AuthMetadataProcessor* processor, ServerContext* context,
                          const std::string& method)
      : processor_(processor), context_(context), method_(method) {}

  void Intercept(experimental::InterceptorBatchMethods* m) override {
    if (!m->QueryInterceptionHookPoint(
            experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      return;
    }
    std::multimap<std::string, std::string>* md = m->GetRecvInitialMetadata();
    auto auth = std::make_shared<AuthContext>(*context_->auth_context());
    AuthMetadataProcessor::OutputMetadata consumed;
    AuthMetadataProcessor::OutputMetadata response;
    // The method goes in as gRPC's ":path" and out before anyone else looks
    // (the server refuses a client's own ':' keys: TakeClientMetadata).
    auto path = md->emplace(":path", method_);
    absl::Status s = processor_->Process(*md, auth.get(), &consumed, &response);
    md->erase(path);
    for (const auto& [key, value] : consumed) {
      auto [begin, end] = md->equal_range(key);
      for (auto it = begin; it != end; ++it) {
        if (it->second == value) {
          md->erase(it);
          break;
        }
      }
    }
    ServerContextAccess::SetAuthContext(context_, std::move(auth));
    for (const auto& [key, value] : response) {
      if (s.ok()) {
        context_->AddInitialMetadata(key, value);
      } else {
        context_->AddTrailingMetadata(key, value);
      }
    }
    if (!s.ok()) m->Fail(std::move(s));
  }

 private:
  AuthMetadataProcessor* const processor_;
  ServerContext* const context_;
  // ServerContext::method(): a key of the server's method table, which
  // outlives every call.
  const std::string& method_;
};

class AuthMetadataFactory final : public experimental::ServerInterceptorFactoryInterface {
 public:
  explicit AuthMetadataFactory(std::shared_ptr<AuthMetadataProcessor> processor)
      : processor_(std::move(processor)) {}
  experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo* info) override {
    return new AuthMetadataInterceptor(processor_.get(), info->server_context(), info->method());
  }

 private:
  const std::shared_ptr<AuthMetadataProcessor> processor_;
};

}  // namespace

std::shared_ptr<experimental::ServerInterceptorFactoryInterface> AuthMetadataInterceptorFactory(
    std::shared_ptr<AuthMetadataProcessor> processor) {
  return std::make_shared<AuthMetadataFactory>(std::move(processor));
}

}  // namespace internal
}  // namespace rdmarpc
