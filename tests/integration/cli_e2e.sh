#!/usr/bin/env bash
# cli_e2e.sh: rdmarpc_cli's ls, describe, call and health against the
# example servers, comparing stdout, stderr and the exit status exactly.
#
#   cli_e2e.sh echo|kvstore|health SERVER_BINARY RDMARPC_CLI_BINARY
#
# health runs `health` (and `ls` without reflection) against
# tests/integration/health_test_server.
# In the expected text, "ADDR" stands for the server's HOST:PORT.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

EXAMPLE="$1"
SERVER="$2"
CLI="$3"
CASES=0

# expect NAME EXIT [--stdin FILE] ARG... <<'WANT'
# stdout, line for line
# --- stderr
# stderr, line for line
# WANT
# Runs rdmarpc_cli ARG... (standard input from FILE, else empty) and
# compares its exit status, stdout and stderr with what the here-document
# says (a part left out must be empty). Give the expected text as a
# here-document or here-string, never as `... | expect`: a pipe would run
# expect in a subshell, where a failure does not end the test.
expect() {
  local name="$1" want_exit="$2"
  shift 2
  local input=/dev/null
  if [[ "${1:-}" == --stdin ]]; then
    input="$2"
    shift 2
  fi
  awk -v o="$SCRATCH/$name.want.out" -v e="$SCRATCH/$name.want.err" \
    'BEGIN { f = o; printf "" > o; printf "" > e } /^--- stderr$/ { f = e; next } { print > f }'
  local status=0
  run_bounded 60 "$CLI" "$@" <"$input" >"$SCRATCH/$name.raw.out" 2>"$SCRATCH/$name.raw.err" ||
    status=$?
  local stream
  for stream in out err; do
    sed "s/$SERVER_ADDR/ADDR/g" "$SCRATCH/$name.raw.$stream" >"$SCRATCH/$name.$stream"
    diff -u "$SCRATCH/$name.want.$stream" "$SCRATCH/$name.$stream" ||
      fail "$name: std$stream of rdmarpc_cli $*"
  done
  [[ "$status" == "$want_exit" ]] || fail "$name: exit $status, want $want_exit: rdmarpc_cli $*"
  CASES=$((CASES + 1))
}

if [[ "$EXAMPLE" == health ]]; then
  # health_test_server: grpc.health.v1 and no reflection.
  start_server server "$SERVER" --serving=a.Up --not_serving=a.Down
  A="$SERVER_ADDR"
  expect health 0 health "$A" <<<'SERVING'
  expect health_up 0 health "$A" a.Up <<<'SERVING'
  expect health_down 4 health "$A" a.Down <<<'NOT_SERVING'
  # v1 first, then v1alpha: the error is the second's.
  expect ls_no_reflection 2 ls "$A" <<'WANT'
--- stderr
UNIMPLEMENTED: method /grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo is not implemented by this server
WANT
  stop_server
  # A server with only grpc.reflection.v1alpha (older gRPC): ls and
  # describe fall back to it.
  start_server server "$SERVER" --serving=a.Up --v1alpha_reflection
  A="$SERVER_ADDR"
  expect ls_v1alpha 0 ls "$A" <<'WANT'
grpc.health.v1.Health
grpc.reflection.v1alpha.ServerReflection
WANT
  expect ls_v1alpha_service 0 ls "$A" grpc.health.v1.Health <<'WANT'
Check
List
Watch
WANT
  stop_server
  pass "rdmarpc_cli health against health_test_server: $CASES cases"
fi

start_server server "$SERVER"
A="$SERVER_ADDR"

# --- every server: ls, health, the errors that do not depend on the service
case "$EXAMPLE" in
  echo) SERVICE=rdmarpc.examples.EchoService ;;
  kvstore) SERVICE=rdmarpc.examples.KvStore ;;
  *) fail "unknown example '$EXAMPLE'" ;;
esac

expect ls 0 ls "$A" <<WANT
grpc.health.v1.Health
grpc.reflection.v1.ServerReflection
grpc.reflection.v1alpha.ServerReflection
$SERVICE
WANT

