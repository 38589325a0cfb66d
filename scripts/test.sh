#!/usr/bin/env bash
# Installs missing packages, builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer into build/asan, runs the whole suite, then
# runs the fuzz targets for a bounded number of executions (scripts/fuzz.sh).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

build_dir=${RDMARPC_TEST_BUILD_DIR:-build/asan}
jobs=${RDMARPC_JOBS:-$(nproc)}

# The sanitizer build takes about 10 GB (each test binary links the whole
# runtime with ASan's metadata); etcd, the examples' files and the user
# project's build need room too. A disk that fills mid-run fails unrelated
# tests (etcd exits at once, writes fail), so say up front when room is short
# and show the free space again if anything fails.
mkdir -p "$build_dir"
free_kib=$(df -Pk "$build_dir" | awk 'NR == 2 { print $4 }')
if (( free_kib < 12 * 1024 * 1024 )); then
  echo "test.sh: warning: only $((free_kib / 1024)) MiB free under $build_dir;" \
       "the build and tests need about 12 GiB" >&2
fi
trap 'rc=$?; if (( rc != 0 )); then echo "test.sh: failed (exit $rc); free space:" >&2;
      df -h "$build_dir" /tmp >&2; fi' EXIT

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug -DRDMARPC_SANITIZE=ON
cmake --build "$build_dir" -j "$jobs"

# ASan: fail on leaks too; UBSan: print the stack and fail.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# No machine here has an RDMA NIC: run on softrdma.
export RDMARPC_PROVIDER=${RDMARPC_PROVIDER:-soft}
# install-deps.sh installed the servers tests start (etcd, dnsmasq): a test
# that misses one fails rather than skips.
export RDMARPC_REQUIRE_TEST_TOOLS=1

(cd "$build_dir" && ctest --output-on-failure -j "$jobs" --timeout 300)

# The fuzz targets for a bounded number of executions each (clang build).
scripts/fuzz.sh
