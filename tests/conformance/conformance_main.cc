// main() of the conformance suite: gtest first (it strips its --gtest_*
// flags), then gflags, so --rdmarpc_provider=soft|rdma-core|auto reaches the
// verbs binding before the first test calls Verbs().
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  google::InitGoogleLogging(argv[0]);
  return RUN_ALL_TESTS();
}
