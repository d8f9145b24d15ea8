#!/usr/bin/env bash
# Measures a backup and a restore of a large on-sale: starts a local 3-node cluster (with
# paysim) in a temporary directory, runs the on-sale driver on one show of SEATS seats
# (default 100,000), takes a backup while the cluster serves (bookctl backup, timed), stops it,
# restores the backup into a fresh 3-node cluster in another temporary directory (bookctl
# restore, timed: until every group has a leader) and compares the show's seat map in the
# restored cluster with the source's, read just before the backup. Prints the sizes and times;
# leaves nothing running.
#
# Usage: bash scripts/backup-bench.sh [SEATS [BUYERS]]
set -euo pipefail
cd "$(dirname "$0")/.."
seats="${1:-100000}"
buyers="${2:-20000}"
show=4242
target_dir="${CARGO_TARGET_DIR:-target}"
cargo build --release --workspace --bins
source_dir="$(mktemp -d /tmp/backup-bench-source.XXXXXX)"
restored_dir="$(mktemp -d /tmp/backup-bench-restored.XXXXXX)"
rmdir "$restored_dir"
cleanup() {
  BOOKING_CLUSTER_DIR="$source_dir" bash scripts/cluster.sh down >/dev/null 2>&1 || true
  BOOKING_CLUSTER_DIR="$restored_dir" bash scripts/cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$source_dir" "$restored_dir"
}
trap cleanup EXIT
bookctl() {
  "$target_dir/release/bookctl" --ca-file "$1/tls/ca.crt" --operator-token-file "$1/secrets/operator" "${@:2}"
}

BOOKING_CLUSTER_DIR="$source_dir" bash scripts/cluster.sh up >/dev/null
echo "backup-bench: on-sale of $buyers buyers on show $show ($seats seats)"
BOOKING_PROVIDER=http://127.0.0.1:7100 "$target_dir/release/onsale" --show "$show" --seats "$seats" \
  --buyers "$buyers" --concurrency 200 --window 1000 --hold-ttl-ms 600000 --time-limit-s 60 \
  --ca-file "$source_dir/tls/ca.crt" --operator-token-file "$source_dir/secrets/operator" \
  --webhook-secret-file "$source_dir/secrets/webhook" | tail -n 12 || true
# The seat map as it stands; nothing writes to the show any more.
bookctl "$source_dir" --json show seats --show "$show" --linearizable > "$source_dir/map-before.json"
bookctl "$source_dir" --json backup --out "$source_dir/cluster.backup" > "$source_dir/backup.json"
backup_ms=$(grep -o '"elapsed_ms": [0-9]*' "$source_dir/backup.json" | grep -o '[0-9]*$')
bytes=$(stat -c %s "$source_dir/cluster.backup")
BOOKING_CLUSTER_DIR="$source_dir" bash scripts/cluster.sh down >/dev/null 2>&1

BOOKING_SESSION_SECRET="$(cat "$source_dir/secrets/session")" BOOKING_CLUSTER_DIR="$restored_dir" \
  bash scripts/cluster.sh restore "$source_dir/cluster.backup" > "$source_dir/restore.txt"
restore_ms=$(grep -o 'in [0-9]* ms' "$source_dir/restore.txt" | grep -o '[0-9]*')
bookctl "$restored_dir" --json show seats --show "$show" --linearizable > "$source_dir/map-after.json"
strip() { grep -v -E '"as_of|"linearizable' "$1"; }
if diff <(strip "$source_dir/map-before.json") <(strip "$source_dir/map-after.json") >/dev/null; then
  same=yes
else
  same=NO
fi
echo "backup-bench: show $show, $seats seats"
grep -o '"group_id": [0-9]*\|"state_bytes": [0-9]*' "$source_dir/backup.json" | paste - - | sed 's/^/  /'
echo "  backup file     $bytes bytes"
echo "  backup          ${backup_ms} ms (bookctl backup, every group, from the running cluster)"
echo "  restore         ${restore_ms} ms (bookctl restore into 3 fresh nodes, until every group has a leader)"
echo "  seat map equal  $same"
[ "$same" = yes ]
