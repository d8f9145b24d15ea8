#!/usr/bin/env bash
# Measures moving a large show between groups during its on-sale: starts a local 3-node
# cluster (with paysim) in a temporary directory, runs the on-sale driver on one show of SEATS
# seats (default 100,000) for 60 s, and meanwhile moves the show from group to group MOVES times
# (default 8; bookctl show move, timed), then prints each move's time, the show's state size and
# how long (log time) no group served it, and the on-sale driver's own checks (every buyer's
# outcome against the cluster). Leaves nothing running.
#
# Usage: bash scripts/move-bench.sh [SEATS [MOVES]]
set -euo pipefail
cd "$(dirname "$0")/.."
seats="${1:-100000}"
moves="${2:-8}"
show=4343
target_dir="${CARGO_TARGET_DIR:-target}"
cargo build --release --workspace --bins
dir="$(mktemp -d /tmp/move-bench.XXXXXX)"
cleanup() {
  BOOKING_CLUSTER_DIR="$dir" bash scripts/cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
bookctl() {
  "$target_dir/release/bookctl" --ca-file "$dir/tls/ca.crt" --operator-token-file "$dir/secrets/operator" "$@"
}

BOOKING_CLUSTER_DIR="$dir" bash scripts/cluster.sh up >/dev/null
groups="${BOOKING_GROUPS:-4}"
echo "move-bench: on-sale of show $show ($seats seats) over $groups data groups, $moves moves"
BOOKING_PROVIDER=http://127.0.0.1:7100 "$target_dir/release/onsale" --show "$show" --seats "$seats" \
  --buyers 20000 --concurrency 200 --window 1000 --hold-ttl-ms 600000 --time-limit-s 60 \
  --ca-file "$dir/tls/ca.crt" --operator-token-file "$dir/secrets/operator" \
  --webhook-secret-file "$dir/secrets/webhook" > "$dir/onsale.txt" 2>&1 &
onsale=$!
# The show exists once the driver has created it.
until bookctl --json show get --show "$show" > "$dir/show.json" 2>/dev/null; do sleep 0.2; done
sleep 5
for i in $(seq 1 "$moves"); do
  from=$(grep -o '"group_id": [0-9]*' "$dir/show.json" | head -1 | grep -o '[0-9]*$')
  to=$(( from % groups + 1 ))
  started=$(date +%s%N)
  bookctl --json show move --show "$show" --to "$to" > "$dir/move-$i.json"
  elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
  bytes=$(grep -o '"state_bytes": [0-9]*' "$dir/move-$i.json" | grep -o '[0-9]*$')
  unserved=$(grep -o '"unserved_ms": [0-9]*' "$dir/move-$i.json" | grep -o '[0-9]*$')
  echo "  move $i: group $from -> $to in ${elapsed_ms} ms (bookctl), state $bytes bytes, unserved ${unserved} ms of log time"
  bookctl --json show get --show "$show" > "$dir/show.json"
  sleep 4
done
status=0
wait "$onsale" || status=$?
tail -n 14 "$dir/onsale.txt" | sed 's/^/  /'
echo "move-bench: the on-sale driver exited $status"
[ "$status" = 0 ]
