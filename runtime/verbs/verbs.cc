// verbs.cc: binds the verbs table to rdma-core or softrdma, once.
#include "runtime/verbs/verbs.h"

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "runtime/softrdma/softrdma.h"

namespace {
const char* DefaultProvider() {
  const char* env = std::getenv("RDMARPC_PROVIDER");
  return env != nullptr && env[0] != '\0' ? env : "auto";
}
}  // namespace

DEFINE_string(rdmarpc_provider, DefaultProvider(),
              "RDMA provider: auto (rdma-core if a device exists, else softrdma), "
              "rdma-core, or soft. Default from $RDMARPC_PROVIDER.");

namespace {
// A mistyped provider on the command line stops the program at flag parsing
// (gflags prints the message) rather than silently running on another device.
bool ValidateProvider(const char* flag, const std::string& value) {
  if (value == "auto" || value == "rdma-core" || value == "soft") return true;
  std::fprintf(stderr, "--%s=%s is not one of auto, rdma-core, soft\n", flag, value.c_str());
  return false;
}
[[maybe_unused]] const bool provider_validator_registered =
    gflags::RegisterFlagValidator(&FLAGS_rdmarpc_provider, &ValidateProvider);
}  // namespace

namespace rdmarpc {
namespace internal {

const VerbsApi& RdmaCoreVerbs() {
  // ibv_get_device_list, ibv_reg_mr and ibv_query_port are function-like
  // macros in verbs.h; `(&::name)` takes the real exported function.
  static const VerbsApi api = {
      "rdma-core",
      (&::ibv_get_device_list),
      &::ibv_free_device_list,
      &::ibv_open_device,
      &::ibv_close_device,
      (&::ibv_query_device),
      &::ibv_alloc_pd,
      &::ibv_dealloc_pd,
      (&::ibv_reg_mr),
      &::ibv_dereg_mr,
      &::ibv_create_comp_channel,
      &::ibv_destroy_comp_channel,
      &::ibv_create_cq,
      &::ibv_destroy_cq,
      &::ibv_resize_cq,
      &::ibv_get_cq_event,
      &::ibv_ack_cq_events,
      &::rdma_create_event_channel,
      &::rdma_destroy_event_channel,
      &::rdma_create_id,
      &::rdma_destroy_id,
      &::rdma_bind_addr,
      &::rdma_listen,
      &::rdma_resolve_addr,
      &::rdma_resolve_route,
      &::rdma_create_qp,
      &::rdma_destroy_qp,
      &::rdma_connect,
      &::rdma_accept,
      &::rdma_reject,
      &::rdma_disconnect,
      &::rdma_get_cm_event,
      &::rdma_ack_cm_event,
      &::rdma_migrate_id,
      &::rdma_get_src_port,
      &::rdma_get_dst_port,
      &::rdma_get_peer_addr,
      &::ibv_get_async_event,
      &::ibv_ack_async_event,
      &::ibv_create_srq,
      &::ibv_modify_srq,
      &::ibv_query_srq,
      &::ibv_destroy_srq,
      &::ibv_create_qp,
      &::ibv_modify_qp,
      &::ibv_query_qp,
      &::ibv_destroy_qp,
  };
  return api;
}

const VerbsApi& SoftVerbs() {
  static const VerbsApi api = {
      "soft",
      &softrdma::get_device_list,
      &softrdma::free_device_list,
      &softrdma::open_device,
      &softrdma::close_device,
      &softrdma::query_device,
      &softrdma::alloc_pd,
      &softrdma::dealloc_pd,
      &softrdma::reg_mr,
      &softrdma::dereg_mr,
      &softrdma::create_comp_channel,
      &softrdma::destroy_comp_channel,
      &softrdma::create_cq,
      &softrdma::destroy_cq,
      &softrdma::resize_cq,
      &softrdma::get_cq_event,
      &softrdma::ack_cq_events,
      &softrdma::create_event_channel,
      &softrdma::destroy_event_channel,
      &softrdma::create_id,
      &softrdma::destroy_id,
      &softrdma::bind_addr,
      &softrdma::listen,
      &softrdma::resolve_addr,
      &softrdma::resolve_route,
      static_cast<int (*)(rdma_cm_id*, ibv_pd*, ibv_qp_init_attr*)>(&softrdma::create_qp),
      static_cast<void (*)(rdma_cm_id*)>(&softrdma::destroy_qp),
      &softrdma::connect,
      &softrdma::accept,
      &softrdma::reject,
      &softrdma::disconnect,
      &softrdma::get_cm_event,
      &softrdma::ack_cm_event,
      &softrdma::migrate_id,
      &softrdma::get_src_port,
      &softrdma::get_dst_port,
      &softrdma::get_peer_addr,
      &softrdma::get_async_event,
      &softrdma::ack_async_event,
      &softrdma::create_srq,
      &softrdma::modify_srq,
      &softrdma::query_srq,
      &softrdma::destroy_srq,
      static_cast<ibv_qp* (*)(ibv_pd*, ibv_qp_init_attr*)>(&softrdma::create_qp),
      &softrdma::modify_qp,
      &softrdma::query_qp,
      static_cast<int (*)(ibv_qp*)>(&softrdma::destroy_qp),
  };
  return api;
}

absl::StatusOr<const VerbsApi*> SelectProvider(absl::string_view name) {
  if (name == "rdma-core") return &RdmaCoreVerbs();
  if (name == "soft") return &SoftVerbs();
  if (name != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdmarpc_provider (or $RDMARPC_PROVIDER) is \"", name,
        "\", not one of auto, rdma-core, soft"));
  }
  int num = 0;
  ibv_device** list = ::ibv_get_device_list(&num);
  if (list != nullptr) ::ibv_free_device_list(list);
  if (list != nullptr && num > 0) {
    LOG(INFO) << "rdmarpc: provider auto -> rdma-core (" << num << " RDMA device(s) found)";
    return &RdmaCoreVerbs();
  }
  LOG(INFO) << "rdmarpc: provider auto -> softrdma (no RDMA device found by rdma-core)";
  return &SoftVerbs();
}