expect health 0 health "$A" <<'WANT'
SERVING
WANT
expect health_service 0 health "$A" "$SERVICE" <<<'SERVING'
expect health_unknown 2 health "$A" no.such.Service <<'WANT'
--- stderr
NOT_FOUND: unknown service 'no.such.Service'
WANT
expect describe_unknown 2 describe "$A" no.such.Symbol <<'WANT'
--- stderr
NOT_FOUND: Symbol not found: no.such.Symbol
WANT
expect ls_unknown 2 ls "$A" no.such.Service <<'WANT'
--- stderr
NOT_FOUND: Symbol not found: no.such.Service
WANT
expect call_no_method 2 call "$A" "$SERVICE/Nope" '' <<WANT
--- stderr
NOT_FOUND: service $SERVICE has no method Nope
WANT
expect call_bad_name 1 call "$A" Nope '' <<'WANT'
--- stderr
INVALID_ARGUMENT: method "Nope": want SERVICE/METHOD, e.g. pkg.Service/Method
WANT
expect bad_flag 1 ls "$A" --nope <<'WANT'
--- stderr
INVALID_ARGUMENT: unknown flag --nope
WANT
expect bad_command 1 lsx "$A" <<'WANT'
--- stderr
INVALID_ARGUMENT: unknown command "lsx"; rdmarpc_cli -h lists them
WANT

case "$EXAMPLE" in
  echo)
    expect ls_service 0 ls "$A" rdmarpc.examples.EchoService <<'WANT'
Echo
WANT
    expect ls_long_all 0 ls -l "$A" <<'WANT'
filename: grpc/health/v1/health.proto
package: grpc.health.v1;
service Health {
  rpc Check(.grpc.health.v1.HealthCheckRequest) returns (.grpc.health.v1.HealthCheckResponse);
  rpc List(.grpc.health.v1.HealthListRequest) returns (.grpc.health.v1.HealthListResponse);
  rpc Watch(.grpc.health.v1.HealthCheckRequest) returns (stream .grpc.health.v1.HealthCheckResponse);
}
filename: grpc/reflection/v1/reflection.proto
package: grpc.reflection.v1;
service ServerReflection {
  rpc ServerReflectionInfo(stream .grpc.reflection.v1.ServerReflectionRequest) returns (stream .grpc.reflection.v1.ServerReflectionResponse);
}
filename: grpc/reflection/v1alpha/reflection.proto
package: grpc.reflection.v1alpha;
service ServerReflection {
  rpc ServerReflectionInfo(stream .grpc.reflection.v1alpha.ServerReflectionRequest) returns (stream .grpc.reflection.v1alpha.ServerReflectionResponse);
}
filename: echo.proto
package: rdmarpc.examples;
service EchoService {
  rpc Echo(.rdmarpc.examples.EchoRequest) returns (.rdmarpc.examples.EchoResponse);
}
WANT
    expect ls_long 0 ls -l "$A" rdmarpc.examples.EchoService <<'WANT'
rpc Echo(.rdmarpc.examples.EchoRequest) returns (.rdmarpc.examples.EchoResponse);
WANT
    expect describe_service 0 describe "$A" rdmarpc.examples.EchoService <<'WANT'
service EchoService {
  rpc Echo(.rdmarpc.examples.EchoRequest) returns (.rdmarpc.examples.EchoResponse);
}
WANT
    expect describe_method 0 describe "$A" rdmarpc.examples.EchoService.Echo <<'WANT'
rpc Echo(.rdmarpc.examples.EchoRequest) returns (.rdmarpc.examples.EchoResponse);
WANT
    expect describe_message 0 describe "$A" rdmarpc.examples.EchoRequest <<'WANT'
message EchoRequest {
  bytes payload = 1;
  uint32 server_delay_ms = 2;
}
WANT
    expect call 0 call "$A" rdmarpc.examples.EchoService/Echo 'payload: "hello"' <<'WANT'
payload: "hello"
WANT
    expect call_metadata 0 call "$A" /rdmarpc.examples.EchoService/Echo 'payload: "hi"' \
      --metadata user=cli --metadata=trace-id=7 <<'WANT'
payload: "hi"
WANT
    # "aGk=" is base64 for "hi": proto3's JSON mapping of bytes.
    expect call_json 0 call "$A" rdmarpc.examples.EchoService.Echo '{"payload": "aGk="}' --json <<'WANT'
{"payload":"aGk="}
WANT
    printf 'payload: "from stdin"\n' >"$SCRATCH/one.in"
    expect call_stdin 0 --stdin "$SCRATCH/one.in" call "$A" rdmarpc.examples.EchoService/Echo <<'WANT'
payload: "from stdin"
WANT
    expect call_bad_request 1 call "$A" rdmarpc.examples.EchoService/Echo 'nope: 1' <<'WANT'
--- stderr
INVALID_ARGUMENT: cannot parse request: 1:5: Message type "rdmarpc.examples.EchoRequest" has no field named "nope".
WANT
    # A bidi-streaming method: the server's own reflection, one request a line.
    printf '%s\n' 'list_services: ""' 'file_containing_symbol: "no.such.Symbol"' >"$SCRATCH/bidi.in"
    expect call_bidi 0 --stdin "$SCRATCH/bidi.in" \
      call "$A" grpc.reflection.v1.ServerReflection/ServerReflectionInfo <<'WANT'
