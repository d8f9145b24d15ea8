#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Release profile only: RocksDB's C++
# is compiled once per profile, so building, testing and timing share one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== set-up is quiet and offline when nothing is missing"
# A second run, with apt-get replaced by one that fails, must print nothing and succeed: a
# machine without network must be able to run every script once its packages are in.
offline=$(mktemp -d)
printf '#!/bin/sh\necho "apt-get called: $*" >&2\nexit 100\n' >"$offline/apt-get"
chmod +x "$offline/apt-get"
said=$(PATH="$offline:$PATH" bash scripts/setup.sh 2>&1) || { echo "$said"; exit 1; }
rm -r "$offline"
if [ -n "$said" ]; then echo "setup.sh printed on a machine that lacks nothing: $said"; exit 1; fi

echo "== rustfmt"
cargo fmt --all -- --check
echo "== clippy (warnings denied)"
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== dependency direction"
bash scripts/check-deps.sh
echo "== alert rules (promtool)"
promtool check rules node/prometheus/alerts.yml
promtool test rules node/prometheus/alerts.test.yml
echo "== binaries the process tests and the Jepsen smoke run"
# The same selection as cluster.sh and demo.sh, so that features unify the same way; then the
# test-only bookingd-unsafe (statemachine, raft and node once more, with the planted bugs of the
# unsafe-modes feature), whose every bug the Jepsen smoke must catch.
cargo build --release --workspace --bins
cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe
echo "== rolling upgrade from the previous release (smoke; the full run: scripts/upgrade-test.sh)"
# The previous release's bookingd is built from the git history into the target directory once
# (about 20 minutes on a fresh cache) and reused by every later run.
UPGRADE_ONSALE_S=30 bash scripts/upgrade-test.sh
echo "== tests"
cargo test --workspace --release
