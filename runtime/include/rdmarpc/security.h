// rdmarpc/security.h: authentication, per connection and per call, in the
// shape of gRPC's auth API (grpcpp/security/auth_context.h,
// auth_metadata_processor.h, and credentials.h's MetadataCredentialsPlugin).
//
// Two levels; use either or both:
//  - Per connection (gRPC has no counterpart; TLS takes its place there): a
//    client's ConnectionCredentials gives a short token that travels in the
//    rdma_cm connect request's private data; the server's
//    ConnectionAuthenticator checks it before the server creates a QP,
//    posts a receive or registers a byte for the connection. A refused
//    client costs the server no registered memory, and its calls fail
//    UNAUTHENTICATED or PERMISSION_DENIED. What the authenticator learned
//    (the peer's identity) is the AuthContext every call on that connection
//    starts with.
//  - Per call (gRPC's call credentials and AuthMetadataProcessor): a
//    client's CallCredentials adds metadata (a bearer token, a signature) to
//    each call; the server's AuthMetadataProcessor checks it before the
//    handler and the server's interceptors run, may consume it (the handler
//    and interceptors do not see it), and fills the call's AuthContext. A
//    refusal fails the call with the processor's status; the handler does
//    not run.
//
//   // Client: a bearer token on every call.
//   class Bearer final : public rdmarpc::CallCredentials {
//    public:
//     absl::Status GetMetadata(absl::string_view target, absl::string_view method,
//                              Metadata* md) override {
//       md->emplace("authorization", "Bearer s3cr3t");
//       return absl::OkStatus();
//     }
//   };
//   rdmarpc::ChannelOptions co;
//   co.call_credentials = std::make_shared<Bearer>();
//   auto channel = rdmarpc::CreateChannel("10.0.0.7:7000", co);
//
//   // Server: check it, name the caller, hide the token from the handler.
//   class CheckBearer final : public rdmarpc::AuthMetadataProcessor {
//    public:
//     absl::Status Process(const InputMetadata& md, rdmarpc::AuthContext* ctx,
//                          OutputMetadata* consumed, OutputMetadata*) override {
//       auto it = md.find("authorization");
//       if (it == md.end() || it->second != "Bearer s3cr3t") {
//         return absl::UnauthenticatedError("no valid bearer token");
//       }
//       consumed->insert(*it);
//       ctx->AddProperty("user", "alice");
//       ctx->SetPeerIdentityPropertyName("user");
//       return absl::OkStatus();
//     }
//   };
//   rdmarpc::ServerOptions so;
//   so.auth_metadata_processor = std::make_shared<CheckBearer>();
//   // In a handler: ctx->auth_context()->GetPeerIdentity() is {"alice"}.
//
// ConnectionCredentials / ConnectionAuthenticator have the same shape for
// the connect request's token.
//
// Differences from gRPC's API: CallCredentials::GetMetadata gets the
// channel's target and the full method name ("/pkg.Service/Method") where
// MetadataCredentialsPlugin gets a service URL, a method name and the
// channel's AuthContext, and runs on the thread starting the call (async
// calls included), so it must not block for long; AuthMetadataProcessor
// has no IsBlocking(): Process runs where the handler will (see below).
//
// examples/auth/ does both with a shared secret: HMAC-SHA256 over a fresh
// nonce and the time, so the secret itself never travels.
//
// Nothing here encrypts: RDMA moves bytes as they are, and a peer on the
// fabric that can see them sees tokens and payloads alike. These checks
// decide who may connect and call; confidentiality is the fabric's (a
// partition key, a VLAN, link encryption).
#ifndef RDMARPC_SECURITY_H_
#define RDMARPC_SECURITY_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

// Longest connection token in bytes: rdma_cm carries 56 bytes of private
// data with a connect request on IB and RoCE (the IB CM REQ's 92 less
// rdma_cm's header; rdma_connect(3)), and rdmarpc's handshake takes 21.
inline constexpr size_t kMaxConnectionTokenBytes = 35;

// What the server knows about who is calling: named properties (several
// values per name allowed) and which property names the peer. gRPC's
// AuthContext, with std::string values. A copyable value; the runtime hands
// each call its own (ServerContext::auth_context) and never changes it once
// the handler runs.
class RDMARPC_EXPORT AuthContext {
 public:
  using PropertyMap = std::multimap<std::string, std::string>;

  // True once SetPeerIdentityPropertyName named a property the context has.
  bool IsPeerAuthenticated() const;
  // The values of the identity property, in the order they were added;
  // empty when the peer is not authenticated.
  std::vector<std::string> GetPeerIdentity() const;
  // "" until SetPeerIdentityPropertyName.
  const std::string& GetPeerIdentityPropertyName() const { return identity_property_name_; }
  // Every value of property `name`, in the order added; empty when none.
  std::vector<std::string> FindPropertyValues(absl::string_view name) const;
  const PropertyMap& properties() const { return properties_; }

  void AddProperty(absl::string_view name, absl::string_view value);
  // Names the property that identifies the peer. False (and nothing
  // changes) when the context has no property called `name`.
  bool SetPeerIdentityPropertyName(absl::string_view name);

 private:
  PropertyMap properties_;
  std::string identity_property_name_;
};

