// RendezvousPacer: piece sizes and pieces in flight, small vs bulk pacing.
#include "runtime/transport/rendezvous_pacer.h"

#include "gtest/gtest.h"

namespace rdmarpc {
namespace internal {
namespace {

RendezvousPacer Make() { return RendezvousPacer({64 << 10, 2}, {4 << 20, 4}); }

TEST(RendezvousPacer, SmallPacingBoundsPiecesInFlight) {
  RendezvousPacer p = Make();
  EXPECT_FALSE(p.bulk());
  EXPECT_TRUE(p.CanPost());
  p.OnPosted();
  EXPECT_TRUE(p.CanPost());
  p.OnPosted();
  EXPECT_FALSE(p.CanPost()) << "a third small piece in flight";
  p.OnEnded();
  EXPECT_TRUE(p.CanPost());
  EXPECT_EQ(p.in_flight(), 1);
}

TEST(RendezvousPacer, NextPieceIsOnePieceOrTheRemainderWithinAQuarter) {
  RendezvousPacer p = Make();
  EXPECT_EQ(p.NextPieceBytes(1 << 20), 64u << 10);
  EXPECT_EQ(p.NextPieceBytes((64 << 10) + (16 << 10)), (64u << 10) + (16 << 10));  // 1.25 pieces
  EXPECT_EQ(p.NextPieceBytes((64 << 10) + (16 << 10) + 1), 64u << 10);
  EXPECT_EQ(p.NextPieceBytes(100), 100u);
  EXPECT_EQ(p.NextPieceBytes(0), 0u);
}

TEST(RendezvousPacer, BulkAfterThresholdPiecesWithoutASmallMessage) {
  RendezvousPacer p = Make();
  for (int i = 0; i < kRendezvousBulkAfterPieces - 1; ++i) {
    p.OnPosted();
    p.OnEnded();
  }
  EXPECT_FALSE(p.bulk());
  EXPECT_EQ(p.NextPieceBytes(64 << 20), 64u << 10);
  p.OnPosted();
  p.OnEnded();
  EXPECT_TRUE(p.bulk());
  EXPECT_EQ(p.NextPieceBytes(64 << 20), 4u << 20);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(p.CanPost()) << i;
    p.OnPosted();
  }
  EXPECT_FALSE(p.CanPost());
  // A small message brings the small pacing back at once: nothing more is
  // posted until the bulk pieces in flight drop below two.
  p.NoteSmallMessage();
  EXPECT_FALSE(p.bulk());
  p.OnEnded();
  p.OnEnded();
  EXPECT_FALSE(p.CanPost());
  p.OnEnded();
  EXPECT_TRUE(p.CanPost());
  EXPECT_EQ(p.NextPieceBytes(64 << 20), 64u << 10);
}

TEST(RendezvousPacer, OutOfRangeSettingsAreClamped) {
  RendezvousPacer p({0, 0}, {0, 1000});
  EXPECT_EQ(p.NextPieceBytes(10), 1u);  // 1-byte pieces, the last within a quarter: 1
  EXPECT_TRUE(p.CanPost());
  p.OnPosted();
  EXPECT_FALSE(p.CanPost());  // at least one, here exactly one
  p.Reset();
  EXPECT_EQ(p.in_flight(), 0);
  p.OnEnded();  // never below zero
  EXPECT_EQ(p.in_flight(), 0);
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
