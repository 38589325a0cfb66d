// rdmarpc/metrics.h: Prometheus metrics of calls and of the RDMA transport.
//
//   rdmarpc::ServerOptions so;
//   so.enable_metrics = true;             // or serve an admin endpoint
//   rdmarpc::Server server(so);
//   ...
//   std::string body = rdmarpc::RenderMetricsText();   // what GET /metrics returns
//
// Call metrics carry the names and labels of the gRPC ecosystem's
// Prometheus interceptors (github.com/grpc-ecosystem/go-grpc-prometheus), so
// dashboards and alerts written for gRPC services work unchanged:
//
//   grpc_server_started_total{grpc_service, grpc_method, grpc_type}
//   grpc_server_handled_total{grpc_service, grpc_method, grpc_type, grpc_code}
//   grpc_server_msg_received_total{grpc_service, grpc_method, grpc_type}
//   grpc_server_msg_sent_total{grpc_service, grpc_method, grpc_type}
//   grpc_server_handling_seconds{grpc_service, grpc_method, grpc_type} (histogram)
//   grpc_client_started_total, grpc_client_handled_total,
//   grpc_client_msg_received_total, grpc_client_msg_sent_total,
//   grpc_client_handling_seconds: the same, seen from a channel.
//
// grpc_service is the full service name ("echo.EchoService"), grpc_method
// the method's ("Echo"), grpc_type one of unary, client_stream,
// server_stream, bidi_stream, and grpc_code the status code as gRPC-Go
// spells it (OK, Canceled, Unknown, InvalidArgument, DeadlineExceeded,
// NotFound, AlreadyExists, PermissionDenied, ResourceExhausted,
// FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal,
// Unavailable, DataLoss, Unauthenticated). A server's registered methods
// show from Start with every code at 0 (as go-grpc-prometheus'
// InitializeMetrics does); a client's from its first call. The handling
// histogram's buckets, in seconds, are 1e-05 2.5e-05 5e-05 0.0001 0.00025
// 0.0005 0.001 0.0025 then Prometheus' default buckets 0.005 ... 10 (so a
// query on any default `le` works), and +Inf; a server's handling time runs
// from the handler's start to its status, a client's from the call's start
// to its status. At most 4096 methods are counted per side (a client of a
// GenericStub fed user input could name any number); calls of any further
// method count under grpc_service="rdmarpc.metrics.Overflow",
// grpc_method="other".
//
// Calls are counted by an interceptor (rdmarpc/interceptor.h) that a
// server or channel runs first (outermost, so it sees the final status of
// every call the others pass or fail): ServerOptions::enable_metrics /
// ChannelOptions::enable_metrics, on by themselves in a process that
// serves an admin endpoint (rdmarpc/admin.h). A server's calls refused
// before a handler was to run (unknown method, shutting down) run no
// interceptor and are not counted.
//
// Transport metrics are counted by each completion engine (a server worker,
// a channel's loop) on its own and summed when read, so no message touches a
// counter another thread writes. They are always on:
//
//   rdmarpc_connections{state}                  gauge: live connections by
//       handshake state (resolving_addr, resolving_route, connecting,
//       accepting, established, closing)
//   rdmarpc_connections_established_total, rdmarpc_connections_closed_total
//   rdmarpc_work_requests_posted_total{opcode}  send, send_with_imm,
//       rdma_write, rdma_write_with_imm, rdma_read, recv, bind_mw and
//       local_inv (a memory window bound for a large message and
//       invalidated after it; README "What a peer can reach")
//   rdmarpc_signalled_send_work_requests_total, rdmarpc_inline_send_work_requests_total
//   rdmarpc_doorbells_total{queue}              ibv_post_send (send) and
//       ibv_post_recv (recv) calls
//   rdmarpc_completions_total{queue}            work completions polled
//   rdmarpc_work_completion_errors_total{status}  by ibv_wc_status without
//       IBV_WC_ (RETRY_EXC_ERR, REM_ACCESS_ERR, ...); only statuses seen
//   rdmarpc_work_completions_flushed_total      IBV_WC_WR_FLUSH_ERR: what every
//       close flushes (the receives it had posted), not a fault
//   rdmarpc_rnr_retries_total                   softrdma only (a NIC retries
//       RNR in hardware, out of rdmarpc's sight)
//   rdmarpc_credit_stalls_total, rdmarpc_credit_stall_seconds_total
//       times a connection had messages queued and no credit, and how long
//   rdmarpc_rendezvous_transfers_total{direction}, rdmarpc_rendezvous_bytes_total{direction}
//       large messages pulled by RDMA READ (read) or pushed by RDMA WRITE (write)
//   rdmarpc_payload_bytes_copied_total          bytes the runtime memcpy'd
//   rdmarpc_keepalive_probes_total
//   rdmarpc_registered_memory_bytes, rdmarpc_memory_regions   gauges
//   rdmarpc_buffer_pool_bytes{pool="large",state="in_use"|"free"}  gauge
//   rdmarpc_send_buffers{state="in_use"|"free"}  gauge: eager send buffers
//   rdmarpc_engines                              gauge: engines running
#ifndef RDMARPC_METRICS_H_
#define RDMARPC_METRICS_H_

#include <memory>
#include <string>

#include "rdmarpc/export.h"
#include "rdmarpc/interceptor.h"

namespace rdmarpc {

// The Content-Type of RenderMetricsText's output (Prometheus text
// exposition format 0.0.4).
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Every metric of this process in Prometheus' text exposition format
// (https://prometheus.io/docs/instrumenting/exposition_formats/): the call
// metrics above, then the transport's. Any thread; a snapshot of each
// counter, not a consistent cut across them (as any Prometheus client).
RDMARPC_EXPORT std::string RenderMetricsText();

// The interceptor factories enable_metrics installs, for a user who builds
// the interceptor list by hand (put it first). They count into this
// process's one registry, so any number of servers and channels may share
// them. Any thread.
RDMARPC_EXPORT std::shared_ptr<experimental::ServerInterceptorFactoryInterface>
ServerMetricsInterceptorFactory();
RDMARPC_EXPORT std::shared_ptr<experimental::ClientInterceptorFactoryInterface>
ClientMetricsInterceptorFactory();

}  // namespace rdmarpc

#endif  // RDMARPC_METRICS_H_
