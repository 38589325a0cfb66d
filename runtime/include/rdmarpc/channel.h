// rdmarpc/channel.h: a client's view of one or more servers.
//
// A Channel keeps, for each server address in its target, a pool of RDMA
// reliable-connected (RC) connections made with rdma_cm, and spreads calls
// over the servers round robin. Generated stubs take a shared Channel:
//
//   auto channel = rdmarpc::CreateChannel("10.0.0.7:7000");
//   auto stub = demo::EchoService::NewStub(channel);
//
// Thread safety: every method may be called from any thread; one Channel is
// meant to be shared by all threads of a process that talk to those servers.
#ifndef RDMARPC_CHANNEL_H_
#define RDMARPC_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdmarpc/export.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/security.h"

namespace rdmarpc {

// The largest max_message_bytes a Channel or Server accepts: 2^31 - 1 bytes,
// the largest message protobuf serialises (its sizes are ints).
inline constexpr size_t kMaxProtobufMessageBytes = 2147483647;

class Channel;
struct ChannelOptions;
namespace internal {
class ChannelImpl;
class ChannelAccess;
}  // namespace internal
absl::StatusOr<std::shared_ptr<Channel>> CreateChannel(absl::string_view target,
                                                       const ChannelOptions& options);

// Outlier detection: a server whose calls fail, or are slow, far more than
// its peers' is taken out of rotation for a while (ejected): the balancer
// skips it unless no other server is left. The rules are
// those of gRPC's outlier_detection policy (gRFC A50, after Envoy's
// outlier detection), plus Envoy's consecutive-failures rule and a latency
// rule of rdmarpc's own. A call counts as failed when it ends UNAVAILABLE,
// DEADLINE_EXCEEDED, INTERNAL, UNKNOWN or DATA_LOSS (the server's or the
// network's fault); other codes count as successes, CANCELLED not at all.
// Unary calls (each attempt of a retried one) are counted.
//
// Every `interval` the channel looks at each server's calls since the last
// look. An ejected server returns after base_ejection_time × (times it was
// ejected in a row), at most max(base_ejection_time, max_ejection_time).
// No rule ejects a server while max_ejection_percent of the servers are
// ejected already, except that one server may always be (Envoy's rule; so
// with 3 servers and the default 10 %, one). Ejections show in the metrics
// (rdmarpc/metrics.h) as rdmarpc_outlier_ejected{channel,target,server} (1
// while ejected; channel is a number telling two channels to one target
// apart) and rdmarpc_outlier_ejections_total{channel,target,server,reason}.
// Each rule's parameters default to gRFC A50's values; unlike gRPC, where
// a rule runs only when its config is given, both A50 rules are on once
// `enabled` (their minimum of 5 servers keeps them out of smaller sets):
// set a rule's minimum_hosts to 0 to turn it off. A DEADLINE_EXCEEDED
// counts against the server even when the caller's deadline was short.
struct OutlierDetectionOptions {
  bool enabled = false;
  absl::Duration interval = absl::Seconds(10);
  absl::Duration base_ejection_time = absl::Seconds(30);
  absl::Duration max_ejection_time = absl::Seconds(300);
  int max_ejection_percent = 10;
  // Envoy's consecutive_5xx: this many failed calls in a row eject the
  // server at once, between looks. 0 turns it off.
  int consecutive_failures = 5;
  // A50's successRateEjection: among the servers with at least
  // success_rate_request_volume calls (and only when there are at least
  // success_rate_minimum_hosts of them), one whose success rate is below
  // mean - stdev × success_rate_stdev_factor / 1000. 0 minimum hosts turns
  // it off.
  int success_rate_stdev_factor = 1900;
  int success_rate_minimum_hosts = 5;
  int success_rate_request_volume = 100;
  // A50's failurePercentageEjection: a server with at least
  // failure_percentage_request_volume calls of which more than
  // failure_percentage_threshold % failed (only when at least
  // failure_percentage_minimum_hosts servers have that volume). 0 minimum
  // hosts turns it off.
  int failure_percentage_threshold = 85;
  int failure_percentage_minimum_hosts = 5;
  int failure_percentage_request_volume = 50;
  // Slow servers (rdmarpc's): a server with at least latency_request_volume
  // calls whose mean latency is over latency_factor times the median of the
  // servers' mean latencies (at least latency_minimum_hosts servers with
  // that volume). 0 (the default) turns it off.
  double latency_factor = 0;
  int latency_minimum_hosts = 3;
  int latency_request_volume = 50;
};

struct RDMARPC_EXPORT ChannelOptions {
  // RC connections kept per server address.
  int pool_size = 2;
  // Largest encoded message (header + protobuf bytes) sent eagerly as one
  // SEND_WITH_IMM, in bytes; larger ones go by rendezvous (RDMA READ/WRITE).
  // The limit actually used is min(this, the server's receive-buffer size).
  size_t eager_limit_bytes = 8 * 1024;
  // Largest request or response accepted, in bytes. A larger request fails
  // with RESOURCE_EXHAUSTED before anything is sent. At most
  // kMaxProtobufMessageBytes (CreateChannel: INVALID_ARGUMENT above).
  size_t max_message_bytes = 64 * 1024 * 1024;
  // Receive buffers pre-posted per connection = initial credits granted to
  // the server. Accepted range 2..65535; 2 is raised to 3, because one
  // receive is held in reserve for credit returns and with only two the
  // peers could each wait for the other's credit. With a shared receive
  // queue (kShared below): the most credits one connection may hold.
  int recv_depth = 64;
  // Where the channel's receive buffers (for responses, stream frames and
  // credits the servers send) come from.
  //  * kPerConnection (the default): each connection pre-posts recv_depth
  //    buffers of eager_limit_bytes of its own (64 x 8 KiB = 512 KiB per
  //    connection at the defaults), idle or not.
  //  * kShared: one shared receive queue (SRQ) per engine thread serves
  //    every connection of the channel on that thread, to every server of
  //    the target (each server's pool of pool_size connections: a target
  //    with many servers, or a large pool_size, makes many connections;
  //    the servers' pools spread over the engine threads). Receive memory
  //    grows with engine threads, not connections: srq_shared_buffers per
  //    engine thread plus srq_min_credits per connection, in whole slabs of
  //    256 buffers (at the defaults 6 MiB for the first connections of a
  //    thread, then 32 KiB per connection). Credits are granted per
  //    connection as on a server's SRQ (ServerOptions::receive_queue): each
  //    connection gets srq_min_credits always and a share of the shared
  //    buffers (at most recv_depth, and at most an equal part among the
  //    connections asking for more) while its server sends, so one server
  //    streaming to the client cannot take every receive, and none meets
  //    receiver-not-ready; credits a connection holds when its server goes
  //    quiet are not taken back until it sends again. Each SRQ holds at most the device's
  //    max_srq_wr receives rounded down to whole slabs (32512 on softrdma
  //    and ConnectX-5/6): an engine thread takes at most (32512 -
  //    srq_shared_buffers) / srq_min_credits connections (8,000 at the
  //    defaults); a connection beyond fails its calls RESOURCE_EXHAUSTED
  //    naming the numbers (raise engine_threads, or lower the two srq_
  //    options: values past what one SRQ holds are accepted by
  //    CreateChannel but fail every connection that way). On a device without
  //    SRQs each connection gets a ring of its own, as kPerConnection,
  //    with a warning logged once. Channels do not share engine threads,
  //    so two channels in one process have SRQs of their own: make one
  //    channel for a target with many servers (a resolver target, or a
  //    comma-separated list) rather than one per server.
  //  Servers see no difference: both speak the same protocol.
  enum class ReceiveQueue { kPerConnection, kShared };
  ReceiveQueue receive_queue = ReceiveQueue::kPerConnection;
  // kShared: credits every server connection is granted (and starts with).
  // Accepted range 3..65535 (CreateChannel: INVALID_ARGUMENT naming it
  // otherwise; checked only with kShared); above recv_depth it is
  // recv_depth (at least 3).
  int srq_min_credits = 4;
  // kShared: buffers each engine thread's SRQ shares beyond the
  // connections' floors. Accepted range 1..65535 (CreateChannel:
  // INVALID_ARGUMENT naming it otherwise; checked only with kShared).
  int srq_shared_buffers = 512;
  // Most registered memory one connection exposes to its server at once, in
  // bytes: the request and reply buffers of calls with large messages (held
  // until the server answered, also past a call's deadline) and large
  // stream messages until the server pulled them. A call that would pass
  // it fails at once with RESOURCE_EXHAUSTED naming the sizes (retry once
  // others finished); the connection and its other calls carry on. It
  // bounds what a server that never answers can pin. A unary call with a
  // large request counts the request and a reply buffer of about its size
  // (so a 1 MiB request needs about 2 MiB). 0 (the default):
  // max(4 GiB, 4 × max_message_bytes + 1 MiB): at least two calls of the
  // largest size at once (about 32 of 64 MiB at the default
  // max_message_bytes).
  size_t max_exposed_bytes_per_connection = 0;
  // Time allowed to set up one connection (address and route resolution,
  // connect, handshake). A call fails with UNAVAILABLE when it runs out
  // (its own deadline, when sooner, fails it first with DEADLINE_EXCEEDED).
  // The default is gRPC's MIN_CONNECT_TIMEOUT, 20 s (its
  // doc/connection-backoff.md). Must be > 0 (CreateChannel:
  // INVALID_ARGUMENT otherwise).
  absl::Duration connect_timeout = absl::Seconds(20);
  // Threads polling this channel's completion queues.
  int engine_threads = 1;
  // Largest metadata of one call (keys and values, each direction), in
  // bytes; larger fails RESOURCE_EXHAUSTED naming both sizes. gRPC's default.
  size_t max_metadata_bytes = 8 * 1024;
  // Client interceptors (rdmarpc/interceptor.h), outermost first: each
  // factory makes one interceptor per call, on the thread starting it.
  // Shared, not owned: a factory lives while a channel made with it does.
  // Empty (the default): calls run no interceptor code at all.
  std::vector<std::shared_ptr<experimental::ClientInterceptorFactoryInterface>>
      interceptor_creators;
  // Authentication (rdmarpc/security.h). connection_credentials: the token
  // sent with every connect request (the server's ConnectionAuthenticator
  // checks it). call_credentials: metadata added to every call, before a
  // ClientContext's own credentials. Shared: they live while a channel
  // made with them does. Null (the default): none.
  std::shared_ptr<ConnectionCredentials> connection_credentials;
  std::shared_ptr<CallCredentials> call_credentials;
  // Count call metrics (rdmarpc/metrics.h): the channel runs the metrics
  // interceptor first, before interceptor_creators. On by itself for a
  // channel made while the process serves an admin endpoint
  // (rdmarpc/admin.h).
  bool enable_metrics = false;
  // Targets with a resolver (rdmarpc/resolver.h; "dns:..."): how often it
  // resolves again by itself, besides after a connection failed (then at
  // most once a second). Must be > 0 (CreateChannel: INVALID_ARGUMENT).
  absl::Duration resolver_refresh_interval = absl::Seconds(30);
  // How calls are spread over the target's servers (gRPC's policy names):
  //  "" (the default): the service config's choice (service_config_json's
  //    loadBalancingConfig or loadBalancingPolicy), else round_robin;
  //  "round_robin": each server in turn, skipping servers whose
  //    connections are failing;
  //  "pick_first": every call to the first server of the list that is not
  //    failing (the next one while it fails);
  //  "least_request": of two servers drawn at random among those not
  //    failing, the one with fewer calls in flight from this channel (the
  //    power of two choices, as Envoy's LEAST_REQUEST).
  // Another name: CreateChannel returns INVALID_ARGUMENT.
  std::string load_balancing_policy;
  // gRPC's service config as JSON (its doc/service_config.md; the channel's
  // default service config, GRPC_ARG_SERVICE_CONFIG in gRPC). Read:
  //  "methodConfig": per method ({"service": "pkg.S", "method": "M"}), per
  //    service ({"service": "pkg.S"}) or for every method ({}):
  //    "timeout" (the call's deadline is at most this after it starts) and
  //    one of gRFC A6's "retryPolicy" (maxAttempts, initialBackoff,
  //    maxBackoff, backoffMultiplier, retryableStatusCodes) or
  //    "hedgingPolicy" (maxAttempts, hedgingDelay, nonFatalStatusCodes);
  //    maxAttempts above 5 counts as 5, as in gRPC. Unary methods only: a
  //    streaming call is sent once (its transparent retry aside).
  //  "retryThrottling" (maxTokens, tokenRatio): gRPC's throttle, for the
  //    whole channel;
  //  "loadBalancingConfig" / "loadBalancingPolicy": see above.
  // Other fields are ignored, as gRPC does. A method the config does not
  // name uses its IDL options ((rdmarpc.method).retry_policy,
  // rdmarpc/options.proto). Empty (the default): no config. A config that
  // does not parse or breaks gRPC's rules: CreateChannel returns
  // INVALID_ARGUMENT naming the field ("methodConfig[0].retryPolicy.
  // maxAttempts is 1; must be 2 or more").
  std::string service_config_json;
  // False turns configured retries and hedging off for this channel
  // (gRPC's GRPC_ARG_ENABLE_RETRIES): every call is sent once, besides the
  // transparent retry of a call no server started. Timeouts still apply.
  bool enable_retries = true;
  // Largest request a retry or hedging policy applies to, in bytes (gRPC's
  // GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE and its default, 256 KiB): each
  // policy call keeps its serialised request until it ends, and a larger
  // one is sent once.
  size_t per_rpc_retry_buffer_bytes = 256 * 1024;
  // Taking servers that fail or are slow out of rotation (see
  // OutlierDetectionOptions above); off by default, as in gRPC. Invalid
  // values (interval or ejection times <= 0, a percentage outside 0..100, a
  // negative count or factor): CreateChannel returns INVALID_ARGUMENT.
  OutlierDetectionOptions outlier_detection;
};

class RDMARPC_EXPORT Channel {
 public:
  // Fails every call still in flight with CANCELLED (their callbacks run
  // before this returns), closes the connections and joins the engine
  // threads. Must not run on an engine thread, i.e. the last reference must
  // not be dropped inside a call's callback (CHECK failure). The callbacks
  // run on the engine threads while this waits for them: do not drop the
  // last reference while holding a lock those callbacks take (each would
  // wait for the lock, and this for them).
  //
  // After fork(): a child's calls on a Channel its parent made fail at once
  // with FAILED_PRECONDITION (asynchronous ones run their callback inline,
  // streams end with it), and destroying it there lets go of nothing: the
  // engines and connections stay the parent's, untouched.
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // The target this channel was created with.
  const std::string& target() const;

