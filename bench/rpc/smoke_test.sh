#!/usr/bin/env bash
# rpc_bench_smoke: starts `rpc_bench --mode=server` (rdmarpc only) on
# 127.0.0.1, runs the client (receiving from a shared receive queue) for one
# size with a few calls and the unary modes, then once more (per-connection
# receive rings) with --modes=stream,mixed (short streams, a short
# phase next to 64 MiB calls), and checks the JSON has each figure with the
# counts asked for and sane values (messages > 0, p50 <= p99 <= p99.9).
# Numbers are not judged: this is not a benchmark, only proof the tool works.
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
expect_bad_flag "--modes: unknown 'streams', expected one of latency,rate,bandwidth,budget,stream,mixed" \
  --mode=client --systems=rdmarpc --port=1 --modes=stream,streams
expect_bad_flag "1 <= --stream_runs <= 100 (0)" --mode=client --systems=rdmarpc --port=1 --stream_runs=0
expect_bad_flag "1 <= --mixed_large_size <= 83881984 (83886080)" \
  --mode=client --systems=rdmarpc --port=1 --mixed_large_size=83886080
expect_bad_flag "--stream_sizes: '67108864' is not a size in bytes from 0 to 67104768" \
  --mode=client --systems=rdmarpc --port=1 --stream_sizes=32,67108864
expect_bad_flag "--client_receive_queue must be shared or per-connection, got 'srq'" \
  --mode=client --systems=rdmarpc --port=1 --client_receive_queue=srq
: >"$dir/server.log"  # the background job opens it only when it runs
"$bench" --mode=server --systems=rdmarpc --host=127.0.0.1 --port=0 --duration=100 \
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
  --client_receive_queue=shared --modes=latency,rate,bandwidth,budget --sizes=32 \
  --latency_calls=25 --warmup_calls=2 \
  --rate_seconds=0.2 --warmup_seconds=0.05 --concurrency=4 \
  --bandwidth_sizes=65536 --bandwidth_seconds=0.3 --bandwidth_concurrency=2 \
  --budget_runs=32x1,32x4 --budget_calls=40 --server_pid="$server_pid" \
  --json_out="$dir/out.json" --plot_dir="$dir" >"$dir/client.log" 2>"$dir/client.err.log" \
  || fail "client failed"

json=$(tr -d '\n' <"$dir/out.json")
expect() {
  grep -q -- "$1" <<<"$json" || fail "JSON lacks $1"
}
expect '"tool": "rpc_bench"'
expect '"rdmarpc": {'
# Exactly the 25 timed calls of 32 B asked for (the time budget is 2 s).
expect '{"size_bytes": 32, "calls": 25, "p50_us": [0-9.e+-]*, "p99_us": [0-9.e+-]*, "p999_us": [0-9.e+-]*, "max_us": [0-9.e+-]*, "mean_us": [0-9.e+-]*, "client_cpu_us_per_call": [0-9.e+-]*, "server_cpu_us_per_call": [0-9.e+-]*}'
# Both processes' CPU per call over the rate phase (the server's from its
# /proc/<pid>/stat, --server_pid), and the figure that adds them.
expect '"gb_per_s": [0-9.e+-]*, "client_cpu_us_per_call": [0-9.e+-]*, "server_cpu_us_per_call": [0-9.e+-]*}'
grep -q 'rate CPU/call both' "$dir/client.log" || fail "no 'rate CPU/call both' row in the table"
expect '"rate": {"size_bytes": 32, "threads": 1, "in_flight_per_thread": 4, "calls": [1-9][0-9]*, "seconds": [0-9.e+-]*, "rpc_per_s": [0-9.e+-]*, "gb_per_s": '
expect '"bandwidth": \[ *{"size_bytes": 65536, "threads": 1, "in_flight_per_thread": 2, "calls": [1-9]'
# The same size again with the payload as an rdmarpc::Buffer attachment.
expect '{"size_bytes": 65536, "threads": 1, "in_flight_per_thread": 2, "calls": [1-9][^}]*"buffer_payload": true}'
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
# Streaming and mixed, on the same server: two short streams per size, and
# 32 B calls alone then next to the default 64 MiB calls (over the default
# 64 MiB max_message_bytes: the server's and the mixed channel's limit is
# 80 MiB).
timeout 50 "$bench" --mode=client --systems=rdmarpc --host=127.0.0.1 --port="$port" \
  --modes=stream,mixed --stream_sizes=32,4096 --stream_messages=500 --stream_runs=2 \
  --mixed_calls=200 --mixed_seconds=0.2 --warmup_calls=2 \
  --json_out="$dir/stream.json" >"$dir/stream_client.log" 2>"$dir/stream_client.err.log" \
  || fail "stream/mixed client failed"
json=$(tr -d '\n' <"$dir/stream.json")
num='[0-9.e+-]*'
# Every value of "FIELD": in the text $2 is > 0 (and there is one).
positive() {
  local values
  values=$(grep -o "\"$1\": $num" <<<"$2" | sed 's/.*: //')
  [[ -n "$values" ]] || fail "no $1 in: $2"
  awk '$1 <= 0 { bad = 1 } END { exit bad }' <<<"$values" || fail "$1 not > 0: $values"
}
for size in 32 4096; do
  expect "{\"size_bytes\": $size, \"runs\": 2, \"messages_per_run\": 500, \"run_seconds\": \[$num, $num\], \"median_seconds\": $num, \"messages_per_s\": $num, \"mb_per_s\": $num}"
done
positive messages_per_s "$json"
positive mb_per_s "$json"
positive median_seconds "$json"
expect '"mixed": {"small_size_bytes": 32, "large_size_bytes": 67108864, "pool_size": 1,'
expect "\"large_calls\": [1-9][0-9]*, \"large_seconds\": $num, \"large_calls_per_s\": $num, \"large_gb_per_s\": $num}"
positive large_gb_per_s "$json"
# Each phase: at least one timed call and 0 < p50 <= p99 <= p99.9 <= max.
value() { sed -n "s/.*\"$1\": \($num\).*/\1/p" <<<"$2"; }
for phase in alone loaded; do
  fields=$(sed -n "s/.*\"$phase\": {\([^}]*\)}.*/\1/p" <<<"$json")
  [[ -n "$fields" ]] || fail "JSON lacks mixed.$phase"
  awk -v calls="$(value calls "$fields")" -v p50="$(value p50_us "$fields")" \
      -v p99="$(value p99_us "$fields")" -v p999="$(value p999_us "$fields")" \
      -v max="$(value max_us "$fields")" \
      'BEGIN { exit !(calls >= 1 && p50 > 0 && p50 <= p99 && p99 <= p999 && p999 <= max) }' \
    || fail "mixed.$phase not ordered: $fields"
done
grep -q '^stream 4 KiB messages  *msg/s' "$dir/stream_client.log" || fail "no stream rows in the table"
grep -q '^mixed 32 B p99 +64 MiB  *us' "$dir/stream_client.log" || fail "no mixed rows in the table"
# The server stops cleanly at SIGTERM (exit 0; under ASan, no report).
kill -TERM "$server_pid"
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=""
((server_rc == 0)) || fail "server exited $server_rc after SIGTERM"
grep -q '^rpc_bench: server stopped$' "$dir/server.err.log" || fail "server did not report its stop"
echo "rpc_bench_smoke: ok (port $port)"
