#!/usr/bin/env bash
# The main job. Today: a simulated on-sale through the booking core in one process (buyers,
# waiting room, stale seat map, payments, cancellations, waitlist), ending with an invariant
# check. When the cluster lands (issues 3 and 4) this becomes: start a local 3-node cluster on
# loopback and run the on-sale against it through the SDK.
# Usage: bash scripts/demo.sh [--buyers N] [--seats N] [--window N] [--seed N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release -p statemachine --example onsale
exec "${CARGO_TARGET_DIR:-target}/release/examples/onsale" "$@"
