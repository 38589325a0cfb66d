// auth.h: how the runtime applies rdmarpc/security.h — call credentials on
// the client, the auth metadata processor as a server interceptor (right
// after the metrics one, else first), and the adapters that put connection credentials and the
// connection authenticator into the transport's handshake.
#ifndef RDMARPC_RUNTIME_RPC_AUTH_H_
#define RDMARPC_RUNTIME_RPC_AUTH_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/security.h"

namespace rdmarpc {
namespace internal {

// gRFC A54: a status that credentials produce locally may not carry a code
// that only a server's answer should (INVALID_ARGUMENT, NOT_FOUND,
// ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, DATA_LOSS):
// those become INTERNAL, their message kept and `what` put in front.
absl::Status CredentialsStatus(const absl::Status& s, absl::string_view what);

// Client, the thread starting a call: adds the metadata of the channel's
// `channel_credentials` and then of the context's own credentials (either
// may be null) to the context's metadata. OK, or the credentials' error
// (CredentialsStatus).
absl::Status ApplyCallCredentials(CallCredentials* channel_credentials, absl::string_view target,
                                  absl::string_view method, ClientContext* context);

// Client: the transport's ConnectionOptions::connect_token for
// `credentials` (statuses through CredentialsStatus).
std::function<absl::StatusOr<std::string>(absl::string_view peer)> ConnectTokenFn(
    std::shared_ptr<ConnectionCredentials> credentials);

// Server: the transport's Listener::Options::check_token for
// `authenticator`; the identity it stores is a const AuthContext.
absl::AnyInvocable<absl::Status(absl::string_view token, absl::string_view peer,
                                std::shared_ptr<const void>* identity) const>
CheckTokenFn(std::shared_ptr<ConnectionAuthenticator> authenticator);

// Server: the interceptor factory that runs `processor` at
// POST_RECV_INITIAL_METADATA (rdmarpc/security.h says what it does).
std::shared_ptr<experimental::ServerInterceptorFactoryInterface> AuthMetadataInterceptorFactory(
    std::shared_ptr<AuthMetadataProcessor> processor);

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_RPC_AUTH_H_
