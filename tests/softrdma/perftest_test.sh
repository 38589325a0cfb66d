#!/bin/sh
# perftest_test.sh: an unmodified Debian perftest program (ib_send_lat,
# ib_write_lat, ib_read_lat, ib_write_bw, ib_read_bw) on softrdma through
# libsoftrdma_preload.so, server and client in two processes over 127.0.0.1,
# QPs connected with rdma_cm (-R), every message size 2 B .. 8 MiB (-a).
#
# Passes only if both sides exit 0 within their time bound, both print one
# result row per size (2, 4, ..., 8388608) with ITERS iterations each, and the
# device's own counters (RDMARPC_SOFT_STATS=1) show the work the test implies:
# 23 sizes x ITERS data WRs of the tool's opcode, a largest SEND of 8 MiB for
# ib_send_lat, no RNR retry and no remote access error.
#
# perftest 4.5+0.17 (Debian 12) has no --data_validation (nor any payload
# check): none of the five tools can check the bytes. ib_write_lat comes
# closest: each side spins on the last byte of its buffer until the peer's
# RDMA WRITE changes it, so a write that lands nowhere hangs the run into its
# timeout.
#
# Other modes (MODE = TOOL-variant):
#   ib_send_bw, ib_send_bw-srq, ib_send_lat-srq   SENDs, with --use-srq
#     (the receiver takes its receives from a shared receive queue): the
#     client's data SENDs are its SENDs minus the server's (the control
#     messages are the same both ways), exactly 23 x ITERS.
#   ib_atomic_lat, ib_atomic_bw   8-byte atomics: exactly ITERS on the client.
#   ib_write_bw-burst   100 RDMA WRITEs of 4 MiB (-s 4194304 -n 100): a burst
#     that outlasts the transport timer's window on a loaded machine.
#
# Usage: perftest_test.sh <preload.so> <mode>
set -u
PRELOAD=$1
MODE=$2
TOOL=${MODE%%-*}
VARIANT=${MODE#"$TOOL"}
ITERS=5          # perftest's minimum; -a runs 23 sizes of ITERS each
SIZES=23         # 2^1 .. 2^23
SIZE_ARGS="-a"
EXTRA=""
case "$VARIANT" in
  "") ;;
  -srq) EXTRA="--use-srq" ;;
  -burst) SIZE_ARGS="-s 4194304"; ITERS=100; SIZES=1 ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
command -v "$TOOL" >/dev/null 2>&1 || { echo "$TOOL not installed (Debian package perftest); skipping"; exit 77; }
command -v ss >/dev/null 2>&1 || { echo "ss (iproute2) not installed; skipping"; exit 77; }
case "$TOOL" in
  ib_send_lat|ib_send_bw)  STAT=send ;;
  ib_write_lat|ib_write_bw) STAT=rdma_write ;;
  ib_read_lat|ib_read_bw)   STAT=rdma_read ;;
  ib_atomic_lat|ib_atomic_bw) STAT=atomic; SIZE_ARGS=""; SIZES=1 ;;
  *) echo "unknown tool $TOOL"; exit 2 ;;
esac
# Every libibverbs / librdmacm function the program imports must be ours: one
# bound to the real library would act on softrdma's objects. (mlx5dv_* are
# called only for mlx5 devices' DC and AES-XTS modes, which are not run.)
if command -v nm >/dev/null 2>&1; then
  nm -D --defined-only "$PRELOAD" | awk '{print $3}' | sort -u >"${TMPDIR:-/tmp}/ours.$$"
  missing=$(nm -D --undefined-only "$(command -v "$TOOL")" | awk '{print $2}' | sed 's/@.*//' |
            grep -E '^_?(ibv|rdma)_' | sort -u | comm -23 - "${TMPDIR:-/tmp}/ours.$$")
  rm -f "${TMPDIR:-/tmp}/ours.$$"
  [ -z "$missing" ] || { echo "FAIL: $TOOL imports verbs the preload lacks:" $missing; exit 1; }
fi
# A sanitizer-built preload library needs the sanitizer runtimes loaded first.
if ldd "$PRELOAD" | grep -q libasan; then
  PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so):$PRELOAD"
  export ASAN_OPTIONS=detect_leaks=0  # perftest's own leaks are not ours
fi
export RDMARPC_SOFT_STATS=1
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

# A port below the kernel's ephemeral range (32768-60999 by default), so no
# outgoing connection of a parallel test holds it, that nothing listens on
# now; should another process take it before our server binds, the server
# fails and the run is retried on another port.
pick_port() {
  PORT=$(( 10000 + ($$ * 13 + ${1:-0} * 1009) % 22000 ))
  while ss -Htln "sport = :$PORT" | grep -q .; do PORT=$(( PORT + 1 )); done
}

run_once() {
  : >"$LOG/server"; : >"$LOG/client"
  LD_PRELOAD="$PRELOAD" timeout --foreground 110 \
    "$TOOL" -R $SIZE_ARGS $EXTRA -n $ITERS -p "$PORT" >"$LOG/server" 2>&1 &
  SPID=$!
  # The client fails at once if nobody listens yet: wait for the server's
  # rdma_cm listener (softrdma listens on the same TCP port).
  i=0
  while ! ss -Htln "sport = :$PORT" | grep -q . && [ $i -lt 100 ]; do
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1; i=$((i + 1))
  done
  # After a race (below) the client runs at a lower priority, so on a busy
  # host the server is likelier to be listening again by its second connect.
  LD_PRELOAD="$PRELOAD" nice -n "$CLIENT_NICE" timeout --foreground 100 \
    "$TOOL" -R $SIZE_ARGS $EXTRA -n $ITERS -p "$PORT" 127.0.0.1 >"$LOG/client" 2>&1
  CRC=$?
  if [ $CRC -ne 0 ] && grep -q "RDMA_CM_EVENT_REJECTED" "$LOG/client"; then
    # The client's rdma_connect for the test QP can reach the server before
    # the server listens for it again (it first accepts the connection it
    # exchanges parameters on, then sets up a new listener on the same
    # port), and is rejected — as a NIC's CM rejects a REQ for a service ID
    # nobody listens on. perftest 4.5 retries that by reusing cm ids its
    # cleanup freed, and crashes (a perftest defect, not ours); the server
    # then waits for good. Stop it; the run is retried.
    kill $SPID 2>/dev/null
    RACED=1
  fi
  wait $SPID
  SRC=$?
}

