#!/usr/bin/env bash
# prometheus_e2e.sh: a real Prometheus server (Debian's `prometheus`) on
# loopback scrapes kvstore_server's admin endpoint while kvstore_client makes
# a known number of calls of each kind and status; the counters are read back
# through Prometheus' HTTP query API and compared exactly. promtool checks the
# endpoint's /metrics as well.
#
#   prometheus_e2e.sh KVSTORE_SERVER KVSTORE_CLIENT HTTP_GET
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

SERVER_BIN="$1"
CLIENT="$2"
HTTP_GET="$3"
command -v prometheus >/dev/null || skip "prometheus not installed (scripts/install-deps.sh installs it)"
command -v promtool >/dev/null || skip "promtool not installed"

start_server kvstore "$SERVER_BIN" --rdmarpc_admin_listen=127.0.0.1:0
ADMIN=""
deadline=$((SECONDS + 10))
while [[ -z "$ADMIN" ]] && ((SECONDS < deadline)); do
  ADMIN="$(sed -n 's|.*rdmarpc admin endpoint on http://\([0-9.]*:[0-9]*\)/.*|\1|p' \
    "$SCRATCH/kvstore.err" | head -n 1)"
  [[ -n "$ADMIN" ]] || sleep 0.05
done
[[ -n "$ADMIN" ]] || fail "kvstore_server did not log its admin endpoint"
"$HTTP_GET" "$ADMIN" /healthz >"$SCRATCH/healthz.out" || fail "/healthz of a serving server"
[[ "$(cat "$SCRATCH/healthz.out")" == ok ]] || fail "/healthz said: $(cat "$SCRATCH/healthz.out")"

# --- Prometheus on a free loopback port, scraping every 500 ms
cat >"$SCRATCH/prometheus.yml" <<YAML
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: kvstore
    static_configs:
      - targets: ['$ADMIN']
YAML
promtool check config "$SCRATCH/prometheus.yml" >"$SCRATCH/promtool-config.out" 2>&1 ||
  fail "promtool check config"
PROM_PID=""
PROM=""
# PROM_PID is timeout(1)'s: kill prometheus under it too.
stop_prometheus() {
  [[ -n "$PROM_PID" ]] || return 0
  kill_tree "$PROM_PID"
  PROM_PID=""
}
CLEANUP_HOOKS+=('stop_prometheus')
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  timeout --kill-after=5 300 prometheus --config.file="$SCRATCH/prometheus.yml" \
    --storage.tsdb.path="$SCRATCH/tsdb.$attempt" --web.listen-address="127.0.0.1:$port" \
    >"$SCRATCH/prometheus.out" 2>"$SCRATCH/prometheus.err" &
  PROM_PID=$!
  deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)) && kill -0 "$PROM_PID" 2>/dev/null; do
    if "$HTTP_GET" "127.0.0.1:$port" /-/ready >/dev/null 2>&1; then
      PROM="127.0.0.1:$port"
      break
    fi
    sleep 0.2
  done
  [[ -n "$PROM" ]] && break
  stop_prometheus
done
[[ -n "$PROM" ]] || fail "prometheus did not become ready"

# query PROMQL: prints the value of the query's one sample ("" when none).
query() {
  "$HTTP_GET" --promql "$PROM" "$1" >"$SCRATCH/query.out" 2>"$SCRATCH/query.err" ||
    fail "query $1: $(cat "$SCRATCH/query.err")"
  sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p' "$SCRATCH/query.out"
}

# expect_query PROMQL WANT
expect_query() {
  local got
  got="$(query "$1")"
  [[ "$got" == "$2" ]] || fail "$1 = '$got', want $2 ($(cat "$SCRATCH/query.out"))"
}

# --- the calls: 10 in all
kv() {
  run_bounded 60 "$CLIENT" --server="$SERVER_ADDR" "$@" >>"$SCRATCH/client.out" 2>>"$SCRATCH/client.err"
}
head -c 2500 /dev/zero | tr '\0' v >"$SCRATCH/value"
for key in a b c; do kv put "$key" "$SCRATCH/value" || fail "put $key"; done  # Put OK x3
kv get a - >/dev/null || fail "get a"                                         # Get OK
kv get missing1 - && fail "get of a missing key succeeded"                    # Get NotFound
kv get missing2 - && fail "get of a missing key succeeded"                    # Get NotFound
kv list || fail "list"                                                         # List OK
kv --chunk_bytes=1000 putstream s "$SCRATCH/value" || fail "putstream"        # 1000+1000+500
kv --chunk_bytes=1000 getstream s "$SCRATCH/got" || fail "getstream"          # 3 chunks
kv getstream missing3 "$SCRATCH/none" && fail "getstream of a missing key succeeded"
cmp -s "$SCRATCH/value" "$SCRATCH/got" || fail "getstream returned other bytes"

# Wait for a scrape that saw the last call.
LAST='grpc_server_handled_total{grpc_method="GetStream",grpc_code="NotFound"}'
deadline=$((SECONDS + 30))
while [[ "$(query "sum($LAST)")" != 1 ]]; do
  ((SECONDS < deadline)) || fail "Prometheus never saw the last call ($(cat "$SCRATCH/query.out"))"
  sleep 0.2
done

S='grpc_service="rdmarpc.examples.KvStore"'
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"Put\",grpc_code=\"OK\"})" 3
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"Get\",grpc_code=\"OK\"})" 1
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"Get\",grpc_code=\"NotFound\"})" 2
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"List\",grpc_code=\"OK\"})" 1
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"PutStream\",grpc_type=\"client_stream\",grpc_code=\"OK\"})" 1
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"GetStream\",grpc_type=\"server_stream\",grpc_code=\"OK\"})" 1
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"GetStream\",grpc_code=\"NotFound\"})" 1
expect_query "sum(grpc_server_handled_total{$S,grpc_method=\"Delete\"})" 0
expect_query "sum(grpc_server_handled_total{$S})" 10
expect_query "sum(grpc_server_started_total{$S,grpc_method=\"Get\",grpc_type=\"unary\"})" 3
expect_query "sum(grpc_server_msg_received_total{$S,grpc_method=\"PutStream\"})" 3
expect_query "sum(grpc_server_msg_sent_total{$S,grpc_method=\"GetStream\"})" 3
expect_query "sum(grpc_server_msg_sent_total{$S,grpc_method=\"Get\"})" 1
# The histograms count every call, once.
expect_query "sum(grpc_server_handling_seconds_count{$S,grpc_method=\"Get\"})" 3
expect_query "sum(grpc_server_handling_seconds_bucket{$S,grpc_method=\"Put\",le=\"+Inf\"})" 3
expect_query "sum(grpc_server_handling_seconds_count{$S})" 10
expect_query 'sum(up{job="kvstore"})' 1
# The transport's side: each of the 10 client runs connected at least once.
expect_query 'sum(rdmarpc_connections_established_total) >= bool 10' 1

# --- promtool accepts the exposition (format and naming lint)
"$HTTP_GET" "$ADMIN" /metrics >"$SCRATCH/metrics.txt" || fail "GET /metrics"
promtool check metrics <"$SCRATCH/metrics.txt" >"$SCRATCH/promtool.out" 2>&1 ||
  fail "promtool check metrics: $(cat "$SCRATCH/promtool.out")"

stop_server
stop_prometheus
pass "Prometheus scraped kvstore_server: 10 calls, 19 exact queries, promtool clean"
