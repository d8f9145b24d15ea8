#!/usr/bin/env bash
# The deterministic simulator (node/tests/sim): whole clusters in one process, replayable from a
# seed. Runs in the release profile that scripts/test.sh builds, so nothing compiles twice.
#
#   bash scripts/sim.sh                          # the CI set: regression seeds, seeds 1..300,
#                                                #   a replay check, every planted bug found
#   bash scripts/sim.sh --seeds 1..100000        # a campaign: a progress bar, a summary, and a row
#                                                #   in node/tests/sim/CAMPAIGNS.md
#   bash scripts/sim.sh --seed 7 --trace         # replay one seed, printing its whole trace
#   bash scripts/sim.sh --list-injections        # the planted bugs, one a line
#   bash scripts/sim.sh --seeds 1..200 --inject fifo-skip --expect-invalid   # stops at the first
#
# Options: --nodes 3|5 (default: 5 for every fourth seed, else 3); SIM_LOG=turmoil=trace (or
# any tracing filter) logs every simulated packet and event on stderr.
#
# A campaign (--seeds without --expect-invalid or --trace) appends one row to the campaign record
# node/tests/sim/CAMPAIGNS.md: when it started, its arguments, the commit it ran (with "+changes"
# when the work tree differed from it), the machine's cores, and the run's summary line (seeds,
# valid, invalid and unknown ones, operations, simulated and real time). Commit the row.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null

campaign=""
case " $* " in
    *" --expect-invalid "* | *" --trace "*) ;;
    *" --seeds "*) campaign=yes ;;
esac
if [ -z "$campaign" ]; then
    exec cargo test --release --workspace --test sim -- "$@"
fi

record=node/tests/sim/CAMPAIGNS.md
started=$(date -u +%Y-%m-%dT%H:%MZ)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit+changes"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --workspace --test sim -- "$@" | tee "$log"
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^sim: [0-9]+ seeds' "$log" | tail -n 1 | sed 's/^sim: //')
if [ -z "$summary" ]; then
    summary="no summary: the run ended early (exit $status)"
fi
printf '| %s | `%s` | %s | %s | %s |\n' "$started" "$*" "$commit" "$(nproc) cores" \
    "${summary//|/\\|}" >>"$record"
echo "sim.sh: recorded in $record"
exit "$status"
