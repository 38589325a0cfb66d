// unary_call.cc: BlockingUnaryCall and AsyncUnaryCall.
#include "rdmarpc/impl/unary_call.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "runtime/rpc/auth.h"
#include "runtime/rpc/channel_impl.h"
#include "runtime/rpc/interceptor_chain.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/retrying_call.h"
#include "runtime/rpc/service_config.h"

namespace rdmarpc {
namespace internal {

namespace {

// Checks shared by both entry points, after the call credentials added
// their metadata; OK when the call may be sent.
absl::Status CheckCall(const ChannelImpl* impl, absl::string_view method, size_t size,
                       ClientContext* context) {
  if (size > impl->options().max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request of ", size, " bytes exceeds max_message_bytes ",
                     impl->options().max_message_bytes));
  }
  if (method.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("method name of ", method.size(), " bytes is longer than 1024"));
  }
  if (absl::Now() >= context->deadline()) {
    return absl::DeadlineExceededError(
        absl::StrCat("deadline passed before ", method, " was sent"));
  }
  if (impl->options().call_credentials != nullptr || context->credentials() != nullptr) {
    absl::Status s = ApplyCallCredentials(impl->options().call_credentials.get(), impl->target(),
                                          method, context);
    if (!s.ok()) return s;
  }
  const Metadata& md = ClientContextAccess::Metadata(context);
  if (!md.empty()) {
    return ValidateMetadata(md, impl->options().max_metadata_bytes, "client metadata");
  }
  return absl::OkStatus();
}

// The retry or hedging policy the call runs under (nullptr: none, retries
// are off, or the `size`-byte request is over per_rpc_retry_buffer_bytes),
// and its deadline lowered to the config's timeout when it sets one.
const MethodConfig* PolicyFor(const ChannelImpl* impl, absl::string_view method, size_t size,
                              const MethodConfig* idl, absl::Time* deadline) {
  const MethodConfig* c = impl->MethodConfigFor(method, idl);
  if (c == nullptr) return nullptr;
  if (c->timeout != absl::InfiniteDuration()) {
    *deadline = std::min(*deadline, absl::Now() + c->timeout);
  }
  if (!impl->options().enable_retries || size > impl->options().per_rpc_retry_buffer_bytes ||
      (!c->retry.has_value() && !c->hedging.has_value())) {
    return nullptr;
  }
  return c;
}

std::string Serialize(const google::protobuf::MessageLite& request, size_t size) {
  std::string payload(size, '\0');
  if (size > 0) request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(payload.data()));
  return payload;
}

// A request that will go by rendezvous is serialised straight into
// registered memory when the channel already has its device (saves a copy).
// The connection is not chosen yet: this guesses with the channel's own
// eager limit (the negotiated one is never larger); the transport decides
// (SendsEagerly) and copies a registered request that turns out to fit.
bool SerializeLargeIntoRegistered(ChannelImpl* impl, absl::string_view method, size_t size,
                                  const google::protobuf::MessageLite& request,
                                  ClientCall* call) {
  if (Connection::MessageSendsEagerly(size + method.size(), impl->options().eager_limit_bytes)) {
    return false;
  }
  LargeBufferPool* pool = impl->large_pool();
  if (pool == nullptr) return false;
  absl::StatusOr<LargeBuffer*> buf = pool->Get(size);
  if (!buf.ok()) return false;
  call->registered = PooledBuffer(pool, *buf);
  call->registered_len = size;
  request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>((*buf)->data));
  return true;
}

// POST_RECV_INITIAL_METADATA (when the request went out), POST_RECV_MESSAGE
// (when OK) and POST_RECV_STATUS of a unary call that ended with `*status`.
void RunUnaryReceiveHooks(InterceptorChain* chain, ClientContext* context,
                          google::protobuf::MessageLite* response, absl::Status* status) {
  if (!context->peer().empty()) {
    chain->ClientRecvInitialMetadata(ClientContextAccess::ServerInitialMetadata(context));
  }
  if (status->ok()) chain->ClientRecvMessage(response, response->ByteSizeLong());
  chain->ClientRecvStatus(status, ClientContextAccess::ServerTrailingMetadata(context));
}

absl::Status PlainBlockingUnaryCall(ChannelImpl* impl, absl::string_view method,
                                    ClientContext* context,
                                    const google::protobuf::MessageLite& request,
                                    google::protobuf::MessageLite* response,
                                    const MethodConfig* idl_config);