const VerbsApi& Verbs() {
  static const VerbsApi* const api = [] {
    absl::StatusOr<const VerbsApi*> chosen = SelectProvider(FLAGS_rdmarpc_provider);
    if (!chosen.ok()) {
      LOG(ERROR) << chosen.status() << "; using auto";
      chosen = SelectProvider("auto");
    }
    if (*chosen == &RdmaCoreVerbs()) {
      // Registered memory stays out of forked children (MADV_DONTFORK per
      // region), so a child's copy-on-write never moves a page a NIC is
      // reading or writing for the parent (ibv_fork_init(3)). Before any
      // registration; kernels with copy-on-fork for pinned pages need none.
      if (int rc = ::ibv_fork_init(); rc != 0) {
        LOG(WARNING) << "rdmarpc: ibv_fork_init failed (" << rc
                     << "); a fork() while connections are open may corrupt their memory";
      }
    }
    return *chosen;
  }();
  return *api;
}

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case ENOMEM:
    case ENOBUFS:
    case ENOSPC:
      return absl::StatusCode::kResourceExhausted;
    case ECONNREFUSED:
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ECONNRESET:
    case ECONNABORTED:
    case ENODEV:
    case EADDRNOTAVAIL:
      return absl::StatusCode::kUnavailable;
    case EINVAL:
      return absl::StatusCode::kInvalidArgument;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    case EAGAIN:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoToStatus(absl::string_view call, int err) {
  return absl::Status(ErrnoToCode(err), absl::StrCat(call, ": ", std::strerror(err)));
}

std::string MemlockLimitText() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return "RLIMIT_MEMLOCK unknown";
  if (lim.rlim_cur == RLIM_INFINITY) return "RLIMIT_MEMLOCK is unlimited";
  return absl::StrCat("RLIMIT_MEMLOCK is ", lim.rlim_cur / 1024, " KiB");
}

void PdDeleter::operator()(ibv_pd* p) const {
  if (int rc = Verbs().dealloc_pd(p); rc != 0) LOG(ERROR) << ErrnoToStatus("ibv_dealloc_pd", rc);
}
namespace {
// Memory registered through RegisterMemory and not yet deregistered.
std::atomic<int64_t> g_registered_bytes{0};
std::atomic<int64_t> g_registered_regions{0};
}  // namespace

RegisteredMemory GetRegisteredMemory() {
  return {g_registered_bytes.load(std::memory_order_relaxed),
          g_registered_regions.load(std::memory_order_relaxed)};
}

int64_t ProviderRnrRetries() {
  if (std::strcmp(Verbs().provider_name, "soft") != 0) return -1;
  return static_cast<int64_t>(softrdma::GetStats().rnr_retries);
}

void MrDeleter::operator()(ibv_mr* p) const {
  g_registered_bytes.fetch_sub(static_cast<int64_t>(p->length), std::memory_order_relaxed);
  g_registered_regions.fetch_sub(1, std::memory_order_relaxed);
  if (int rc = Verbs().dereg_mr(p); rc != 0) LOG(ERROR) << ErrnoToStatus("ibv_dereg_mr", rc);
}
void CqDeleter::operator()(ibv_cq* p) const {
  if (int rc = Verbs().destroy_cq(p); rc != 0) LOG(ERROR) << ErrnoToStatus("ibv_destroy_cq", rc);
}
void CompChannelDeleter::operator()(ibv_comp_channel* p) const {
  if (int rc = Verbs().destroy_comp_channel(p); rc != 0) {
    LOG(ERROR) << ErrnoToStatus("ibv_destroy_comp_channel", rc);
  }
}
void EventChannelDeleter::operator()(rdma_event_channel* p) const {
  Verbs().destroy_event_channel(p);
}
void CmIdDeleter::operator()(rdma_cm_id* p) const {
  if (Verbs().destroy_id(p) != 0) LOG(ERROR) << ErrnoToStatus("rdma_destroy_id", errno);
}

