// rdmarpc/server.h: serves registered services over RDMA RC connections.
//
//   EchoServiceImpl service;             // derives from EchoService::Service
//   rdmarpc::Server server;
//   server.AddService(&service);
//   absl::Status s = server.Start("0.0.0.0:7000");
//   ...
//   server.Shutdown();                   // stop accepting, drain, disconnect
//   server.Wait();
//
// The server listens with rdma_cm. Each worker thread owns a completion queue
// and the connections assigned to it. Handlers run on a handler pool
// (ServerOptions::handler_threads), never on a thread that polls a
// completion queue, so a slow handler delays no other call; a method marked
// `option (rdmarpc.method).run_inline = true` (rdmarpc/options.proto) runs
// on its worker instead, for handlers that never block. A reply is posted
// as soon as its handler returns.
//
// Thread safety: AddService before Start, from one thread. Shutdown and Wait
// may be called from any thread, once Start returned OK; GetServiceNames
// from any thread at any time.
#ifndef RDMARPC_SERVER_H_
#define RDMARPC_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/export.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/security.h"

namespace rdmarpc {

class Service;
namespace internal {
class ServerImpl;
}  // namespace internal

struct RDMARPC_EXPORT ServerOptions {
  // Worker threads, each owning one completion queue.
  int num_workers = 2;
  // Largest encoded message sent eagerly, in bytes (see ChannelOptions).
  size_t eager_limit_bytes = 8 * 1024;
  // Size of each pre-posted receive buffer, in bytes. Advertised to clients
  // in the rdma_cm private data; they never SEND more than this. At least
  // eager_limit_bytes is typical; smaller forces rendezvous above it.
  size_t recv_buffer_bytes = 8 * 1024;
  // Receive buffers pre-posted per connection (= credits granted to a
  // client). Accepted range 2..65535; 2 is raised to 3 (see ChannelOptions).
  // With a shared receive queue: the most credits one client connection
  // may hold.
  int recv_depth = 64;
  // Where a worker's receive buffers come from.
  //  * kShared (the default): one shared receive queue (SRQ) per worker
  //    serves all its connections. Receive memory grows with workers, not
  //    connections: srq_shared_buffers per worker plus srq_min_credits per
  //    connection, registered in whole slabs of 256 buffers (at the
  //    defaults 6 MiB per worker for its first connections, then 32 KiB
  //    per connection, against 512 KiB per connection with
  //    kPerConnection; the smallest queue is one slab, 2 MiB of 8 KiB
  //    buffers). The default was chosen from measurements (bench/
  //    HISTORY.md, the part on shared receive queues and memory per
  //    connection): far less memory per connection, the same call rate
  //    within the noise.
  //    Every connection is always granted srq_min_credits credits; a
  //    client that sends more gets a share of the shared buffers (at most
  //    recv_depth, and at most an equal part of them among the
  //    connections asking for more), so no client can take all receives,
  //    and one that spent its share waits for credits, not on RNR. Credits
  //    a connection holds when it goes idle are not taken back until it
  //    sends again (that would need a revoke message). Each SRQ holds at
  //    most the device's max_srq_wr receives rounded down to whole slabs
  //    (32512 on softrdma and ConnectX-5/6, whose max_srq_wr is 32767), so
  //    a worker takes at most (32512 - srq_shared_buffers) /
  //    srq_min_credits connections (8,000 at the defaults; its completion
  //    queue grows to the device's max_cqe, ~16,000; WORKSPACE.notes);
  //    more are rejected RESOURCE_EXHAUSTED naming the numbers: raise
  //    num_workers (or lower the two srq_ options). Values of those two
  //    past what one SRQ holds are accepted by Start but refuse every
  //    connection the same way.
  //    On a device without SRQs each connection gets a ring of its own, as
  //    kPerConnection, with a warning logged once.
  //  * kPerConnection: each connection pre-posts recv_depth buffers of its
  //    own (its client starts with recv_depth credits).
  // Both speak the same protocol to every client.
  enum class ReceiveQueue { kShared, kPerConnection };
  ReceiveQueue receive_queue = ReceiveQueue::kShared;
  // kShared: credits every connection is granted (and starts with).
  // Accepted range 3..65535 (Start: INVALID_ARGUMENT naming it otherwise;
  // checked only with kShared); above recv_depth it is recv_depth (at
  // least 3).
  int srq_min_credits = 4;
  // kShared: buffers each worker's SRQ shares beyond the connections'
  // minimum. Accepted range 1..65535 (Start: INVALID_ARGUMENT naming it
  // otherwise; checked only with kShared).
  int srq_shared_buffers = 512;
  // Largest request or response, in bytes; larger fail RESOURCE_EXHAUSTED.
  // At most kMaxProtobufMessageBytes (rdmarpc/channel.h; Start:
  // INVALID_ARGUMENT above).
  size_t max_message_bytes = 64 * 1024 * 1024;
  // Largest client metadata of one call (keys and values), in bytes; a call
  // with more fails RESOURCE_EXHAUSTED naming both sizes. gRPC's default.
  size_t max_metadata_bytes = 8 * 1024;
  // Calls and streams one client connection may have in progress at once,
  // as HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (gRPC's
  // GRPC_ARG_MAX_CONCURRENT_STREAMS): a call over it fails at once with
  // RESOURCE_EXHAUSTED naming both counts (retry after others finished);
  // the connection and its other calls carry on. It counts the calls
  // waiting for or running on the handler pool, callback calls and
  // streams; a run_inline unary call that runs on the worker ends before
  // the worker reads the connection's next message and never counts (one
  // whose request is too large to run inline goes to the pool and does).
  // 0: no cap; negative: Start fails INVALID_ARGUMENT. Unlike gRPC
  // (no cap by default; an HTTP/2 client queues streams over the peer's
  // limit), rdmarpc caps by default and answers at once: every call in
  // progress holds server memory (a request, a context, maybe a pulled
  // large buffer), and one client connection must not take it all.
  int max_concurrent_streams = 4096;
  // Most registered memory the server exposes to one client connection at
  // once, in bytes: large responses and stream messages the client has not
  // pulled yet. A response that would pass it ends its call with
  // RESOURCE_EXHAUSTED naming the sizes, a stream message its stream; the
  // connection and its other calls carry on. It keeps a client that never
  // pulls from holding the whole large_buffer_pool_bytes. 0 (the default):
  // max(large_buffer_pool_bytes / 2, 2 × max_message_bytes + 1 MiB).
  size_t max_exposed_bytes_per_connection = 0;
  // Threads running synchronous handlers, kept even when idle; 0 = one per
  // hardware thread (std::thread::hardware_concurrency()). Handlers of
  // run_inline methods run on the workers instead.
  int handler_threads = 0;
  // The handler pool grows up to this many threads while every thread is
  // busy (blocking handlers do not wait for each other), and shrinks back
  // after 10 s without work; 0 = max(handler_threads, 256). Calls beyond it
  // wait for a free thread. Start: INVALID_ARGUMENT when below
  // handler_threads.
  int max_handler_threads = 0;
  // Registered memory the server may hold for large messages, in bytes.
  // Start fails with RESOURCE_EXHAUSTED when it cannot be registered.
  // Received attachments (rdmarpc/buffer.h) count while their call runs;
  // the bytes of one a handler keeps past its call stop counting until it
  // is dropped.
  size_t large_buffer_pool_bytes = 256 * 1024 * 1024;
  // Server interceptors (rdmarpc/interceptor.h), outermost first: each
  // factory makes one interceptor per call, right before its handler is to
  // run (calls answered before that, such as an unknown method or one
  // refused by Shutdown, make none). Shared: a factory lives while the
  // server does. Empty (the default): calls run no interceptor code.
  std::vector<std::shared_ptr<experimental::ServerInterceptorFactoryInterface>>
      interceptor_creators;
  // Authentication (rdmarpc/security.h). connection_authenticator checks
  // each connect request's token before anything is created or registered
  // for it; auth_metadata_processor checks each call's metadata before the
  // handler and interceptor_creators run (Start puts it in
  // interceptor_creators, after the metrics interceptor). Shared: they live
  // while the server does. Null (the default): every connection and call is
  // let in.
  std::shared_ptr<ConnectionAuthenticator> connection_authenticator;
  std::shared_ptr<AuthMetadataProcessor> auth_metadata_processor;
  // Count call metrics (rdmarpc/metrics.h): Start puts the metrics
  // interceptor first in interceptor_creators. On by itself when the server
  // serves an admin endpoint, or one runs in the process.
  bool enable_metrics = false;
  // HOST:PORT of the admin HTTP endpoint to serve (rdmarpc/admin.h): GET
  // /metrics, /statusz, /healthz. Empty (the default): the value of
  // --rdmarpc_admin_listen, and none when that is empty too. Start fails
  // INVALID_ARGUMENT when it does not parse, UNAVAILABLE when it cannot be
  // bound.
  std::string admin_listen;
  // Registration for discovery: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX".
  // Once listening, Start puts the key PREFIX/ADDRESS (value ADDRESS) in
  // etcd under a lease of register_ttl that it keeps alive (every ttl/3);
  // Shutdown revokes the lease before it drains, and a server that dies
  // leaves when the lease expires. Channels to the same etcd:// target find
  // it (rdmarpc/resolver.h). ADDRESS is register_address, or the address
  // bound (Server::address()). Start fails INVALID_ARGUMENT for a malformed
  // target or a wildcard address to register ([::], 0.0.0.0: set
  // register_address), UNAVAILABLE when etcd does not answer (the server
  // is then not left running). Empty (the default): no registration.
  std::string register_target;
  absl::Duration register_ttl = absl::Seconds(10);
  std::string register_address;
};

class RDMARPC_EXPORT Server {
 public:
  explicit Server(const ServerOptions& options = ServerOptions());
  // Shutdown() and Wait() if still running. In a child of fork(), a Server
  // its parent made does nothing at all: Start fails FAILED_PRECONDITION,
  // Shutdown and Wait return at once, and destroying it sends nothing to
  // the parent's clients (no GOAWAY, no disconnect).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Registers `service`; not owned, it must outlive the server.
  // Returns ALREADY_EXISTS for a second service of the same full name,
  // FAILED_PRECONDITION after Start.
  absl::Status AddService(Service* service);

