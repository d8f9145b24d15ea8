#!/usr/bin/env bash
# A rolling upgrade under an on-sale, from the previous release to this build: builds the
# previous release's bookingd from the git history (PREVIOUS, default the commit main stood at
# before feature levels), starts a local 3-node cluster of it (scripts/cluster.sh with
# BOOKINGD_BIN), runs this build's on-sale driver against it, and meanwhile replaces the nodes
# one by one with this build's bookingd (cluster.sh restart), raises the feature level once all
# three run it, and moves the show to another group (which needs the new level). Passes when the
# on-sale driver's checks pass (every outcome it was told against the cluster, no seat in two
# bookings, every replica of every group with the same digest) and it met no error but the
# rules' answers. Leaves nothing running.
#
# The previous release's sources are unpacked under the cargo target directory and built in a
# target directory of their own beside them (the first run builds everything, RocksDB included,
# about 18 minutes here); both are kept, so a second run rebuilds nothing.
#
# Usage: bash scripts/upgrade-test.sh [PREVIOUS]
# UPGRADE_ONSALE_S sets how long the on-sale runs (default 45 s; the README's test command runs
# a 30 s smoke); the nodes are replaced within its first 25 s or so.
set -euo pipefail
cd "$(dirname "$0")/.."
previous="${1:-1c2a991}"
onsale_s="${UPGRADE_ONSALE_S:-45}"
show=4444
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
commit="$(git rev-parse --verify "$previous^{commit}")"
previous_src="$target_dir/upgrade-previous/${commit:0:12}"
if [ ! -f "$previous_src/Cargo.toml" ]; then
  mkdir -p "$previous_src"
  git archive "$commit" | tar -x -C "$previous_src"
fi
echo "upgrade-test: building the previous release ($commit) and this build" >&2
(cd "$previous_src" && CARGO_TARGET_DIR="$target_dir/upgrade-previous/target" cargo build --release -p node --bin bookingd)
old="$target_dir/upgrade-previous/target/release/bookingd"
cargo build --release --workspace --bins
new="$target_dir/release/bookingd"
echo "upgrade-test: from $("$old" --version) to $("$new" --version)" >&2

dir="$(mktemp -d /tmp/upgrade-test.XXXXXX)"
cleanup() {
  BOOKING_CLUSTER_DIR="$dir" bash scripts/cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
bookctl() {
  "$target_dir/release/bookctl" --ca-file "$dir/tls/ca.crt" --operator-token-file "$dir/secrets/operator" "$@"
}
levels() { bookctl --json status | grep -o '"feature_level[_a-z]*": [0-9]*' | sort | uniq -c | tr -s ' ' | tr '\n' ';'; }

if ! BOOKINGD_BIN="$old" BOOKING_CLUSTER_DIR="$dir" bash scripts/cluster.sh up >"$dir/up.txt" 2>&1; then
  cat "$dir/up.txt" >&2
  exit 1
fi
echo "upgrade-test: 3 nodes of the previous release serve (feature levels: $(levels))"
BOOKING_PROVIDER=http://127.0.0.1:7100 "$target_dir/release/onsale" --show "$show" --seats 20000 \
  --buyers 6000 --concurrency 100 --window 500 --hold-ttl-ms 600000 --time-limit-s "$onsale_s" \
  --ca-file "$dir/tls/ca.crt" --operator-token-file "$dir/secrets/operator" \
  --webhook-secret-file "$dir/secrets/webhook" > "$dir/onsale.txt" 2>&1 &
onsale=$!
until bookctl --json show get --show "$show" > "$dir/show.json" 2>/dev/null; do sleep 0.2; done
sleep 5
for id in 1 2 3; do
  if ! BOOKINGD_BIN="$new" BOOKING_CLUSTER_DIR="$dir" bash scripts/cluster.sh restart "$id" >"$dir/restart.txt" 2>&1; then
    cat "$dir/restart.txt" >&2
    exit 1
  fi
  echo "upgrade-test: node $id runs this build"
  # A refused raise while a node of the previous release runs is the rule, not a failure.
  if [ "$id" != 3 ] && bookctl feature-level --raise 1 >/dev/null 2>&1; then
    echo "upgrade-test: the level was raised while a node of the previous release ran" >&2
    exit 1
  fi
  sleep 5
done
bookctl feature-level --raise max
echo "upgrade-test: raised (feature levels: $(levels))"
from=$(grep -o '"group_id": [0-9]*' "$dir/show.json" | head -1 | grep -o '[0-9]*$')
bookctl show move --show "$show" --to $(( from % 4 + 1 ))
status=0
wait "$onsale" || status=$?
tail -n 14 "$dir/onsale.txt" | sed 's/^/  /'
if grep -q "other errors" "$dir/onsale.txt"; then
  echo "upgrade-test: the on-sale met errors; the nodes' errors (heartbeats to a restarting node left out):" >&2
  grep -h -i -E "ERROR|internal" "$dir"/n[0-9].log | grep -v heartbeat | sed 's/\x1b\[[0-9;]*m//g' | tail -n 40 >&2 || true
  status=1
fi
echo "upgrade-test: the on-sale driver exited $status"
[ "$status" = 0 ]
