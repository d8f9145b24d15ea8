#!/usr/bin/env bash
# The full Jepsen matrix: every nemesis x every workload x each seed, against real bookingd
# processes on loopback, one test at a time (the payments workload always with the provider
# nemesis, --provider-faults, beside the node nemesis, judged against paysim's ledger); prints a table of valid / invalid / unknown with the
# path of each report, and writes it to <out>/matrix.md. The 5-node partitions (bridge, ring) run
# on 5 nodes, everything else on 3. Each test is bounded (its time limit plus recovery, final
# reads and checks, killed after --test-timeout seconds); the whole matrix stops starting new
# tests after --budget minutes. Every test's runner stops the processes it started.
#
# Usage: bash scripts/jepsen.sh [--time-limit S] [--seeds "1 2"] [--workloads "holds ..."]
#          [--nemeses "kill-one ..."] [--out DIR] [--budget MIN] [--test-timeout S]
#          [--port-base P]  (two matrices may run at once on port bases 1,500 apart)
#          [--soak S]  (the soak: the combined nemesis over every workload, S seconds in all,
#                       snapshots every 250 entries, each run judged with --soak: memory,
#                       data folder and snapshot size must stop growing; seed 1 unless --seeds)
# Exit: 0 all valid, 1 something invalid, 2 something unknown or not run.
set -euo pipefail
cd "$(dirname "$0")/.."

time_limit=60
seeds="1 2"
workloads="holds admission waitlist register payments deadlines"
nemeses="none kill-one kill-minority kill-leader kill-all pause-one pause-leader partition-leader partition-halves partition-bridge partition-ring partition-clients transfer-leader membership clock-skew move-show two-faults combined"
out="jepsen-reports/matrix-$(date -u +%Y%m%dT%H%M%SZ)"
budget=240
test_timeout=""
port_base=7600
soak=""
seeds_given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time-limit) time_limit="$2"; shift 2 ;;
    --seeds) seeds="$2"; seeds_given=yes; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --nemeses) nemeses="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --test-timeout) test_timeout="$2"; shift 2 ;;
    --port-base) port_base="$2"; shift 2 ;;
    --soak) soak="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
soak_args=()
if [ -n "$soak" ]; then
  count=$(wc -w <<<"$workloads")
  time_limit=$(( soak / count ))
  [ "$time_limit" -ge 60 ] || time_limit=60
  nemeses="combined"
  [ -n "$seeds_given" ] || seeds="1"
  soak_args=(--soak --snapshot-logs 250 --check-time 600)
  test_timeout="${test_timeout:-$((time_limit + 900))}"
  out="${out/matrix-/soak-}"
fi
test_timeout="${test_timeout:-$((time_limit + 240))}"

bash scripts/setup.sh >/dev/null
cargo build --release --workspace --bins
target_dir="${CARGO_TARGET_DIR:-target}"
jepsen="$target_dir/release/jepsen"
mkdir -p "$out"
table="$out/matrix.md"
{
  echo "| workload | nemesis | nodes | seed | verdict | seconds | report |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
} >"$table"

started=$(date +%s)
worst=0
port=$port_base
for seed in $seeds; do
  for workload in $workloads; do
    for nemesis in $nemeses; do
      nodes=3
      case "$nemesis" in partition-bridge | partition-ring) nodes=5 ;; esac
      name="$workload-$nemesis-n$nodes-s$seed"
      if [ $(( $(date +%s) - started )) -ge $((budget * 60)) ]; then
        echo "| $workload | $nemesis | $nodes | $seed | not run (budget) | | |" >>"$table"
        worst=2
        continue
      fi
      extra=()
      [ "$workload" != payments ] || extra=(--provider-faults)
      began=$(date +%s)
      status=0
      timeout --signal=INT --kill-after=30 "$test_timeout" "$jepsen" test --nodes "$nodes" \
        --workload "$workload" --nemesis "$nemesis" --time-limit "$time_limit" --seed "$seed" \
        --port-base "$port" --report "$out/$name" "${extra[@]}" "${soak_args[@]}" \
        >"$out/$name.log" 2>&1 || status=$?
      case "$status" in
        0) verdict="valid" ;;
        1) verdict="**INVALID**"; worst=1 ;;
        2) verdict="unknown"; [ "$worst" -eq 1 ] || worst=2 ;;
        *) verdict="not run (exit $status, see $name.log)"; [ "$worst" -eq 1 ] || worst=2 ;;
      esac
      line="| $workload | $nemesis | $nodes | $seed | $verdict | $(( $(date +%s) - began )) | $out/$name/timeline.html |"
      echo "$line" | tee -a "$table"
      # A fresh port range per test: a killed test's sockets may linger in TIME_WAIT.
      port=$(( port + 40 ))
      [ "$port" -lt $((port_base + 1400)) ] || port=$port_base
    done
  done
done
echo
cat "$table"
exit "$worst"
