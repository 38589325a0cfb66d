# Every external dependency, found once. All come from Debian 12 packages
# (scripts/install-deps.sh); see WORKSPACE.notes for versions.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)            # protobuf::libprotobuf, protobuf::libprotoc, protobuf::protoc
find_package(absl REQUIRED CONFIG)         # absl::status, absl::statusor, absl::synchronization, ...
find_package(gflags REQUIRED CONFIG)
find_package(glog REQUIRED CONFIG)         # glog::glog
find_package(PkgConfig REQUIRED)
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET libibverbs)
pkg_check_modules(RDMACM REQUIRED IMPORTED_TARGET librdmacm)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # the admin endpoint (rdmarpc/admin.h)
pkg_check_modules(CARES REQUIRED IMPORTED_TARGET libcares)       # the dns: resolver
if(RDMARPC_BUILD_TESTS)
  find_package(GTest REQUIRED CONFIG)      # GTest::gtest, GTest::gtest_main, GTest::gmock
endif()
if(RDMARPC_BUILD_BENCH)
  find_package(benchmark REQUIRED CONFIG)  # benchmark::benchmark
endif()
