// device_ex_test.cc: the extended context and device queries
// (ibv_query_device_ex, ibv_query_gid_ex, ibv_query_pkey) that perftest 4.5
// and other rdma-core 30+ programs make.
//
// The verbs.h inlines that fall back to an exported libibverbs function are
// not called here (this binary links no libibverbs); the tests go through
// verbs_get_ctx_op(), exactly as those inlines do first.
#include <net/if.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "softrdma/softrdma.h"
#include "test_util.h"

namespace softrdma {
namespace {

class DeviceExTest : public testing::SoftDeviceTest {};

TEST_F(DeviceExTest, ContextIsAVerbsContextWithOnlyOurOps) {
  EXPECT_EQ(ctx_->abi_compat, __VERBS_ABI_IS_EXTENDED);
  verbs_context* v = verbs_get_ctx(ctx_);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->sz, sizeof(verbs_context));
  EXPECT_EQ(&v->context, ctx_);
  EXPECT_NE(verbs_get_ctx_op(ctx_, query_device_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, create_qp_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, create_cq_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, alloc_td), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, dealloc_td), nullptr);
  EXPECT_NE(verbs_get_ctx_op(ctx_, alloc_parent_domain), nullptr);
  // Everything else is "not supported": the inlines then fail with
  // EOPNOTSUPP (or, for query_port, fall back to the exported function).
  EXPECT_EQ(verbs_get_ctx_op(ctx_, query_port), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx_, open_xrcd), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx_, create_srq_ex), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx_, alloc_dm), nullptr);
  EXPECT_EQ(verbs_get_ctx_op(ctx_, create_flow_action_esp), nullptr);
}

TEST_F(DeviceExTest, QueryDeviceExIsQueryDeviceWithNoExtendedCaps) {
  ibv_device_attr plain;
  ASSERT_EQ(query_device(ctx_, &plain), 0);
  ibv_device_attr_ex ex;
  std::memset(&ex, 0xab, sizeof(ex));  // every byte must be written
  verbs_context* v = verbs_get_ctx_op(ctx_, query_device_ex);
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->query_device_ex(ctx_, nullptr, &ex, sizeof(ex)), 0);
  EXPECT_EQ(std::memcmp(&ex.orig_attr, &plain, sizeof(plain)), 0);
  EXPECT_EQ(ex.comp_mask, 0u);
  EXPECT_EQ(ex.odp_caps.general_caps, 0u);  // no on-demand paging
  EXPECT_EQ(ex.odp_caps.per_transport_caps.rc_odp_caps, 0u);
  EXPECT_EQ(ex.xrc_odp_caps, 0u);
  EXPECT_EQ(ex.tso_caps.max_tso, 0u);
  EXPECT_EQ(ex.rss_caps.max_rwq_indirection_tables, 0u);
  EXPECT_EQ(ex.max_dm_size, 0u);
  EXPECT_EQ(ex.completion_timestamp_mask, 0u);
  EXPECT_EQ(ex.device_cap_flags_ex, plain.device_cap_flags);
  EXPECT_EQ(ex.phys_port_cnt_ex, 1u);

  // An older, shorter struct gets its prefix; nothing past it is touched.
  const size_t old_size = offsetof(ibv_device_attr_ex, completion_timestamp_mask);
  std::memset(&ex, 0xab, sizeof(ex));
  ASSERT_EQ(v->query_device_ex(ctx_, nullptr, &ex, old_size), 0);
  EXPECT_EQ(ex.orig_attr.max_qp_wr, plain.max_qp_wr);
  EXPECT_EQ(ex.completion_timestamp_mask, 0xababababababababull);

  ibv_query_device_ex_input in{};
  in.comp_mask = 1;
  EXPECT_EQ(v->query_device_ex(ctx_, &in, &ex, sizeof(ex)), EINVAL);
  EXPECT_EQ(v->query_device_ex(ctx_, nullptr, &ex, sizeof(ibv_device_attr)), EINVAL);
}

TEST_F(DeviceExTest, QueryGidExGivesTheRoceV2LoopbackGid) {
  ibv_gid_entry e;
  std::memset(&e, 0xab, sizeof(e));
  ASSERT_EQ(query_gid_ex(ctx_, 1, 0, &e, 0, sizeof(e)), 0);
  ibv_gid gid;
  ASSERT_EQ(query_gid(ctx_, 1, 0, &gid), 0);
  EXPECT_EQ(std::memcmp(&e.gid, &gid, sizeof(gid)), 0);
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(e.gid.raw, mapped, sizeof(mapped)), 0);
  EXPECT_EQ(e.gid_index, 0u);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(e.gid_type, static_cast<uint32_t>(IBV_GID_TYPE_ROCE_V2));
  EXPECT_EQ(e.ndev_ifindex, ::if_nametoindex("lo"));

  EXPECT_EQ(query_gid_ex(ctx_, 1, 1, &e, 0, sizeof(e)), EINVAL);  // one-entry table
  EXPECT_EQ(query_gid_ex(ctx_, 2, 0, &e, 0, sizeof(e)), EINVAL);  // one port
  EXPECT_EQ(query_gid_ex(ctx_, 0, 0, &e, 0, sizeof(e)), EINVAL);
  EXPECT_EQ(query_gid_ex(ctx_, 1, 0, &e, 1, sizeof(e)), EINVAL);  // flags must be 0
  EXPECT_EQ(query_gid_ex(ctx_, 1, 0, &e, 0, sizeof(e) - 1), EINVAL);
}

TEST_F(DeviceExTest, QueryPkeyHasOnlyTheDefaultPartition) {
  __be16 pkey = 0;
  ASSERT_EQ(query_pkey(ctx_, 1, 0, &pkey), 0);
  EXPECT_EQ(pkey, htobe16(0xffff));
  errno = 0;
  EXPECT_EQ(query_pkey(ctx_, 1, 1, &pkey), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(query_pkey(ctx_, 2, 0, &pkey), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(query_pkey(ctx_, 1, -1, &pkey), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softrdma