original_request { list_services: "" } list_services_response { service { name: "grpc.health.v1.Health" } service { name: "grpc.reflection.v1.ServerReflection" } service { name: "grpc.reflection.v1alpha.ServerReflection" } service { name: "rdmarpc.examples.EchoService" } }
original_request { file_containing_symbol: "no.such.Symbol" } error_response { error_code: 5 error_message: "Symbol not found: no.such.Symbol" }
WANT
    expect call_deadline 2 call "$A" rdmarpc.examples.EchoService/Echo 'server_delay_ms: 2000' \
      --timeout_ms 100 <<'WANT'
--- stderr
DEADLINE_EXCEEDED: /rdmarpc.examples.EchoService/Echo to ADDR exceeded its deadline
WANT
    ;;
  kvstore)
    expect ls_service 0 ls "$A" rdmarpc.examples.KvStore <<'WANT'
Put
Get
Delete
List
PutStream
GetStream
WANT
    expect describe_method 0 describe "$A" rdmarpc.examples.KvStore.GetStream <<'WANT'
rpc GetStream(.rdmarpc.examples.GetRequest) returns (stream .rdmarpc.examples.GetChunk);
WANT
    expect describe_message 0 describe "$A" rdmarpc.examples.GetChunk <<'WANT'
message GetChunk {
  bytes data = 1;
  uint64 total_bytes = 2;
}
WANT
    expect describe_field 0 describe "$A" rdmarpc.examples.GetChunk.total_bytes <<'WANT'
uint64 total_bytes = 2;
WANT
    expect describe_enum 0 describe "$A" grpc.health.v1.HealthCheckResponse.ServingStatus <<'WANT'
enum ServingStatus {
  UNKNOWN = 0;
  SERVING = 1;
  NOT_SERVING = 2;
  SERVICE_UNKNOWN = 3;
}
WANT
    expect describe_enum_value 0 describe "$A" grpc.health.v1.HealthCheckResponse.SERVING <<<'SERVING = 1;'
    # Fields at their default (replaced: false) are not printed: an empty line.
    expect put 0 call "$A" rdmarpc.examples.KvStore/Put 'key: "a" value: "hello"' <<<''
    expect put_again 0 call "$A" rdmarpc.examples.KvStore/Put 'key: "a" value: "hello"' <<'WANT'
replaced: true
WANT
    expect get 0 call "$A" rdmarpc.examples.KvStore/Get 'key: "a"' <<'WANT'
value: "hello"
WANT
    expect get_json 0 call "$A" rdmarpc.examples.KvStore/Get '{"key": "a"}' --json <<'WANT'
{"value":"aGVsbG8="}
WANT
    expect get_stream 0 call "$A" rdmarpc.examples.KvStore/GetStream 'key: "a" chunk_bytes: 2' <<'WANT'
data: "he" total_bytes: 5
data: "ll" total_bytes: 5
data: "o" total_bytes: 5
WANT
    printf '%s\n' 'key: "b" data: "xy" total_bytes: 3' 'data: "z"' >"$SCRATCH/chunks.in"
    expect put_stream 0 --stdin "$SCRATCH/chunks.in" call "$A" rdmarpc.examples.KvStore/PutStream <<<''
    expect list 0 call "$A" rdmarpc.examples.KvStore/List '' <<'WANT'
keys: "a" keys: "b"
WANT
    expect get_streamed 0 call "$A" rdmarpc.examples.KvStore/Get 'key: "b"' <<'WANT'
value: "xyz"
WANT
    printf '%s\n' 'key: "c" data: "x"' 'data: nope' >"$SCRATCH/bad.in"
    expect put_stream_bad_line 1 --stdin "$SCRATCH/bad.in" call "$A" rdmarpc.examples.KvStore/PutStream <<'WANT'
--- stderr
INVALID_ARGUMENT: cannot parse request: 2:7: Expected string, got: nope
WANT
    expect delete 0 call "$A" rdmarpc.examples.KvStore/Delete 'key: "a"' <<<''
    expect get_missing 2 call "$A" rdmarpc.examples.KvStore/Get 'key: "a"' <<'WANT'
--- stderr
NOT_FOUND: key "a" not found
WANT
    expect put_empty_key 2 call "$A" rdmarpc.examples.KvStore/Put 'value: "v"' <<'WANT'
--- stderr
INVALID_ARGUMENT: Put: empty key
WANT
    ;;
esac

stop_server
expect ls_stopped 2 ls "$A" <<'WANT'
--- stderr
UNAVAILABLE: no server listening on ADDR (rdma_cm reject status 8)
WANT
pass "rdmarpc_cli against ${EXAMPLE}_server: $CASES cases"
