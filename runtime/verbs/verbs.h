// verbs.h: the one table of libibverbs / librdmacm control-plane entry points
// the runtime uses, bound once at start either to rdma-core or to softrdma.
//
// Why a table: the same binary must run on a host with a real RDMA NIC
// (rdma-core) and on CI machines without one (softrdma). The control plane
// (devices, PDs, MRs, CQs, QPs, rdma_cm) goes through this table; the data
// path (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) stays
// the ordinary verbs.h inlines, which dispatch through the objects' own
// context ops, so there is no table lookup or virtual call per message.
//
// The provider is chosen by --rdmarpc_provider=auto|rdma-core|soft; the
// environment variable RDMARPC_PROVIDER sets the default. `auto` takes
// rdma-core when ibv_get_device_list finds a device, softrdma otherwise.
//
// Thread safety: Verbs() may be called from any thread; the choice is made on
// the first call and never changes.
#ifndef RDMARPC_RUNTIME_VERBS_VERBS_H_
#define RDMARPC_RUNTIME_VERBS_VERBS_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmarpc {
namespace internal {

struct VerbsApi {
  const char* provider_name;  // "rdma-core" or "soft"

  // Devices.
  ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(ibv_device** list);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);

  // Protection domains and memory regions.
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);

  // Completion queues.
  ibv_comp_channel* (*create_comp_channel)(ibv_context* context);
  int (*destroy_comp_channel)(ibv_comp_channel* channel);
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context,
                       ibv_comp_channel* channel, int comp_vector);
  int (*destroy_cq)(ibv_cq* cq);
  int (*resize_cq)(ibv_cq* cq, int cqe);  // ibv_resize_cq: 0 or an errno value
  int (*get_cq_event)(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
  void (*ack_cq_events)(ibv_cq* cq, unsigned int nevents);

  // rdma_cm.
  rdma_event_channel* (*create_event_channel)();
  void (*destroy_event_channel)(rdma_event_channel* channel);
  int (*create_id)(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   rdma_port_space ps);
  int (*destroy_id)(rdma_cm_id* id);
  int (*bind_addr)(rdma_cm_id* id, sockaddr* addr);
  int (*listen)(rdma_cm_id* id, int backlog);
  int (*resolve_addr)(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int timeout_ms);
  int (*resolve_route)(rdma_cm_id* id, int timeout_ms);
  int (*create_qp)(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr);
  void (*destroy_qp)(rdma_cm_id* id);
  int (*connect)(rdma_cm_id* id, rdma_conn_param* param);
  int (*accept)(rdma_cm_id* id, rdma_conn_param* param);
  int (*reject)(rdma_cm_id* id, const void* private_data, uint8_t private_data_len);
  int (*disconnect)(rdma_cm_id* id);
  int (*get_cm_event)(rdma_event_channel* channel, rdma_cm_event** event);
  int (*ack_cm_event)(rdma_cm_event* event);
  int (*migrate_id)(rdma_cm_id* id, rdma_event_channel* channel);
  uint16_t (*get_src_port)(rdma_cm_id* id);
  uint16_t (*get_dst_port)(rdma_cm_id* id);
  sockaddr* (*get_peer_addr)(rdma_cm_id* id);

  // SRQs, async events, QP state, QPs without rdma_cm: for the conformance
  // tests (ibv_post_srq_recv is a verbs.h inline; query_qp
  // reports the caps the provider granted). Memory windows need no entries: ibv_alloc_mw,
  // ibv_bind_mw and ibv_dealloc_mw are verbs.h inlines through context ops.
  int (*get_async_event)(ibv_context* context, ibv_async_event* event);
  void (*ack_async_event)(ibv_async_event* event);
  ibv_srq* (*create_srq)(ibv_pd* pd, ibv_srq_init_attr* attr);
  int (*modify_srq)(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask);
  int (*query_srq)(ibv_srq* srq, ibv_srq_attr* attr);
  int (*destroy_srq)(ibv_srq* srq);
  ibv_qp* (*create_verbs_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);  // ibv_create_qp
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
  int (*query_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
  int (*destroy_verbs_qp)(ibv_qp* qp);  // ibv_destroy_qp
};

// The table for this process, chosen on first use (see file comment).
const VerbsApi& Verbs();

// The bindings themselves, for tests.
const VerbsApi& RdmaCoreVerbs();
const VerbsApi& SoftVerbs();

// Picks a provider by name: "rdma-core", "soft", or "auto" (probe rdma-core for
// a device). INVALID_ARGUMENT for any other name.
absl::StatusOr<const VerbsApi*> SelectProvider(absl::string_view name);

// errno → Status naming the call: "rdma_connect: Connection refused".
// ENOMEM→RESOURCE_EXHAUSTED, ECONNREFUSED/ETIMEDOUT/ENETUNREACH/EHOSTUNREACH/
// ECONNRESET/ENODEV→UNAVAILABLE, EINVAL→INVALID_ARGUMENT, EPERM/EACCES→
// PERMISSION_DENIED, EEXIST/EADDRINUSE→ALREADY_EXISTS, ENOSYS/EOPNOTSUPP→
// UNIMPLEMENTED, anything else→INTERNAL.
absl::Status ErrnoToStatus(absl::string_view call, int err);
absl::StatusCode ErrnoToCode(int err);

// --- RAII owners (move-only). Each destroys its object through Verbs(). -----
struct PdDeleter { void operator()(ibv_pd* p) const; };
struct MrDeleter { void operator()(ibv_mr* p) const; };
struct CqDeleter { void operator()(ibv_cq* p) const; };
struct CompChannelDeleter { void operator()(ibv_comp_channel* p) const; };
struct EventChannelDeleter { void operator()(rdma_event_channel* p) const; };
struct CmIdDeleter { void operator()(rdma_cm_id* p) const; };
struct TdDeleter { void operator()(ibv_td* p) const; };

using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using EventChannelPtr = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using TdPtr = std::unique_ptr<ibv_td, TdDeleter>;

// The QP of a cm id (rdma_create_qp / rdma_destroy_qp). Does not own the id;
// destroy it before the id.
class QpOwner {
 public:
  QpOwner() = default;
  explicit QpOwner(rdma_cm_id* id) : id_(id) {}
  QpOwner(QpOwner&& o) noexcept : id_(o.id_) { o.id_ = nullptr; }
  QpOwner& operator=(QpOwner&& o) noexcept;
  QpOwner(const QpOwner&) = delete;
  QpOwner& operator=(const QpOwner&) = delete;
  ~QpOwner() { reset(); }
  void reset();
  ibv_qp* get() const { return id_ == nullptr ? nullptr : id_->qp; }
  explicit operator bool() const { return id_ != nullptr; }

 private:
  rdma_cm_id* id_ = nullptr;
};

// Factories: each failure names the call and the errno text.
absl::StatusOr<PdPtr> AllocPd(ibv_context* context);
// ENOMEM/EPERM add the RLIMIT_MEMLOCK in force to the message, the usual cause.
absl::StatusOr<MrPtr> RegisterMemory(ibv_pd* pd, void* addr, size_t length, int access);
// Memory this process holds registered through RegisterMemory now (MRs not
// yet deregistered): bytes and regions. Any thread; registration is the
// control plane, so these are plain shared atomics.
struct RegisteredMemory {
  int64_t bytes = 0;
  int64_t regions = 0;
};
RegisteredMemory GetRegisteredMemory();
// RNR retries the provider counts for this process (softrdma: a SEND that
// found no receive posted), or -1 where it keeps no such count (rdma-core:
// the NIC retries in hardware; its port counters are per device, not per
// process).
int64_t ProviderRnrRetries();
absl::StatusOr<CompChannelPtr> CreateCompChannel(ibv_context* context);
absl::StatusOr<CqPtr> CreateCq(ibv_context* context, int cqe, ibv_comp_channel* channel);
// A thread domain (ibv_alloc_td) on `context` and a parent domain over `pd`
// naming it: objects made on the parent domain (QPs, SRQs, and a CQ made by
// CreateSingleThreadedCq) are promised to be used by one thread at a time,
// so the provider takes no lock per work request (mlx5; softrdma, see
// softrdma.h). The parent domain stands for `pd` in every access check and
// must be freed before the thread domain and before `pd` (declare the
// TdPtr first). UNIMPLEMENTED (EOPNOTSUPP) where the provider has no
// thread domains (rxe, older devices): use `pd` itself then; other codes
// from the errno of ibv_alloc_td / ibv_alloc_parent_domain.
struct ThreadDomain {
  TdPtr td;
  PdPtr parent;
};
absl::StatusOr<ThreadDomain> AllocThreadDomain(ibv_pd* pd);
// A CQ of `cqe` entries made single-threaded on `parent` (a parent domain
// from AllocThreadDomain) with ibv_create_cq_ex; polled and freed like any
// other (ibv_poll_cq, CqPtr). Codes from the errno of ibv_create_cq_ex.
absl::StatusOr<CqPtr> CreateSingleThreadedCq(ibv_pd* parent, int cqe, ibv_comp_channel* channel);
absl::StatusOr<EventChannelPtr> CreateEventChannel();
absl::StatusOr<CmIdPtr> CreateCmId(rdma_event_channel* channel, void* context);
absl::StatusOr<QpOwner> CreateQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr);

// "RLIMIT_MEMLOCK is 64 KiB" / "RLIMIT_MEMLOCK is unlimited".
std::string MemlockLimitText();

}  // namespace internal
}  // namespace rdmarpc

#endif  // RDMARPC_RUNTIME_VERBS_VERBS_H_
