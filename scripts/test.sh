#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Release profile only: RocksDB's C++
# is compiled once per profile, so building, testing and timing share one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== rustfmt"
cargo fmt --all -- --check
echo "== clippy (warnings denied)"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== dependency direction"
bash scripts/check-deps.sh
echo "== binaries the process tests and the Jepsen smoke run"
# The same selection as cluster.sh and demo.sh, so that features unify the same way; then the
# test-only bookingd-unsafe (the node crate once more, with the unsafe-modes feature), which the
# Jepsen smoke must catch.
cargo build --release --workspace --bins
cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe
echo "== tests"
cargo test --workspace --release
