#!/usr/bin/env bash
# The full runs of the two robustness tests that the README's test command runs short: the
# overload test (a 3-node cluster at --max-in-flight 4, 64 buyers holding, releasing and reading
# seats on one leader as fast as it answers) for 30 s instead of 5, and the fuzz test of the REST
# and gRPC surfaces with 10,000 random requests instead of 600. Prints each test's numbers
# (answered and shed requests, shed-answer latency p50/p99/max; HTTP and gRPC statuses) and exits
# non-zero if a check fails: a term changed, a request was neither answered nor shed, a 5xx
# other than 503, a node panicked.
#
# Usage: bash scripts/overload.sh [--seconds S] [--requests N] [--seed SEED]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30
requests=10000
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

export BOOKING_OVERLOAD_SECS="$seconds" BOOKING_FUZZ_REQUESTS="$requests"
if [ -n "$seed" ]; then export BOOKING_FUZZ_SEED="$seed"; fi
cargo test --release -p node --test process -- --exact \
  overload::an_overloaded_node_sheds_and_keeps_its_leader \
  fuzz::random_requests_get_no_5xx_but_503_and_no_node_panics \
  --nocapture --test-threads 1 2>&1 | grep -E '^(overload|fuzz):|^test |test result|Error'
