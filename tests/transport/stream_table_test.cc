// StreamTable: handle packing, generations that wrap without reaching 0,
// stale handles, a full table, quarantine until the late answer, and the
// server's open streams.
#include "runtime/transport/stream_table.h"

#include <set>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(StreamTable, HandlePacksSlotAndGeneration) {
  for (uint16_t slot : {uint16_t{0}, uint16_t{1}, uint16_t{0x1234}, uint16_t{0xFFFF}}) {
    for (uint16_t gen : {uint16_t{1}, uint16_t{2}, uint16_t{0x0ABC}, kGenerationMask}) {
      const uint32_t h = PackHandle(slot, gen);
      EXPECT_NE(h, 0u);
      EXPECT_EQ(HandleSlot(h), slot);
      EXPECT_EQ(HandleGeneration(h), gen);
    }
  }
  // The handle is what imm_data carries: the same two fields.
  const uint32_t h = PackHandle(0x0102, 0x0304);
  Imm imm{MsgKind::kRequest, HandleGeneration(h), HandleSlot(h)};
  absl::StatusOr<Imm> back = DecodeImm(EncodeImm(imm));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(PackHandle(back->slot, back->generation), h);
}

TEST(StreamTable, GenerationWrapsWithinTwelveBitsAndNeverIsZero) {
  StreamTable table;
  std::set<uint16_t> seen;
  uint16_t last = 0;
  // More than one full wrap of the 12-bit generation on one slot.
  for (int i = 0; i < 2 * (kGenerationMask + 1) + 3; ++i) {
    const uint32_t h = table.Open();
    ASSERT_NE(h, 0u);
    EXPECT_EQ(HandleSlot(h), 0);  // the freed slot is reused
    const uint16_t gen = HandleGeneration(h);
    EXPECT_NE(gen, 0);
    EXPECT_LE(gen, kGenerationMask);
    if (last == kGenerationMask) {
      EXPECT_EQ(gen, 1);
    }
    last = gen;
    seen.insert(gen);
    table.Free(HandleSlot(h));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kGenerationMask));  // 1..4095
  EXPECT_EQ(table.size(), 1u);
}

TEST(StreamTable, StaleHandleFindsNoCall) {
  StreamTable table;
  const uint32_t first = table.Open();
  ASSERT_NE(table.Live(first), nullptr);
  EXPECT_EQ(table.busy(), 1u);
  table.Free(HandleSlot(first));
  EXPECT_EQ(table.Live(first), nullptr);  // ended
  EXPECT_EQ(table.busy(), 0u);
  const uint32_t second = table.Open();
  EXPECT_EQ(HandleSlot(second), HandleSlot(first));
  EXPECT_NE(second, first);
  EXPECT_EQ(table.Live(first), nullptr);  // a late frame of the first call
  EXPECT_NE(table.Live(second), nullptr);
  EXPECT_EQ(table.Live(PackHandle(7, 1)), nullptr);  // never opened
}

TEST(StreamTable, FullTableOpensNothing) {
  StreamTable table(/*max_slots=*/3);
  std::set<uint16_t> slots;
  for (int i = 0; i < 3; ++i) slots.insert(HandleSlot(table.Open()));
  EXPECT_EQ(slots.size(), 3u);
  EXPECT_EQ(table.Open(), 0u);
  table.Free(1);
  const uint32_t h = table.Open();
  EXPECT_EQ(HandleSlot(h), 1);
  EXPECT_EQ(table.busy(), 3u);
}

TEST(StreamTable, FreeResetsTheSlot) {
  StreamTable table;
  const uint32_t h = table.Open();
  StreamTable::Slot* s = table.Live(h);
  ASSERT_NE(s, nullptr);
  s->sent = true;
  s->stream = true;
  s->in.pulls = 1;
  s->request.payload = "x";
  table.Free(HandleSlot(h));
  const StreamTable::Slot& after = table.slot(HandleSlot(h));
  EXPECT_FALSE(after.busy);
  EXPECT_FALSE(after.sent);
  EXPECT_FALSE(after.stream);
  EXPECT_EQ(after.in.pulls, 0);
  EXPECT_TRUE(after.request.payload.empty());
  EXPECT_EQ(after.sink, nullptr);
}

TEST(StreamTable, QuarantineHoldsBuffersUntilTheLateAnswer) {
  StreamTable table;
  LargeBuffer request, reply, other;
  const uint32_t h = table.Open();
  const uint16_t slot = HandleSlot(h), gen = HandleGeneration(h);
  table.Quarantine(slot, gen, &request, &reply);
  table.Free(slot);
  // A newer call on the same slot, and answers for other calls, release nothing.
  const uint32_t next = table.Open();
  EXPECT_EQ(HandleSlot(next), slot);
  EXPECT_TRUE(table.TakeQuarantined(slot, HandleGeneration(next)).empty());
  EXPECT_TRUE(table.TakeQuarantined(static_cast<uint16_t>(slot + 1), gen).empty());
  EXPECT_EQ(table.quarantined_calls(), 1u);
  // The server's answer for (slot, gen) hands both back, once.
  std::vector<LargeBuffer*> back = table.TakeQuarantined(slot, gen);
  EXPECT_EQ(back, (std::vector<LargeBuffer*>{&request, &reply}));
  EXPECT_TRUE(table.TakeQuarantined(slot, gen).empty());
  EXPECT_EQ(table.quarantined_calls(), 0u);
  // A call whose request was eager quarantines only its reply buffer; the
  // connection's end drains what is left.
  table.Quarantine(slot, HandleGeneration(next), nullptr, &other);
  std::vector<LargeBuffer*> drained;
  table.DrainQuarantine([&](LargeBuffer* b) { drained.push_back(b); });
  EXPECT_EQ(drained, (std::vector<LargeBuffer*>{&other}));
  EXPECT_EQ(table.quarantined_calls(), 0u);
}

TEST(StreamTable, ServerStreamsOpenOnceUntilErased) {
  StreamTable table;
  const uint32_t h = PackHandle(3, 5);
  EXPECT_EQ(table.FindServerStream(h), nullptr);
  EXPECT_TRUE(table.OpenServerStream(h));
  EXPECT_FALSE(table.OpenServerStream(h));  // opened twice: a protocol error
  ASSERT_NE(table.FindServerStream(h), nullptr);
  ++table.ServerStream(h).pulls;
  EXPECT_EQ(table.FindServerStream(h)->pulls, 1);
  table.EraseServerStream(h);
  EXPECT_EQ(table.FindServerStream(h), nullptr);
  table.ServerStream(h);
  table.ClearServerStreams();
  EXPECT_EQ(table.FindServerStream(h), nullptr);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
