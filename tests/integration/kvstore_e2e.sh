#!/usr/bin/env bash
# kvstore_e2e.sh KVSTORE_SERVER KVSTORE_CLIENT
#
# A user's session with the kvstore example, through the real binaries: a
# 3 MiB file is put, listed, fetched to a file and to stdout, replaced from
# stdin, deleted; missing keys give NOT_FOUND (exit 1); a 64 MiB value (the
# limit) round-trips and one byte more is INVALID_ARGUMENT; bad usage exits 2.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

SERVER_BIN="$1"
CLIENT_BIN="$2"

# kv ARGS...: runs the client; sets STATUS, output in kv.out / kv.err.
kv() {
  STATUS=0
  run_bounded 120 "$CLIENT_BIN" --server="$SERVER_ADDR" "$@" \
    >"$SCRATCH/kv.out" 2>"$SCRATCH/kv.err" || STATUS=$?
}

expect_status() {
  [[ "$STATUS" == "$1" ]] || fail "kvstore_client $2: exit $STATUS, want $1"
}

start_server server "$SERVER_BIN"

head -c $((3 * 1024 * 1024)) /dev/urandom >"$SCRATCH/big.bin"
printf 'second value\n' >"$SCRATCH/small.txt"

kv put big "$SCRATCH/big.bin"
expect_status 0 "put big"
kv put "alpha key" "$SCRATCH/small.txt"
expect_status 0 "put 'alpha key'"

kv list
expect_status 0 "list"
printf 'alpha key\nbig\n' | cmp -s - "$SCRATCH/kv.out" ||
  fail "list printed '$(cat "$SCRATCH/kv.out")', want 'alpha key' and 'big' on two lines"

kv get big "$SCRATCH/big.copy"
expect_status 0 "get big FILE"
cmp "$SCRATCH/big.bin" "$SCRATCH/big.copy" || fail "get big returned different bytes"

kv get big -
expect_status 0 "get big -"
cmp "$SCRATCH/big.bin" "$SCRATCH/kv.out" || fail "get big - wrote different bytes to stdout"

# Replace from stdin.
STATUS=0
run_bounded 60 "$CLIENT_BIN" --server="$SERVER_ADDR" put big - <"$SCRATCH/small.txt" \
  >"$SCRATCH/kv.out" 2>"$SCRATCH/kv.err" || STATUS=$?
expect_status 0 "put big - (stdin)"
kv get big -
expect_status 0 "get big - after replace"
cmp "$SCRATCH/small.txt" "$SCRATCH/kv.out" || fail "replaced value differs"

kv delete big
expect_status 0 "delete big"
kv list
expect_status 0 "list after delete"
[[ "$(cat "$SCRATCH/kv.out")" == "alpha key" ]] ||
  fail "list after delete printed '$(cat "$SCRATCH/kv.out")', want 'alpha key'"

kv get big "$SCRATCH/never"
expect_status 1 "get of a deleted key"
line="$(last_line "$SCRATCH/kv.err")"
[[ "$line" == "kvstore: NOT_FOUND "*big* ]] || fail "get of a missing key said '$line', want 'kvstore: NOT_FOUND ...big...'"
[[ ! -e "$SCRATCH/never" ]] || fail "get of a missing key created its output file"

kv delete big
expect_status 1 "delete of a missing key"
[[ "$(last_line "$SCRATCH/kv.err")" == "kvstore: NOT_FOUND "* ]] || fail "delete of a missing key: $(last_line "$SCRATCH/kv.err")"

# The largest value the store takes, 64 MiB, and one byte more.
head -c $((64 * 1024 * 1024)) /dev/urandom >"$SCRATCH/max.bin"
kv put max "$SCRATCH/max.bin"
expect_status 0 "put of a 64 MiB value"
kv get max "$SCRATCH/max.copy"
expect_status 0 "get of a 64 MiB value"
cmp -s "$SCRATCH/max.bin" "$SCRATCH/max.copy" || fail "64 MiB value came back different"
rm -f "$SCRATCH/max.copy"
head -c 1 /dev/urandom >>"$SCRATCH/max.bin"
kv put toolarge "$SCRATCH/max.bin"
expect_status 1 "put of a 64 MiB + 1 byte value"
[[ "$(last_line "$SCRATCH/kv.err")" == "kvstore: INVALID_ARGUMENT "*67108865* ]] ||
  fail "oversized put said '$(last_line "$SCRATCH/kv.err")', want INVALID_ARGUMENT naming 67108865"
rm -f "$SCRATCH/max.bin"

kv frobnicate x
expect_status 2 "frobnicate (bad usage)"
grep -q '^usage: kvstore_client' "$SCRATCH/kv.err" || fail "bad usage printed no usage message"
kv get onlykey
expect_status 2 "get without FILE (bad usage)"

stop_server
pass "kvstore round trip with 3 MiB and 64 MiB values"
