#!/usr/bin/env bash
# route_guide_e2e.sh LINK ROUTE_GUIDE_SERVER ROUTE_GUIDE_CLIENT
#
# The route_guide example through its real binaries on 127.0.0.1, over
# softrdma's LINK (shm or tcp): a fresh server, one client run of the four
# methods, checked against the built-in map (examples/route_guide/feature_db.h):
# the feature at grid point (3, 7) and none between grid points, 12 features
# in the rectangle (2, 3)-(4, 6) in row order, a RecordRoute summary of 12
# points with 10 features, and RouteChat's 3 echoed notes. Both processes must
# exit 0 and have connected over LINK.
source "${BASH_SOURCE[0]%/*}/lib.sh" || { echo "FAIL: cannot load lib.sh"; exit 1; }

LINK="$1"
SERVER_BIN="$2"
CLIENT_BIN="$3"
use_link "$LINK"

start_server server "$SERVER_BIN"

STATUS=0
run_bounded 60 "$CLIENT_BIN" --server="$SERVER_ADDR" \
  >"$SCRATCH/client.out" 2>"$SCRATCH/client.err" || STATUS=$?
((STATUS == 0)) || fail "route_guide_client exited with $STATUS, want 0"
OUT="$SCRATCH/client.out"

# has LINE: the client printed exactly LINE.
has() { grep -qxF -- "$1" "$OUT" || fail "client did not print '$1'"; }

has 'GetFeature (40.0300000, -73.9300000): "Feature 3-7"'
has 'GetFeature (40.0350000, -73.9300000): no feature'

has 'ListFeatures (40.0200000, -73.9700000) to (40.0400000, -73.9400000): 12 features'
listed="$(sed -n 's/^ListFeatures: "\(.*\)" at .*$/\1/p' "$OUT" | tr '\n' ,)"
want="Feature 2-3,Feature 2-4,Feature 2-5,Feature 2-6,Feature 3-3,Feature 3-4,Feature 3-5,Feature 3-6,Feature 4-3,Feature 4-4,Feature 4-5,Feature 4-6,"
[[ "$listed" == "$want" ]] || fail "ListFeatures streamed '$listed', want '$want'"

summary="$(grep '^RecordRoute: ' "$OUT")" || fail "no RecordRoute line"
[[ "$summary" == "RecordRoute: point_count=12 feature_count=10 distance="* ]] ||
  fail "RecordRoute printed '$summary', want point_count=12 feature_count=10"
# Nine 0.01-degree steps east at latitude 40.05 (~852 m each) and two
# 0.005-degree steps north (~556 m each); the client prints 8772 here, and
# the range leaves room for another libm's rounding.
distance="$(sed -n 's/^RecordRoute: .* distance=\([0-9]*\) .*$/\1/p' "$OUT")"
((distance >= 8770 && distance <= 8775)) || fail "RecordRoute distance $distance m, want 8772"

has 'RouteChat: sent 6 notes, received 3'
chat="$(sed -n 's/^RouteChat: got "\(.*\)" at .*$/\1/p' "$OUT" | sort | tr '\n' ,)"
[[ "$chat" == "First,Second,Third," ]] || fail "RouteChat echoed '$chat', want First, Second, Third"

has 'route_guide_client: all 4 methods OK'

stop_server
check_link "$LINK" "$SCRATCH/server.err" "$SCRATCH/client.err"
pass "route_guide's four methods on the $LINK link"
