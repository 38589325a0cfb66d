#!/usr/bin/env bash
# reflection_e2e.sh: the example servers answer grpc.reflection.
#
#   reflection_e2e.sh echo|kvstore SERVER_BINARY REFLECTION_LIST_BINARY
#
# Starts the server, lists its services and asks for the file of its
# service, one of its methods and an unknown symbol, over v1 and v1alpha;
# compares the output line for line.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

EXAMPLE="$1"
SERVER="$2"
LIST="$3"

case "$EXAMPLE" in
  echo)
    SERVICE=rdmarpc.examples.EchoService
    METHOD=rdmarpc.examples.EchoService.Echo
    FILE=echo.proto
    ;;
  kvstore)
    SERVICE=rdmarpc.examples.KvStore
    METHOD=rdmarpc.examples.KvStore.GetStream
    FILE=kvstore.proto
    ;;
  *) fail "unknown example '$EXAMPLE'" ;;
esac

start_server server "$SERVER"
for version in v1 v1alpha; do
  STATUS=0
  run_bounded 60 "$LIST" --server="$SERVER_ADDR" --protocol="$version" \
    "$SERVICE" "$METHOD" no.such.Symbol >"$SCRATCH/list.out" 2>"$SCRATCH/list.err" || STATUS=$?
  [[ "$STATUS" == 0 ]] || fail "reflection_list --protocol=$version: exit $STATUS"
  printf '%s\n' \
    "service grpc.health.v1.Health" \
    "service grpc.reflection.v1.ServerReflection" \
    "service grpc.reflection.v1alpha.ServerReflection" \
    "service $SERVICE" \
    "symbol $SERVICE: $FILE" \
    "symbol $METHOD: $FILE" \
    "symbol no.such.Symbol: error 5 Symbol not found: no.such.Symbol" >"$SCRATCH/want.out"
  diff -u "$SCRATCH/want.out" "$SCRATCH/list.out" ||
    fail "reflection_list --protocol=$version against ${EXAMPLE}_server"
done
stop_server
pass "${EXAMPLE}_server answers grpc.reflection v1 and v1alpha"
