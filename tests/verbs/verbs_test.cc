// The verbs binding: provider choice, errno → Status, RAII owners.
#include "runtime/verbs/verbs.h"

#include <cerrno>
#include <string>

#include "gflags/gflags.h"
#include "gtest/gtest.h"
#include "runtime/softrdma/faults.h"
#include "runtime/softrdma/softrdma.h"

DECLARE_string(rdmarpc_provider);

namespace rdmarpc {
namespace internal {
namespace {

TEST(SelectProvider, NamesMapToBindings) {
  absl::StatusOr<const VerbsApi*> soft = SelectProvider("soft");
  ASSERT_TRUE(soft.ok());
  EXPECT_EQ(*soft, &SoftVerbs());
  EXPECT_STREQ((*soft)->provider_name, "soft");
  absl::StatusOr<const VerbsApi*> core = SelectProvider("rdma-core");
  ASSERT_TRUE(core.ok());
  EXPECT_STREQ((*core)->provider_name, "rdma-core");
}

TEST(SelectProvider, UnknownNameIsInvalidArgument) {
  absl::StatusOr<const VerbsApi*> p = SelectProvider("mlx5");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("mlx5"), absl::string_view::npos);
}

TEST(SelectProvider, MistypedFlagIsRefusedAtParseTime) {
  // A typo must not silently run on another device: gflags' validator
  // refuses it and the flag keeps its value.
  const std::string before = FLAGS_rdmarpc_provider;
  EXPECT_EQ(gflags::SetCommandLineOption("rdmarpc_provider", "rdma_core"), "");
  EXPECT_EQ(FLAGS_rdmarpc_provider, before);
  EXPECT_EQ(gflags::SetCommandLineOption("rdmarpc_provider", "soft"),
            "rdmarpc_provider set to soft\n");
  EXPECT_EQ(FLAGS_rdmarpc_provider, "soft");
  gflags::SetCommandLineOption("rdmarpc_provider", before.c_str());
}

TEST(SelectProvider, AutoPicksSoftWithoutDevices) {
  // No machine here has an RDMA device, so auto falls back to softrdma.
  absl::StatusOr<const VerbsApi*> p = SelectProvider("auto");
  ASSERT_TRUE(p.ok());
  int n = 0;
  ibv_device** list = ::ibv_get_device_list(&n);
  if (list != nullptr) ::ibv_free_device_list(list);
  EXPECT_EQ(*p, (list != nullptr && n > 0) ? &RdmaCoreVerbs() : &SoftVerbs());
}

TEST(ErrnoToStatus, MapsCodesAndNamesTheCall) {
  EXPECT_EQ(ErrnoToStatus("ibv_reg_mr", ENOMEM).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus("rdma_connect", ECONNREFUSED).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus("rdma_connect", ETIMEDOUT).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus("rdma_resolve_addr", ENETUNREACH).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus("ibv_create_qp", EINVAL).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus("rdma_bind_addr", EADDRINUSE).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus("ibv_reg_mr", ENOMEM).message(), "ibv_reg_mr: Cannot allocate memory");
}

TEST(MemlockLimitText, SaysTheLimit) {
  const std::string t = MemlockLimitText();
  EXPECT_EQ(t.rfind("RLIMIT_MEMLOCK", 0), 0u) << t;
}

TEST(RaiiOwners, ReleaseEverythingTheyOwn) {
  const VerbsApi& v = SoftVerbs();
  ASSERT_EQ(&Verbs(), &SoftVerbs()) << "run with RDMARPC_PROVIDER=soft";
  const softrdma::Stats before = softrdma::GetStats();
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  ASSERT_GT(n, 0);
  ibv_context* ctx = v.open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  {
    absl::StatusOr<PdPtr> pd = AllocPd(ctx);
    ASSERT_TRUE(pd.ok()) << pd.status();
    std::vector<char> mem(4096);
    absl::StatusOr<MrPtr> mr = RegisterMemory(pd->get(), mem.data(), mem.size(),
                                              IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(mr.ok()) << mr.status();
    absl::StatusOr<CompChannelPtr> ch = CreateCompChannel(ctx);
    ASSERT_TRUE(ch.ok()) << ch.status();
    absl::StatusOr<CqPtr> cq = CreateCq(ctx, 16, ch->get());
    ASSERT_TRUE(cq.ok()) << cq.status();
    absl::StatusOr<EventChannelPtr> ec = CreateEventChannel();
    ASSERT_TRUE(ec.ok()) << ec.status();
    absl::StatusOr<CmIdPtr> id = CreateCmId(ec->get(), nullptr);
    ASSERT_TRUE(id.ok()) << id.status();
    const softrdma::Stats during = softrdma::GetStats();
    EXPECT_EQ(during.live_pds, before.live_pds + 1);
    EXPECT_EQ(during.live_mrs, before.live_mrs + 1);
    EXPECT_EQ(during.live_cqs, before.live_cqs + 1);
    EXPECT_EQ(during.live_cm_ids, before.live_cm_ids + 1);
    PdPtr moved = std::move(*pd);  // move-only ownership
    EXPECT_EQ(pd->get(), nullptr);
    mr->reset();  // MR before its PD
  }
  const softrdma::Stats after = softrdma::GetStats();
  EXPECT_EQ(after.live_pds, before.live_pds);
  EXPECT_EQ(after.live_mrs, before.live_mrs);
  EXPECT_EQ(after.live_cqs, before.live_cqs);
  EXPECT_EQ(after.live_cm_ids, before.live_cm_ids);
  v.close_device(ctx);
  v.free_device_list(list);
}

TEST(RegisterMemory, EnomemIsResourceExhaustedNamingMemlock) {
  ASSERT_EQ(&Verbs(), &SoftVerbs()) << "run with RDMARPC_PROVIDER=soft";
  const VerbsApi& v = SoftVerbs();
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  ASSERT_GT(n, 0);
  ibv_context* ctx = v.open_device(list[0]);
  {
    absl::StatusOr<PdPtr> pd = AllocPd(ctx);
    ASSERT_TRUE(pd.ok());
    std::vector<char> mem(8192);
    softrdma::FailNextRegMr(1, ENOMEM);
    absl::StatusOr<MrPtr> mr = RegisterMemory(pd->get(), mem.data(), mem.size(),
                                              IBV_ACCESS_LOCAL_WRITE);
    ASSERT_FALSE(mr.ok());
    EXPECT_EQ(mr.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(mr.status().message().rfind("ibv_reg_mr: Cannot allocate memory (RLIMIT_MEMLOCK", 0),
              0u)
        << mr.status();
    EXPECT_NE(mr.status().message().find("8192 bytes"), absl::string_view::npos);
    // The knob was for one call only.
    EXPECT_TRUE(RegisterMemory(pd->get(), mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE).ok());
  }
  v.close_device(ctx);
  v.free_device_list(list);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
