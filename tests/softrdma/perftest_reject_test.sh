#!/bin/sh
# perftest_reject_test.sh: perftest 4.5+0.17's ib_send_bw -R --use-srq when
# its test connection is rejected, under libsoftrdma_preload.so.
#
# perftest's -R server accepts the connection it exchanges parameters on,
# then listens again on the same port for the test QP; a client that gets
# there first is rejected (IB CM reason 8, invalid service ID, as a NIC's CM
# answers a REQ nobody listens for). perftest 4.5+0.17 then retries with cm
# ids its cleanup freed (fixed upstream by perftest 3d9d8d0), and softrdma
# used to dereference them (UBSan: misaligned SoftCmId*). The shim delays the
# server's second rdma_listen so the race happens every run.
#
# Passes when: the client reports RDMA_CM_EVENT_REJECTED with status 8, its
# retry fails cleanly with softrdma's EINVAL for the dead id ("Failed to
# resolve RDMA CM address"), the client exits 1, and neither process has a
# sanitizer report.
#
# Usage: perftest_reject_test.sh <preload.so> <relisten_delay_shim.so>
set -u
PRELOAD=$1
SHIM=$2
command -v ib_send_bw >/dev/null 2>&1 || { echo "ib_send_bw not installed; skipping"; exit 77; }
command -v ss >/dev/null 2>&1 || { echo "ss (iproute2) not installed; skipping"; exit 77; }
SAN=""
if ldd "$PRELOAD" | grep -q libasan; then
  SAN="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):"
  export ASAN_OPTIONS=detect_leaks=0
fi
export UBSAN_OPTIONS=print_stacktrace=1
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
PORT=$(( 10000 + ($$ * 17) % 22000 ))
while ss -Htln "sport = :$PORT" | grep -q .; do PORT=$(( PORT + 1 )); done

LD_PRELOAD="$SAN$SHIM:$PRELOAD" timeout 40 ib_send_bw -R --use-srq -n 5 -p "$PORT" \
  >"$LOG/server" 2>&1 &
SPID=$!
i=0
while ! ss -Htln "sport = :$PORT" | grep -q . && [ $i -lt 100 ]; do
  kill -0 $SPID 2>/dev/null || break
  sleep 0.1; i=$((i + 1))
done
LD_PRELOAD="$SAN$PRELOAD" timeout 30 ib_send_bw -R --use-srq -n 5 -p "$PORT" 127.0.0.1 \
  >"$LOG/client" 2>&1
CRC=$?
kill $SPID 2>/dev/null  # it waits for a test connection that never comes
wait $SPID 2>/dev/null
echo "== client (rc $CRC)"; cat "$LOG/client"
echo "== server"; cat "$LOG/server"

fail=0
[ $CRC -eq 1 ] || { echo "FAIL: client rc $CRC, want 1 (perftest gives up)"; fail=1; }
grep -q "Event: RDMA_CM_EVENT_REJECTED; error: 8\." "$LOG/client" ||
  { echo "FAIL: client saw no RDMA_CM_EVENT_REJECTED with status 8"; fail=1; }
grep -q "Failed to resolve RDMA CM address" "$LOG/client" ||
  { echo "FAIL: the retry on the freed id did not fail in rdma_resolve_addr"; fail=1; }
grep -q "which is not a live rdma_cm_id" "$LOG/client" ||
  { echo "FAIL: softrdma did not refuse the dead id"; fail=1; }
for side in client server; do
  if grep -q -E "runtime error|AddressSanitizer|Segmentation" "$LOG/$side"; then
    echo "FAIL: sanitizer report or crash in the $side"; fail=1
  fi
done
[ $fail -eq 0 ] || exit 1
echo "PASS: rejected perftest connect; the retry on freed ids fails with EINVAL, no wild access"
exit 0
