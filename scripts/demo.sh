#!/usr/bin/env bash
# The main job: builds, starts a local 3-node cluster on loopback (data in ./cluster-data) with
# the simulated payment provider (paysim, 127.0.0.1:7100), builds a small catalog (venues in
# three cities, halls, events, shows on sale: scripts/catalog.sh) for the buyer's page at
# https://127.0.0.1:7101/ (TLS with the cluster's own CA), and runs a short on-sale against it
# through the SDK: simulated buyers in a strict waiting room, all-or-nothing holds from a stale
# seat map, checkout, then the group leader's charge through paysim books the hold (some
# declined, some holders never pay), abandoned holds expiring into waitlist offers. It prints
# what happened (sold, conflicts, offers, hold latency p50/p99, paysim's ledger of charges and
# refunds and its webhook deliveries) and the end-of-run checks, then leaves the cluster and
# paysim running.
#
# Usage: bash scripts/demo.sh [onsale options, e.g. --buyers 5000 --seats 1000 --window 200]
#        (bash scripts/demo.sh --help lists them). The in-process on-sale through the state
#        machine alone is `cargo run --release -p statemachine --example onsale`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The same selection as cluster.sh builds, so that features unify the same way and nothing is
# compiled twice.
cargo build --release --workspace --bins
target_dir="${CARGO_TARGET_DIR:-target}"
for arg in "$@"; do
  case "$arg" in -h | --help) exec "$target_dir/release/onsale" --help ;; esac
done
bash scripts/cluster.sh up >/dev/null
# The cluster's random secrets, which cluster.sh made on its first start; the driver and the
# catalog script read them from their files.
secrets="$(cd "${BOOKING_CLUSTER_DIR:-cluster-data}" && pwd)/secrets"
export BOOKING_OPERATOR_TOKEN_FILE="$secrets/operator"
# The nodes serve TLS with the cluster's own CA: the driver, curl and bookctl trust it.
ca="$(cd "${BOOKING_CLUSTER_DIR:-cluster-data}" && pwd)/tls/ca.crt"
export BOOKCTL_CA_FILE="$ca"
echo "demo: cluster up (bash scripts/cluster.sh status shows it), paysim on 127.0.0.1:7100"
bash scripts/catalog.sh 127.0.0.1:7101
status=0
BOOKING_PROVIDER="${BOOKING_PROVIDER:-http://127.0.0.1:7100}" "$target_dir/release/onsale" \
  --operator-token-file "$secrets/operator" --webhook-secret-file "$secrets/webhook" "$@" ||
  status=$?
ledger=$(curl -fsS http://127.0.0.1:7100/ledger 2>/dev/null || true)
if [ -n "$ledger" ]; then
  # grep finds nothing (exit 1) when there are no refunds: count without failing the pipeline.
  count() { { grep -o "$1" <<<"$ledger" || true; } | wc -l; }
  charges=$(count '"kind":"charge"')
  succeeded=$(count '"status":"succeeded"')
  refunds=$(count '"kind":"refund"')
  echo "  paysim ledger (every run so far) $charges charges ($succeeded succeeded), $refunds refunds (http://127.0.0.1:7100/ledger)"
fi
webhooks=$(curl -fsS http://127.0.0.1:7100/webhooks 2>/dev/null || true)
if [ -n "$webhooks" ]; then
  sent=$({ grep -o '"delivered":' <<<"$webhooks" || true; } | wc -l)
  delivered=$({ grep -o '"delivered":true' <<<"$webhooks" || true; } | wc -l)
  echo "  paysim webhooks $delivered of $sent delivered (http://127.0.0.1:7100/webhooks)"
fi
echo
echo "demo: buy a ticket in your browser:   https://127.0.0.1:7101/   (search \"hamlet\", or \"hamlte\")"
echo "demo: the operator's page:            https://127.0.0.1:7101/ops   (its credential: cat $secrets/operator)"
echo "demo: the API reference:              https://127.0.0.1:7101/docs"
echo "demo: the pages are served with the cluster's own CA ($ca): import it into the browser, or accept its warning"
echo "demo: the cluster keeps running. Try: BOOKCTL_CA_FILE=$ca $target_dir/release/bookctl show list"
echo "      (operator commands: export BOOKCTL_OPERATOR_TOKEN_FILE=$secrets/operator)"
echo "demo: stop it with: bash scripts/cluster.sh down"
exit "$status"
