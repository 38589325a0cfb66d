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
  // peers could each wait for the other's credit.
  int recv_depth = 64;
  // Time allowed to set up one connection (address and route resolution,
  // connect, handshake). A call fails with UNAVAILABLE when it runs out.
  // Must be > 0 (CreateChannel: INVALID_ARGUMENT otherwise).
  absl::Duration connect_timeout = absl::Seconds(5);
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
  //  "round_robin" (the default): each server in turn, skipping servers
  //    whose connections are failing;
  //  "pick_first": every call to the first server of the list that is not
  //    failing (the next one while it fails);
  //  "least_request": of two servers drawn at random among those not
  //    failing, the one with fewer calls in flight from this channel (the
  //    power of two choices, as Envoy's LEAST_REQUEST).
  // Another name: CreateChannel returns INVALID_ARGUMENT.
  std::string load_balancing_policy = "round_robin";
};

class RDMARPC_EXPORT Channel {
 public:
  // Fails every call still in flight with CANCELLED (their callbacks run
  // before this returns), closes the connections and joins the engine
  // threads. Must not run on an engine thread, i.e. the last reference must
  // not be dropped inside a call's callback (CHECK failure).
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
// times per failed attempt up to 120 s, ±20 % jitter). A call already sent
// to a server that goes away fails UNAVAILABLE; it is not retried.
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