// Client: the connection token a Channel sends with each connect request
// (ChannelOptions::connection_credentials; shared, lives while a channel
// made with it does).
class RDMARPC_EXPORT ConnectionCredentials {
 public:
  virtual ~ConnectionCredentials() = default;
  // The token for one connection attempt to `server` ("ip:port"): at most
  // kMaxConnectionTokenBytes bytes; an empty one sends none. Called once
  // per attempt (every reconnect asks again, so a token may be fresh each
  // time) on the channel's engine thread that makes the connection,
  // possibly on several at once: must be thread-safe and must not block
  // (that engine's calls wait). An error fails the attempt, and the calls
  // waiting for the connection get its status, with a code gRFC A54 leaves
  // to credentials (UNAUTHENTICATED, UNAVAILABLE, ...; the codes it keeps
  // for servers, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
  // FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE and DATA_LOSS, become
  // INTERNAL). A longer token fails them INTERNAL.
  virtual absl::StatusOr<std::string> GetToken(absl::string_view server) = 0;
};

// Server: checks the connection token of each connect request
// (ServerOptions::connection_authenticator; shared, lives while the server
// does).
class RDMARPC_EXPORT ConnectionAuthenticator {
 public:
  virtual ~ConnectionAuthenticator() = default;
  // Checks `token` (empty when the client sent none) of a connect request
  // from `peer` ("ip:port"), before anything is created or registered for
  // the connection. OK accepts it, after adding to `context` what the calls
  // on this connection should know (AddProperty, then
  // SetPeerIdentityPropertyName): each call starts with a copy of it.
  // PERMISSION_DENIED (a known client that may not connect) rejects it and
  // the client's calls fail PERMISSION_DENIED; any other error (missing,
  // malformed, expired, forged, replayed) rejects it and they fail
  // UNAUTHENTICATED. The status goes to the server's log (one line a
  // second per client host); the client hears only the code. Runs on the
  // server's acceptor thread, one request at a time: must not block, since
  // every connect request waits behind it.
  virtual absl::Status Authenticate(absl::string_view token, absl::string_view peer,
                                    AuthContext* context) = 0;
};

// Client: metadata that authenticates each call (gRPC's call credentials;
// ChannelOptions::call_credentials for every call of a channel, and
// ClientContext::set_credentials for one call, after the channel's).
// Unlike gRPC, which sends call credentials only over a channel whose
// security level allows it (TLS), rdmarpc always sends them, as plain
// bytes on the fabric: prefer what a captured copy cannot reuse for long
// (a signature bound to the method and the time, as examples/auth does)
// over a long-lived bearer secret.
class RDMARPC_EXPORT CallCredentials {
 public:
  using Metadata = std::multimap<std::string, std::string>;
  virtual ~CallCredentials() = default;
  // Adds to `metadata` what authenticates a call of `method`
  // ("/package.Service/Method") on a channel to `target` (as given to
  // CreateChannel). Keys and values follow ClientContext::AddMetadata's
  // rules and count against max_metadata_bytes. Called once per call,
  // before anything is sent, on the thread that starts it (after the
  // channel's interceptors ran PRE_SEND_INITIAL_METADATA, so they do not
  // see what it adds); the attempts of a call retried under a policy carry
  // the same metadata. Must be thread-safe. An error fails the call with
  // nothing sent, with its status; as in gRFC A54, the codes kept for
  // servers (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
  // FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, DATA_LOSS) become INTERNAL.
  virtual absl::Status GetMetadata(absl::string_view target, absl::string_view method,
                                   Metadata* metadata) = 0;
};

// Server: checks each call's metadata before its handler runs
// (ServerOptions::auth_metadata_processor; shared, lives while the server
// does). gRPC's AuthMetadataProcessor.
class RDMARPC_EXPORT AuthMetadataProcessor {
 public:
  using InputMetadata = std::multimap<std::string, std::string>;
  using OutputMetadata = std::multimap<std::string, std::string>;
  virtual ~AuthMetadataProcessor() = default;
  // `auth_metadata`: the call's client metadata, plus ":path", the method
  // ("/package.Service/Method"), as gRPC's servers give it (an HTTP/2
  // pseudo-header; no client entry can start with ':'). `context`: the call's
  // AuthContext, starting as the connection's (ConnectionAuthenticator);
  // what is added here is what the handler sees. Entries put in
  // `consumed_auth_metadata` (key and value) are removed from the metadata
  // the server's interceptors and the handler see. `response_metadata` is
  // sent back: with the initial metadata when the call goes on, with the
  // trailing metadata when it is refused. OK runs the call; an error ends
  // it with that status and the handler does not run: UNAUTHENTICATED (no
  // or bad credentials) or PERMISSION_DENIED (known caller, not allowed),
  // as gRPC's servers answer. Runs on the thread that then runs the
  // handler (a handler-pool thread; the server's worker for a run_inline
  // method, where it must not block), for several calls at once: must be
  // thread-safe. The processor runs before every interceptor in
  // ServerOptions::interceptor_creators, after the call-metrics one (so a
  // refused call is counted with its code).
  virtual absl::Status Process(const InputMetadata& auth_metadata, AuthContext* context,
                               OutputMetadata* consumed_auth_metadata,
                               OutputMetadata* response_metadata) = 0;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SECURITY_H_