// A blocking call on a channel with interceptors: the hooks around the
// plain call, all on the caller's thread.
absl::Status InterceptedBlockingUnaryCall(Channel* channel, ChannelImpl* impl,
                                          absl::string_view method, ClientContext* context,
                                          const google::protobuf::MessageLite& request,
                                          google::protobuf::MessageLite* response,
                                          const MethodConfig* idl_config) {
  std::unique_ptr<InterceptorChain> chain = InterceptorChain::ForClient(
      impl->options().interceptor_creators, channel, method, RpcKind::kUnary, context);
  if (chain == nullptr) {
    return PlainBlockingUnaryCall(impl, method, context, request, response, idl_config);
  }
  absl::Status status =
      chain->ClientSendInitialMetadata(ClientContextAccess::MutableMetadata(context));
  if (!status.ok()) {
    chain->ClientRecvStatus(&status, ClientContextAccess::ServerTrailingMetadata(context));
    return status;
  }
  chain->ClientSendMessage(request, request.ByteSizeLong());
  status = PlainBlockingUnaryCall(impl, method, context, request, response, idl_config);
  RunUnaryReceiveHooks(chain.get(), context, response, &status);
  return status;
}

}  // namespace

namespace {

void StartAsyncUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                         const google::protobuf::MessageLite& request,
                         google::protobuf::MessageLite* response,
                         absl::AnyInvocable<void(absl::Status) &&> done, bool refuse_inline,
                         const MethodConfig* idl_config) {
  ChannelImpl* impl = ChannelAccess::Impl(channel);
  if (impl->inherited()) {
    // A forked child has no engine to run `done` on: here, at once.
    std::move(done)(impl->InheritedError());
    return;
  }
  if (!impl->options().interceptor_creators.empty()) {
    std::unique_ptr<InterceptorChain> chain = InterceptorChain::ForClient(
        impl->options().interceptor_creators, channel, method, RpcKind::kUnary, context);
    if (chain != nullptr) {
      absl::Status failed =
          chain->ClientSendInitialMetadata(ClientContextAccess::MutableMetadata(context));
      if (!failed.ok()) {
        // Nothing is sent: the call ends here, as a refused one does.
        auto end = [chain = std::move(chain), context, done = std::move(done),
                    status = std::move(failed)]() mutable {
          chain->ClientRecvStatus(&status, ClientContextAccess::ServerTrailingMetadata(context));
          chain.reset();
          std::move(done)(std::move(status));
        };
        if (refuse_inline) {
          end();
        } else {
          impl->PickRoute().loop->Post(std::move(end));
        }
        return;
      }
      chain->ClientSendMessage(request, request.ByteSizeLong());
      done = [chain = std::move(chain), context, response,
              done = std::move(done)](absl::Status status) mutable {
        RunUnaryReceiveHooks(chain.get(), context, response, &status);
        chain.reset();  // the interceptors go before the caller hears the end
        std::move(done)(std::move(status));
      };
    }
  }
  const size_t size = request.ByteSizeLong();
  if (absl::Status s = CheckCall(impl, method, size, context); !s.ok()) {
    if (refuse_inline) {
      std::move(done)(std::move(s));
    } else {
      impl->PickRoute().loop->Post(
          [done = std::move(done), s = std::move(s)]() mutable { std::move(done)(std::move(s)); });
    }
    return;
  }
  absl::Time deadline = context->deadline();
  if (const MethodConfig* policy = PolicyFor(impl, method, size, idl_config, &deadline);
      policy != nullptr) {
    RetryingCall::Start(impl, *policy, method, Serialize(request, size),
                        ClientContextAccess::Metadata(context), context, response, deadline,
                        std::move(done));
    return;
  }
  ClientCall* call = ClientCallCache::Take();
  call->method_storage.assign(method.data(), method.size());
  call->method = call->method_storage;
  const Metadata& md = ClientContextAccess::Metadata(context);
  if (!md.empty()) call->meta = EncodeMetadata(md);
  if (!md.empty() || !SerializeLargeIntoRegistered(impl, method, size, request, call)) {
    // The caller may free `request` once we return: serialise now; the
    // transport copies these bytes into the send buffer (counted).
    call->payload.resize(size);
    if (size > 0) {
      request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(call->payload.data()));
    }
  }
  call->deadline = deadline;
  call->max_metadata_bytes = impl->options().max_metadata_bytes;
  call->response = response;
  call->context = context;
  call->done = std::move(done);
  impl->Start(call);
}

}  // namespace

void AsyncUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                    const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    absl::AnyInvocable<void(absl::Status) &&> done,
                    const MethodConfig* idl_config) {
  StartAsyncUnaryCall(channel, method, context, request, response, std::move(done),
                      /*refuse_inline=*/true, idl_config);
}

void AsyncUnaryCallNeverInline(Channel* channel, absl::string_view method,
                               ClientContext* context,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response,
                               absl::AnyInvocable<void(absl::Status) &&> done,
                               const MethodConfig* idl_config) {
  StartAsyncUnaryCall(channel, method, context, request, response, std::move(done),
                      /*refuse_inline=*/false, idl_config);
}

absl::Status BlockingUnaryCall(Channel* channel, absl::string_view method, ClientContext* context,
                               const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response,
                               const MethodConfig* idl_config) {
  ChannelImpl* impl = ChannelAccess::Impl(channel);
  if (impl->inherited()) return impl->InheritedError();
  if (!impl->options().interceptor_creators.empty()) {
    return InterceptedBlockingUnaryCall(channel, impl, method, context, request, response,
                                        idl_config);
  }
  return PlainBlockingUnaryCall(impl, method, context, request, response, idl_config);
}

const MethodConfig* IdlMethodConfig(const char* json) {
  absl::StatusOr<MethodConfig> config = ParseMethodConfig(json);
  if (!config.ok()) {
    // The generator checked the options; a mismatch with this parser must
    // not take the process down: the method's calls go out once.
    LOG(ERROR) << "rdmarpc: a generated method policy does not parse (" << config.status()
               << "); its calls are sent without it: " << json;
    return nullptr;
  }
  return new MethodConfig(*std::move(config));
}

namespace {

absl::Status PlainBlockingUnaryCall(ChannelImpl* impl, absl::string_view method,
                                    ClientContext* context,
                                    const google::protobuf::MessageLite& request,
                                    google::protobuf::MessageLite* response,
                                    const MethodConfig* idl_config) {
  if (impl->OnLoopThread()) {
    // Inside a completion callback: this thread drives the loop that would
    // have to deliver the response, and the deadline timer runs here too.
    return absl::FailedPreconditionError(absl::StrCat(
        "blocking call to ", method,
        " from a completion callback of the same channel would deadlock; use stub->async()"));
  }
  const size_t size = request.ByteSizeLong();
  if (absl::Status s = CheckCall(impl, method, size, context); !s.ok()) return s;
  absl::Time deadline = context->deadline();
  if (const MethodConfig* policy = PolicyFor(impl, method, size, idl_config, &deadline);
      policy != nullptr) {
    CallWaiter waiter;
    absl::Status result;
    RetryingCall::RunBlocking(impl, *policy, method, Serialize(request, size),
                              ClientContextAccess::Metadata(context), context, response,
                              deadline, &waiter, [&waiter, &result](absl::Status s) {
                                result = std::move(s);
                                waiter.Notify();
                              });
    return result;
  }
  // Everything lives on this stack: no allocation for a small call. The
  // request is serialised straight into the registered send buffer when it
  // is posted (`request` outlives the call: we wait for it).
  ClientCall call;
  call.method = method;
  const Metadata& md = ClientContextAccess::Metadata(context);
  if (!md.empty()) {
    // With metadata the request goes as bytes: the transport may have to
    // put the metadata in front of it (too large for the eager prefix).
    call.meta = EncodeMetadata(md);
    call.payload.resize(size);
    if (size > 0) request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(call.payload.data()));
  } else if (!SerializeLargeIntoRegistered(impl, method, size, request, &call)) {
    call.request_message = &request;
    call.request_size = size;
  }
  call.deadline = deadline;
  call.max_metadata_bytes = impl->options().max_metadata_bytes;
  call.response = response;
  call.context = context;
  CallWaiter waiter;
  absl::Status result;
  call.waiter = &waiter;
  call.result = &result;
  impl->RunBlocking(&call);
  if (result.ok() && call.deferred_response) return call.ParseDeferredResponse();
  return result;
}

}  // namespace

}  // namespace internal
}  // namespace rdmarpc
