#!/usr/bin/env bash
# The deterministic simulator (node/tests/sim): whole clusters in one process, replayable from a
# seed. Runs in the release profile that scripts/test.sh builds, so nothing compiles twice.
#
#   bash scripts/sim.sh                          # the CI set: regression seeds, seeds 1..300,
#                                                #   a replay check, every planted bug found
#   bash scripts/sim.sh --seeds 1..100000        # a long run, with a progress bar and a summary
#   bash scripts/sim.sh --seed 7 --trace         # replay one seed, printing its whole trace
#   bash scripts/sim.sh --list-injections        # the planted bugs, one a line
#   bash scripts/sim.sh --seeds 1..200 --inject fifo-skip --expect-invalid   # stops at the first
#
# Options: --nodes 3|5 (default: 5 for every fourth seed, else 3); SIM_LOG=turmoil=trace (or
# any tracing filter) logs every simulated packet and event on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec cargo test --release --workspace --test sim -- "$@"