QpOwner& QpOwner::operator=(QpOwner&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = nullptr;
  }
  return *this;
}

void QpOwner::reset() {
  if (id_ != nullptr && id_->qp != nullptr) Verbs().destroy_qp(id_);
  id_ = nullptr;
}

absl::StatusOr<PdPtr> AllocPd(ibv_context* context) {
  ibv_pd* pd = Verbs().alloc_pd(context);
  if (pd == nullptr) return ErrnoToStatus("ibv_alloc_pd", errno);
  return PdPtr(pd);
}

absl::StatusOr<MrPtr> RegisterMemory(ibv_pd* pd, void* addr, size_t length, int access) {
  ibv_mr* mr = Verbs().reg_mr(pd, addr, length, access);
  if (mr == nullptr) {
    const int err = errno;
    absl::Status s = ErrnoToStatus("ibv_reg_mr", err);
    if (err == ENOMEM || err == EPERM) {
      // Pinning fails mostly because of the memlock limit; say which.
      return absl::ResourceExhaustedError(absl::StrCat(
          s.message(), " (", MemlockLimitText(), "; registering ", length, " bytes)"));
    }
    return s;
  }
  g_registered_bytes.fetch_add(static_cast<int64_t>(mr->length), std::memory_order_relaxed);
  g_registered_regions.fetch_add(1, std::memory_order_relaxed);
  return MrPtr(mr);
}

absl::StatusOr<CompChannelPtr> CreateCompChannel(ibv_context* context) {
  ibv_comp_channel* ch = Verbs().create_comp_channel(context);
  if (ch == nullptr) return ErrnoToStatus("ibv_create_comp_channel", errno);
  return CompChannelPtr(ch);
}

absl::StatusOr<CqPtr> CreateCq(ibv_context* context, int cqe, ibv_comp_channel* channel) {
  ibv_cq* cq = Verbs().create_cq(context, cqe, nullptr, channel, 0);
  if (cq == nullptr) return ErrnoToStatus("ibv_create_cq", errno);
  return CqPtr(cq);
}

void TdDeleter::operator()(ibv_td* p) const {
  if (int rc = ibv_dealloc_td(p); rc != 0) LOG(ERROR) << ErrnoToStatus("ibv_dealloc_td", rc);
}

absl::StatusOr<ThreadDomain> AllocThreadDomain(ibv_pd* pd) {
  // The verbs.h inlines reach the provider through the context's ops, on
  // rdma-core and softrdma alike; EOPNOTSUPP where it has none.
  ibv_td_init_attr td_attr{};
  ThreadDomain d;
  d.td.reset(ibv_alloc_td(pd->context, &td_attr));
  if (d.td == nullptr) return ErrnoToStatus("ibv_alloc_td", errno);
  ibv_parent_domain_init_attr pa{};
  pa.pd = pd;
  pa.td = d.td.get();
  d.parent.reset(ibv_alloc_parent_domain(pd->context, &pa));
  if (d.parent == nullptr) return ErrnoToStatus("ibv_alloc_parent_domain", errno);
  return d;
}

absl::StatusOr<CqPtr> CreateSingleThreadedCq(ibv_pd* parent, int cqe, ibv_comp_channel* channel) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = static_cast<uint32_t>(cqe);
  attr.channel = channel;
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  attr.parent_domain = parent;
  ibv_cq_ex* cq = ibv_create_cq_ex(parent->context, &attr);
  if (cq == nullptr) return ErrnoToStatus("ibv_create_cq_ex", errno);
  return CqPtr(ibv_cq_ex_to_cq(cq));
}

absl::StatusOr<EventChannelPtr> CreateEventChannel() {
  rdma_event_channel* ch = Verbs().create_event_channel();
  if (ch == nullptr) return ErrnoToStatus("rdma_create_event_channel", errno);
  return EventChannelPtr(ch);
}

absl::StatusOr<CmIdPtr> CreateCmId(rdma_event_channel* channel, void* context) {
  rdma_cm_id* id = nullptr;
  if (Verbs().create_id(channel, &id, context, RDMA_PS_TCP) != 0) {
    return ErrnoToStatus("rdma_create_id", errno);
  }
  return CmIdPtr(id);
}

absl::StatusOr<QpOwner> CreateQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (Verbs().create_qp(id, pd, attr) != 0) return ErrnoToStatus("rdma_create_qp", errno);
  return QpOwner(id);
}

}  // namespace internal
}  // namespace rdmarpc