  // The full names ("package.Service") of every service registered so far,
  // sorted, each once: what grpc.reflection's list_services answers, and
  // what gRPC's ServerInitializer::GetServiceList gives its plugins. The
  // set is fixed once Start returned. Any thread, at any time; takes the
  // server's lock briefly, never blocks on calls.
  std::vector<std::string> GetServiceNames() const;

  // Binds and listens on `listen_address` and starts the worker threads.
  // The address is "HOST:PORT": an IPv4 address, a bracketed IPv6 address
  // ("[::1]:7000"; "[::]:PORT" listens on every address, IPv4 ones too) or a
  // host name; port 0 picks a free port (see port()).
  // Returns INVALID_ARGUMENT for a malformed address, UNAVAILABLE when the
  // address cannot be bound or no RDMA device can be opened,
  // RESOURCE_EXHAUSTED when buffers cannot be registered (RLIMIT_MEMLOCK),
  // FAILED_PRECONDITION when already started.
  absl::Status Start(absl::string_view listen_address);

  // The port actually bound (after Start).
  int port() const;
  // The address bound, with the port chosen: "127.0.0.1:7000",
  // "[::1]:7000" (a host name given to Start appears as the address it
  // resolved to). Empty before Start. Call after Start returned.
  const std::string& address() const;

