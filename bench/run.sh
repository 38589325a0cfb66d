#!/usr/bin/env bash
# bench/run.sh: rdmarpc vs gRPC on this host, the issue-4 comparison.
#
# Installs the bench packages (scripts/install-deps.sh --bench), builds
# rpc_bench in Release into build/release, starts one rpc_bench server
# serving both systems pinned to core 1, runs the client pinned to core 0 with
# RDMARPC_PROVIDER=soft (override in the environment), and writes
#   bench/results/<YYYY-MM-DD>.json       both systems and the ratios
#                                         (<YYYY-MM-DD>-partial.json when flags narrow the run)
#   bench/results/latency_vs_size.png     p50 and p99 vs payload size, log-log
#   bench/results/throughput.png          RPC/s (32 B) and GB/s (1, 16 MiB)
# then prints the summary table (ratio = rdmarpc/gRPC; below 1 is better for
# latency, above 1 for throughput). The client's default --modes include
# the rdmarpc-only stream and mixed workloads (gRPC's cells say n/a; about
# 10 s of the run). Extra arguments go to the client, e.g.
#   bench/run.sh --modes=latency --sizes=32,4096
#   bench/run.sh --modes=stream,mixed
#   RDMARPC_BENCH_SHARED_CORE=1 bench/run.sh --modes=latency,rate
#                                  (both processes on core 0; <date>-shared-core*.json)
# The CPU/call figures are user + system time of both processes (the
# server's read from /proc/<pid>/stat) over each measured phase.
# Takes about 2 minutes after the build. Exit status: 0 on success.
# softrdma acknowledges in a thread of the receiving process, not in a NIC: a
# process stalled past the QP's transport timeout (~0.5 s; e.g. run under
# `nice` on a busy host) loses its connections, and the client fails with
# "connection ... lost: peer disconnected" (the server's log, shown on
# failure, names "transport retry counter exceeded"). Run on a quiet host.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --bench

build_dir=${RDMARPC_BENCH_BUILD_DIR:-build/release}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DRDMARPC_BUILD_TESTS=OFF \
  -DRDMARPC_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build_dir" --target rpc_bench -j "$(nproc)"
bench="$build_dir/bench/rpc/rpc_bench"

export RDMARPC_PROVIDER=${RDMARPC_PROVIDER:-soft}
results=bench/results
mkdir -p "$results"
# A full run writes <date>.json and the plots; a run narrowed by flags
# (--modes, --sizes, ...) writes <date>-partial.json and *-partial.png, so it
# never replaces the day's full result.
suffix=""
[[ $# -eq 0 ]] || suffix="-partial"
json="$results/$(date -u +%Y-%m-%d)$suffix.json"
work=$(mktemp -d /tmp/rdmarpc-bench.XXXXXX)

# Client and server on different cores; with one core there is nothing to pin.
# RDMARPC_BENCH_SHARED_CORE=1 pins both to core 0 instead: an oversubscribed
# host, where every spinning thread takes time from the one it waits for.
server_pin=() client_pin=()
if [[ "${RDMARPC_BENCH_SHARED_CORE:-0}" == 1 ]] && command -v taskset >/dev/null; then
  server_pin=(taskset -c 0)
  client_pin=(taskset -c 0)
  suffix="-shared-core$suffix"
  json="$results/$(date -u +%Y-%m-%d)$suffix.json"
elif (($(nproc) >= 2)) && command -v taskset >/dev/null; then
  server_pin=(taskset -c 1)
  client_pin=(taskset -c 0)
fi

server_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  # On failure the server's log is the evidence (a closed connection names
  # its reason there only): show it before the work directory goes.
  if ((rc != 0)) && [[ -s "$work/server.err" ]]; then
    echo "run.sh: exit status $rc; the server's log (last 40 lines):" >&2
    tail -n 40 "$work/server.err" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: >"$work/server.out"  # the background job opens it only when it runs
"${server_pin[@]}" "$bench" --mode=server --systems=rdmarpc,grpc --host=127.0.0.1 \
  --port=0 --grpc_port=0 >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
port="" grpc_port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) system=rdmarpc$/\1/p' "$work/server.out")
  grpc_port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) system=grpc$/\1/p' "$work/server.out")
  [[ -n "$port" && -n "$grpc_port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$port" || -z "$grpc_port" ]]; then
  cat "$work/server.out" "$work/server.err" >&2
  echo "run.sh: the server did not start (is the build missing gRPC?)" >&2
  exit 1
fi
echo "run.sh: server on 127.0.0.1 rdmarpc :$port, gRPC :$grpc_port (${server_pin[*]:-unpinned})"

started=$SECONDS
"${client_pin[@]}" "$bench" --mode=client --systems=rdmarpc,grpc --host=127.0.0.1 \
  --port="$port" --grpc_port="$grpc_port" --server_pid="$server_pid" --json_out="$json" \
  --plot_dir="$work" "$@" \
  | tee "$work/table.txt"

# Plots: both systems on each; "NaN" (a figure one system lacks) is skipped.
# A plot or panel whose workload did not run (--modes) is left out.
has_data() { grep -qv '^#' "$1" 2>/dev/null; }
written=("$json")
plot="set terminal pngcairo size 900,600 font \",10\" noenhanced"
if has_data "$work/latency.dat"; then
  written+=("$results/latency_vs_size$suffix.png")
  plot+="
set output \"$results/latency_vs_size$suffix.png\"
set title \"Echo latency, one call at a time (RDMARPC_PROVIDER=$RDMARPC_PROVIDER)\"
set logscale xy
set xlabel \"payload bytes (request = response)\"
set ylabel \"latency, us\"
set grid
set key top left
plot \"$work/latency.dat\" using 1:2 with linespoints lw 2 pt 7 title \"rdmarpc p50\", \\
     \"\" using 1:3 with linespoints lw 1 pt 6 dt 2 title \"rdmarpc p99\", \\
     \"\" using 1:4 with linespoints lw 2 pt 5 title \"gRPC p50\", \\
     \"\" using 1:5 with linespoints lw 1 pt 4 dt 2 title \"gRPC p99\"
unset logscale"
fi
panels=0
has_data "$work/rate.dat" && panels=$((panels + 1))
has_data "$work/bandwidth.dat" && panels=$((panels + 1))
if ((panels > 0)); then
  written+=("$results/throughput$suffix.png")
  plot+="
set output \"$results/throughput$suffix.png\"
set multiplot layout 1,$panels title \"Throughput (RDMARPC_PROVIDER=$RDMARPC_PROVIDER)\"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set grid
set key top right
set xlabel \"payload x calls in flight\""
  if has_data "$work/rate.dat"; then
    plot+="
set ylabel \"RPC/s\"
set title \"message rate\"
plot \"$work/rate.dat\" using 2:xtic(1) title \"rdmarpc\", \"\" using 3 title \"gRPC\""
  fi
  if has_data "$work/bandwidth.dat"; then
    plot+="
set ylabel \"GB/s (10^9 B/s, request + response)\"
set title \"bandwidth\"
plot \"$work/bandwidth.dat\" using 2:xtic(1) title \"rdmarpc\", \"\" using 3 title \"gRPC\""
  fi
  plot+="
unset multiplot"
fi
gnuplot <<<"$plot"

echo
echo "run.sh: measured for $((SECONDS - started)) s; wrote ${written[*]}"
echo "run.sh: summary (ratio = rdmarpc/gRPC: < 1 is better for latency, > 1 for rates)"
sed -n '/^figure/,$p' "$work/table.txt"