pick_port 0
CLIENT_NICE=0
# Six tries: under a loaded ctest -j2 the race below was seen to win three
# times in a row.
for attempt in 1 2 3 4 5 6; do
  RACED=0
  run_once
  if [ $RACED -eq 1 ]; then
    echo "client connected before the server listened (perftest race); retrying"
    cat "$LOG/client"
    CLIENT_NICE=$(( CLIENT_NICE < 15 ? CLIENT_NICE + 5 : 19 ))
  elif grep -q -i -E "in use|couldn't bind|unable to bind" "$LOG/server"; then
    echo "port $PORT is taken; retrying on another"
  else
    break
  fi
  pick_port "$attempt"
done
echo "== client (rc $CRC)"; cat "$LOG/client"
echo "== server (rc $SRC)"; cat "$LOG/server"
[ $CRC -eq 0 ] && [ $SRC -eq 0 ] || { echo "FAIL: exit codes client $CRC server $SRC"; exit 1; }

fail=0
# The result rows: "<bytes> <iterations> ..." — one per size, in order.
rows() { grep -o -E "^ *[0-9]+ +[0-9]+ " "$1" | awk '{print $1, $2}'; }
expected_rows() {
  case "$SIZE_ARGS" in
    -a) s=2; while [ $s -le 8388608 ]; do echo "$s $ITERS"; s=$((s * 2)); done ;;
    "") echo "8 $ITERS" ;;  # atomics: 8 bytes
    *) echo "${SIZE_ARGS#-s } $ITERS" ;;
  esac
}
expected_rows >"$LOG/want"
# The ping-pong tests (ib_send_lat, ib_write_lat) report on both sides; the
# others on the client only (the server of a one-sided RDMA READ/WRITE test is
# passive and prints no per-size results).
case "$TOOL" in ib_send_lat|ib_write_lat) SIDES="client server" ;; *) SIDES="client" ;; esac
for side in $SIDES; do
  rows "$LOG/$side" >"$LOG/got_$side"
  if ! cmp -s "$LOG/want" "$LOG/got_$side"; then
    echo "FAIL: $side result rows differ from the $SIZES sizes x $ITERS iterations:"
    diff "$LOG/want" "$LOG/got_$side"
    fail=1
  fi
  grep -q "Device *: softrdma0" "$LOG/$side" || { echo "FAIL: $side did not run on softrdma0"; fail=1; }
done

# The device's counters, from the softrdma-stats line each process prints at exit.
stat_of() {  # stat_of <side> <counter>
  grep -o "softrdma-stats:.*" "$LOG/$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}
for side in client server; do
  for c in rnr_retries rem_access_errors; do
    v=$(stat_of $side $c)
    [ "$v" = 0 ] || { echo "FAIL: $side $c=$v, want 0"; fail=1; }
  done
done
want=$((SIZES * ITERS))
case "$TOOL" in
  ib_send_lat)
    # Ping-pong: both sides send every size; control messages are SENDs too,
    # so the data SENDs show as the largest one and a lower bound.
    for side in client server; do
      v=$(stat_of $side max_send_bytes)
      [ "$v" = 8388608 ] || { echo "FAIL: $side max_send_bytes=$v, want 8388608"; fail=1; }
      v=$(stat_of $side send)
      [ "${v:-0}" -ge $want ] || { echo "FAIL: $side send=$v, want >= $want"; fail=1; }
    done ;;
  ib_send_bw)
    # One-way SENDs; both sides send the same control messages.
    c=$(stat_of client send); sv=$(stat_of server send)
    [ $(( ${c:-0} - ${sv:-0} )) -eq $want ] ||
      { echo "FAIL: client send=$c - server send=$sv, want $want data SENDs"; fail=1; }
    v=$(stat_of client max_send_bytes)
    [ "$v" = 8388608 ] || { echo "FAIL: client max_send_bytes=$v, want 8388608"; fail=1; } ;;
  ib_write_lat)
    # Ping-pong: each side writes every iteration of every size.
    for side in client server; do
      v=$(stat_of $side rdma_write)
      [ "$v" = $want ] || { echo "FAIL: $side rdma_write=$v, want $want"; fail=1; }
    done ;;
  *)
    # One-sided: the client issues every WR, the server none.
    v=$(stat_of client $STAT)
    [ "$v" = $want ] || { echo "FAIL: client $STAT=$v, want $want"; fail=1; }
    v=$(stat_of server $STAT)
    [ "$v" = 0 ] || { echo "FAIL: server $STAT=$v, want 0"; fail=1; } ;;
esac
[ $fail -eq 0 ] || exit 1
echo "PASS: $TOOL -R $SIZE_ARGS $EXTRA -n $ITERS: $SIZES sizes x $ITERS iterations, client and server exit 0"
exit 0
