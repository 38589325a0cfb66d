#!/usr/bin/env bash
# rpc_bench_smoke: starts `rpc_bench --mode=server` (rdmarpc only) on
# 127.0.0.1, runs the client for one size with a few calls and every mode,
# and checks the JSON has each figure with the counts asked for. Numbers are
# not judged: this is not a benchmark, only proof the tool works.
#   smoke_test.sh path/to/rpc_bench
set -euo pipefail
bench=$1
dir=$(mktemp -d /tmp/rpc_bench_smoke.XXXXXX)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "rpc_bench_smoke: $*" >&2; cat "$dir"/*.log >&2 2>/dev/null || true; exit 1; }

export RDMARPC_PROVIDER=${RDMARPC_PROVIDER:-soft}
# Bad flags: exit status 2 and a message naming the flag and its value.
expect_bad_flag() {
  local want=$1
  shift
  local rc=0
  "$bench" "$@" >"$dir/bad.out" 2>"$dir/bad.log" || rc=$?
  [[ $rc == 2 ]] || fail "$* exited $rc, want 2"
  grep -qF -- "$want" "$dir/bad.log" || fail "$*: no '$want' in: $(cat "$dir/bad.log")"
}
expect_bad_flag "--duration must be >= 0 seconds (0 = until SIGINT/SIGTERM), got -1" \
  --mode=server --systems=rdmarpc --duration=-1
expect_bad_flag "--connect_timeout_ms must be >= 1, got 0" \
  --mode=client --systems=rdmarpc --port=1 --connect_timeout_ms=0
expect_bad_flag "--sizes: 'abc' is not a size" --mode=client --systems=rdmarpc --port=1 --sizes=abc
"$bench" --mode=server --systems=rdmarpc --host=127.0.0.1 --port=0 --duration=50 \
  >"$dir/server.log" 2>"$dir/server.err.log" &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) system=rdmarpc$/\1/p' "$dir/server.log")
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "server exited early"
  sleep 0.1
done
[[ -n "$port" ]] || fail "server did not print 'listening on'"

timeout 40 "$bench" --mode=client --systems=rdmarpc --host=127.0.0.1 --port="$port" \
  --modes=latency,rate,bandwidth,budget --sizes=32 --latency_calls=25 --warmup_calls=2 \
  --rate_seconds=0.2 --warmup_seconds=0.05 --concurrency=4 \
  --bandwidth_sizes=65536 --bandwidth_seconds=0.3 --bandwidth_concurrency=2 \
  --budget_runs=32x1,32x4 --budget_calls=40 \
  --json_out="$dir/out.json" --plot_dir="$dir" >"$dir/client.log" 2>"$dir/client.err.log" \
  || fail "client failed"

json=$(tr -d '\n' <"$dir/out.json")
expect() {
  grep -q -- "$1" <<<"$json" || fail "JSON lacks $1"
}
expect '"tool": "rpc_bench"'
expect '"rdmarpc": {'
# Exactly the 25 timed calls of 32 B asked for (the time budget is 2 s).
expect '{"size_bytes": 32, "calls": 25, "p50_us": [0-9.e+-]*, "p99_us": [0-9.e+-]*, "p999_us": [0-9.e+-]*, "max_us": [0-9.e+-]*, "mean_us": [0-9.e+-]*}'
expect '"rate": {"size_bytes": 32, "threads": 1, "in_flight_per_thread": 4, "calls": [1-9][0-9]*, "seconds": [0-9.e+-]*, "rpc_per_s": [0-9.e+-]*, "gb_per_s": '
expect '"bandwidth": \[ *{"size_bytes": 65536, "threads": 1, "in_flight_per_thread": 2, "calls": [1-9]'
expect '{"size_bytes": 32, "in_flight": 1, "calls": 40, *"post_send_calls_per_call": [0-9.e+-]*, "post_send_calls_per_message": '
expect '{"size_bytes": 32, "in_flight": 4, "calls": 40,'
for field in send_wrs_per_call signaled_sends_per_call send_wrs_per_signaled_send recv_wrs_per_call \
    post_recv_calls_per_call recv_wrs_per_post_recv_call completions_polled_per_call \
    poll_cq_calls_per_call reg_mr_total rnr_retries_total payload_bytes_copied_per_call; do
  expect "\"$field\": "
done
# Each call is two SEND_WITH_IMM messages at least: the per-call WR count
# cannot be below 2, so a budget of all zeros (counters not read) fails here.
grep -q '"send_wrs_per_call": \([2-9]\|[1-9][0-9]\)' <<<"$json" || fail "send_wrs_per_call < 2"
grep -q '^32 [0-9.e+-]* [0-9.e+-]* NaN NaN$' "$dir/latency.dat" || fail "latency.dat: $(cat "$dir/latency.dat")"
grep -q 'rdmarpc/' "$dir/client.log" && fail "ratio column printed with one system"
grep -q '^latency 32 B p50' "$dir/client.log" || fail "no table in the client output"
# The server stops cleanly at SIGTERM (exit 0; under ASan, no report).
kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=""
((server_rc == 0)) || fail "server exited $server_rc after SIGTERM"
grep -q '^rpc_bench: server stopped$' "$dir/server.err.log" || fail "server did not report its stop"
echo "rpc_bench_smoke: ok (port $port)"
