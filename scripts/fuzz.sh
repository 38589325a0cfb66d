#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz/) with clang + libFuzzer, ASan and
# UBSan into build/fuzz, and runs each from its seed corpus for a bounded
# number of executions. Exits non-zero when a target finds a crash, a leak
# or a broken round-trip check (the input is left in build/fuzz/findings/).
#   fuzz.sh                 RDMARPC_FUZZ_RUNS executions per target (default 200000)
#   fuzz.sh TARGET ARGS...  one target with libFuzzer's own arguments, e.g.
#                           fuzz.sh header -runs=10000000
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

build_dir=${RDMARPC_FUZZ_BUILD_DIR:-build/fuzz}
jobs=${RDMARPC_JOBS:-$(nproc)}
runs=${RDMARPC_FUZZ_RUNS:-200000}

cmake -S . -B "$build_dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMARPC_FUZZING=ON \
  -DRDMARPC_BUILD_EXAMPLES=OFF -DRDMARPC_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" --target fuzzers -j "$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

findings="$build_dir/findings"
mkdir -p "$findings"

# run_target NAME ARGS...: from a scratch copy of the seed corpus (libFuzzer
# adds what it finds there; the tree's corpus stays as committed).
run_target() {
  local name="$1"
  shift
  local work
  work="$(mktemp -d)"
  cp tests/fuzz/corpus/"$name"/* "$work"/
  echo "fuzz: $name $*"
  local status=0
  "$build_dir/tests/fuzz/${name}_fuzzer" -artifact_prefix="$findings/$name-" "$@" "$work" \
    >"$findings/$name.log" 2>&1 || status=$?
  rm -rf "$work"
  grep -E '^Done|DONE' "$findings/$name.log" | tail -n 1
  if ((status != 0)); then
    tail -n 40 "$findings/$name.log"
    echo "fuzz: $name FAILED (exit $status); input in $findings/"
    return 1
  fi
}

if (($# > 0)); then
  run_target "$@"
  exit
fi
failed=0
for target in header handshake metadata status_payloads softrdma_wire shm_ring; do
  run_target "$target" -runs="$runs" -max_total_time=120 || failed=1
done
exit "$failed"