 private:
  friend class internal::ChannelAccess;
  friend absl::StatusOr<std::shared_ptr<Channel>> CreateChannel(absl::string_view target,
                                                                const ChannelOptions& options);
  explicit Channel(std::unique_ptr<internal::ChannelImpl> impl);

  std::unique_ptr<internal::ChannelImpl> impl_;
};

// Creates a channel to `target`: "HOST:PORT", or several comma-separated
// ("10.0.0.7:7000,10.0.0.8:7000") to spread calls round robin. HOST is an
// IPv4 address, a bracketed IPv6 address ("[::1]:7000", "[fe80::1%eth0]:7000")
// or a host name, looked up once here (its IPv4 address preferred). gRPC's
// address schemes are understood too (its doc/naming.md): "ipv4:ADDR:PORT[,...]"
// and "ipv6:[ADDR]:PORT[,...]", numeric addresses of that family. Connections are
// made lazily, on the first call to each server. With several servers, one
// whose connection failed to set up or was lost is skipped until it is back
// (unless every one is failing), and is reconnected in the background: at
// once after a loss, then after gRPC's connection backoff (1 s growing 1.6
// times per failed attempt up to 120 s, ±20 % jitter). A call no server
// started (its connection failed before sending it, or a draining server
// refused it) goes to another server by itself (gRPC's transparent retry);
// a call a server started and that then fails is retried or hedged only
// as its method's policy says (ChannelOptions::service_config_json, the
// IDL's (rdmarpc.method) options).
//
// Returns INVALID_ARGUMENT when `target` or `options` is malformed (the message
// names the bad part), UNAVAILABLE when no RDMA provider can be opened.
RDMARPC_EXPORT absl::StatusOr<std::shared_ptr<Channel>> CreateChannel(
    absl::string_view target, const ChannelOptions& options);
inline absl::StatusOr<std::shared_ptr<Channel>> CreateChannel(absl::string_view target) {
  return CreateChannel(target, ChannelOptions());
}

}  // namespace rdmarpc

#endif  // RDMARPC_CHANNEL_H_