  // Stops the server; every call it accepted gets exactly one answer:
  //  0. new connections are refused, and every client is told the server is
  //     draining (a GOAWAY frame, as HTTP/2's): it starts no new call on its
  //     connections here and answers once it will send none; calls arriving
  //     until then run as usual. At most 1 s (and `grace`) for the answers;
  //  1. then no new handler starts: calls arriving or still queued for the
  //     handler pool are answered UNAVAILABLE without running, marked as not
  //     started, so an rdmarpc channel with another server sends them there
  //     (a transparent retry: unary calls whose request it still holds, i.e.
  //     blocking calls and requests up to 256 KiB) and its caller sees no
  //     error;
  //  2. handlers already running may finish within `grace`; each reply is
  //     delivered as its handler returns;
  //  3. handlers still running then are cancelled: their clients get
  //     UNAVAILABLE now, their ServerContext::IsCancelled() turns true and
  //     their on-cancel callbacks run; Shutdown waits for them to return (a
  //     handler that ignores IsCancelled() holds it up, and is logged by
  //     method name every second);
  //  4. then every client is disconnected and the threads are joined.
  // Returns as soon as that is done. Only the first call does this; a later
  // (or concurrent) one returns at once (use Wait to wait). Must not be called from a
  // service method or an inline handler: it joins the threads (CHECK
  // failure).
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  // Blocks until Shutdown has completed.
  void Wait();

 private:
  std::unique_ptr<internal::ServerImpl> impl_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVER_H_
