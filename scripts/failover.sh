#!/usr/bin/env bash
# Failover time (issue 20, part 6): three bookingd nodes (127.0.0.1-3, ports from 7650, data on
# disk, 4 data groups); the leader of a data group is killed (kill -9) 20 times, and each time
# every group it led is timed from the kill until a probe started after it is acknowledged (an
# SDK hold, default retry policy, one per group every 20 ms). Run twice: alone, and beside the
# benchmark's uncontended load at 2,000 hold attempts/s (open loop, 512 clients, checked at the
# end like every benchmark run). Before the first kill the cluster runs untouched for 60 s and
# every term change then, or in a group the killed node did not lead, is a spurious election.
# Prints both reports and writes them to bench-results/failover.md. About 10 minutes once built.
#
# Usage: bash scripts/failover.sh [--kills N] [--load-rate R] [--out FILE]
#          [-- more options of the failover binary, e.g. --heartbeat-ms 150 --election-min-ms 600
#           --election-max-ms 1200 to measure other timing]
# Exit: 0 every group answered after every kill and the load's check passed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

kills=20
load_rate=2000
out=bench-results/failover.md
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills="$2"; shift 2 ;;
    --load-rate) load_rate="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
# The same selection as the other scripts build, so that features unify the same way (and
# bookingd is not the test build that checks every invariant after every entry).
cargo build --release --workspace --bins
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$(dirname "$out")"
status=0
"$target_dir/release/failover" --kills "$kills" --quiet 60 --out "$out.alone" "${extra[@]}" || status=1
"$target_dir/release/failover" --kills "$kills" --quiet 60 --load-rate "$load_rate" \
  --load-clients 512 --out "$out.load" "${extra[@]}" || status=1
{
  echo "## Failover ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
  echo
  cat "$out.alone"
  echo
  cat "$out.load"
} > "$out"
rm -f "$out.alone" "$out.load"
echo "failover: both reports in $out"
exit "$status"
