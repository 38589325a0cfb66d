#!/usr/bin/env bash
# health_probe_e2e.sh EXIT HEALTH_PROBE HEALTH_TEST_SERVER
#
# health_probe's grpc_health_probe exit codes, one per ctest, against a real
# server on 127.0.0.1 (health_test_server, over softrdma):
#   0  SERVING: the whole server and a SERVING service, in each flag form Go's
#      flag package takes (-addr=X, -addr X, --addr=X, --addr X) and with
#      durations such as 250ms and 1m
#   1  bad arguments (no server needed): each check's message
#   2  connection failure: a server that has exited
#   3  RPC failure: an unknown service (NOT_FOUND); a server without the
#      health service (UNIMPLEMENTED)
#   4  not serving: a NOT_SERVING service
# Each probe's stderr line is compared whole.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

EXIT="$1"
PROBE="$2"
TEST_SERVER="$3"

# probe WANT_EXIT WANT_LINE ARGS...: runs the probe; its exit status and its
# last stderr line must be WANT_EXIT and WANT_LINE (a trailing * in WANT_LINE
# matches any rest).
probe() {
  local want_exit="$1" want_line="$2"
  shift 2
  local status=0
  run_bounded 30 "$PROBE" "$@" >"$SCRATCH/probe.out" 2>"$SCRATCH/probe.err" || status=$?
  local line
  line="$(last_line "$SCRATCH/probe.err")"
  echo "health_probe $*: exit $status: $line"
  [[ "$status" == "$want_exit" ]] || fail "health_probe $*: exit $status, want $want_exit"
  # shellcheck disable=SC2053  # a glob on purpose
  [[ "$line" == $want_line ]] || fail "health_probe $*: '$line', want '$want_line'"
  [[ ! -s "$SCRATCH/probe.out" ]] || fail "health_probe $*: wrote to stdout: $(cat "$SCRATCH/probe.out")"
}

case "$EXIT" in
  0)
    start_server server "$TEST_SERVER" --serving=acme.Up --not_serving=acme.Down
    probe 0 "status: SERVING" -addr="$SERVER_ADDR"
    probe 0 "status: SERVING" -addr "$SERVER_ADDR" -service acme.Up
    probe 0 "status: SERVING" --addr="$SERVER_ADDR" --service=acme.Up --connect-timeout=250ms --rpc-timeout=1m
    probe 0 "status: SERVING" --addr "$SERVER_ADDR" -connect-timeout 2s -rpc-timeout 1.5s --
    probe 0 "status: SERVING" -addr="$SERVER_ADDR" -service=acme.Up -v
    first="$(head -n 1 "$SCRATCH/probe.err")"
    [[ "$first" =~ ^time\ elapsed:\ [0-9.]+(us|ms|s)$ ]] || fail "-v: first line '$first', want 'time elapsed: DURATION'"
    probe 0 "status: SERVING" -addr=":${SERVER_ADDR##*:}"  # ":PORT" is this machine
    stop_server
    pass "SERVING: exit 0 in every flag form"
    ;;
  1)
    probe 1 "error: -addr not specified"
    probe 1 "error: -addr not specified" -service=acme.Up
    probe 1 "error: flag provided but not defined: -server" --server=127.0.0.1:1
    probe 1 "error: flag provided but not defined: -tls" -addr=127.0.0.1:1 -tls
    probe 1 "error: flag needs an argument: -addr" -addr
    probe 1 "error: invalid value \"1\" for flag -rpc-timeout: parse error" -addr=127.0.0.1:1 -rpc-timeout=1
    probe 1 "error: invalid value \"soon\" for flag -connect-timeout: parse error" -addr=127.0.0.1:1 -connect-timeout soon
    probe 1 "error: -connect-timeout must be greater than zero (specified: 0)" -addr=127.0.0.1:1 -connect-timeout=0s
    probe 1 "error: -rpc-timeout must be greater than zero (specified: -1s)" -addr=127.0.0.1:1 -rpc-timeout=-1s
    probe 1 "error: bad flag syntax: ---addr=x" ---addr=x
    probe 1 "error: unexpected argument \"7000\" after the flags" -addr 127.0.0.1 7000
    probe 1 "error: -addr \"no-port\": INVALID_ARGUMENT: *" -addr=no-port
    probe 1 "The provider comes from RDMARPC_PROVIDER (auto, rdma-core, soft)." -h
    pass "bad arguments: exit 1"
    ;;
  2)
    start_server server "$TEST_SERVER"
    addr="$SERVER_ADDR"
    stop_server
    probe 2 "error: failed to connect service at \"$addr\": UNAVAILABLE: *" -addr="$addr" -connect-timeout=2s
    pass "no server: exit 2"
    ;;
  3)
    start_server server "$TEST_SERVER" --serving=acme.Up
    probe 3 "error: health rpc failed: NOT_FOUND: unknown service 'acme.Nobody'" -addr="$SERVER_ADDR" -service=acme.Nobody
    stop_server
    start_server server "$TEST_SERVER" --serve_health=false
    probe 3 "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): method /grpc.health.v1.Health/Check is not implemented by this server" -addr="$SERVER_ADDR"
    stop_server
    pass "unknown service, no health service: exit 3"
    ;;
  4)
    start_server server "$TEST_SERVER" --serving=acme.Up --not_serving=acme.Down
    probe 4 "service unhealthy (responded with \"NOT_SERVING\")" -addr="$SERVER_ADDR" -service=acme.Down
    stop_server
    pass "NOT_SERVING: exit 4"
    ;;
  *)
    echo "usage: $0 0|1|2|3|4 HEALTH_PROBE HEALTH_TEST_SERVER" >&2
    exit 2
    ;;
esac
