#!/usr/bin/env bash
# Fails when the statemachine crate depends, even indirectly, on a crate that would make it
# impure (async runtime, raft, RPC, storage, randomness); when the test kit imports any crate of
# ours but the SDK and the model; or when anything imports node or jepsen. shared/DESIGN.md:
# "Crates and the direction of imports".
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='tokio|openraft|tonic|prost|rocksdb|rand'
tree=$(cargo tree -p statemachine -e normal --prefix none --format '{p}')
bad=$(printf '%s\n' "$tree" | awk '{print $1}' | grep -E -x "($forbidden)([-_].*)?" | sort -u || true)
if [ -n "$bad" ]; then
  echo "statemachine must stay pure, but it depends on: $bad" >&2
  exit 1
fi
# No clocks, hashed-order maps or ambient randomness in the deterministic core.
if grep -rn -E 'SystemTime|Instant::now|HashMap|HashSet|thread_rng|f32|f64' statemachine/src; then
  echo "statemachine/src uses a clock, a hashed-order map, randomness or floats" >&2
  exit 1
fi
echo "statemachine is pure: $(printf '%s\n' "$tree" | wc -l) crates in its normal dependency tree"

# The test kit sees the cluster as a user does: through the SDK, with the state machine as the
# model of its histories. A helper that reached into the daemon would test it from the inside.
ours='statemachine|raft|node|client|proto|jepsen|testkit'
kit=$(cargo tree -p testkit -e normal --depth 1 --prefix none --format '{p}' | awk 'NR > 1 {print $1}' |
  grep -E -x "($ours)" | sort -u || true)
if [ "$kit" != "$(printf 'client\nstatemachine')" ]; then
  echo "testkit may import only client and statemachine of ours, but imports: $kit" >&2
  exit 1
fi
# Nothing imports the daemon or the suite, not even as a dev-dependency.
for crate in node jepsen; do
  users=$(cargo tree --workspace -e normal,build,dev -i "$crate" --prefix none --format '{p}' |
    awk '{print $1}' | grep -v -x "$crate" | sort -u || true)
  if [ -n "$users" ]; then
    echo "nothing may import $crate, but these do: $users" >&2
    exit 1
  fi
done
echo "testkit imports only client and statemachine; nothing imports node or jepsen"

# Inside the node, the two API skins import the node's shared concerns and never each other
# (shared/DESIGN.md; a feature used by both lives once in node/src, beside service.rs).
skins=$(grep -rn -E '\bapi::' node/src/rest || true)
skins+=$(grep -rn -E '\brest::' node/src/api || true)
if [ -n "$skins" ]; then
  printf '%s\n' "$skins" >&2
  echo "node/src/rest and node/src/api import each other" >&2
  exit 1
fi
echo "node's REST and gRPC skins do not import each other"

# The simulated payment provider stands outside the node: the node never imports it (it talks
# to it over HTTP like any provider), and it takes only the webhook contract from the node: the
# event's shape (rest/webhook.rs) and how it is signed (signature.rs, which knows no transport),
# and the HTTP client it delivers webhooks with (http_client.rs, which imports nothing of the
# node: a transport over raft's Dialer, so the simulator can carry it).
into=$(grep -rn -E '\bpaysim::' node/src --include='*.rs' | grep -v -E '^node/src/(paysim/|bin/paysim\.rs)' || true)
out=$(grep -rn -E 'crate::' node/src/paysim node/src/http_client.rs | grep -v -E '^node/src/paysim/.*crate::(rest::webhook|signature|http_client)::' || true)
if [ -n "$into$out" ]; then
  printf '%s\n' "$into" "$out" >&2
  echo "node imports paysim, or paysim imports more of the node than the webhook contract" >&2
  exit 1
fi
echo "paysim and the node meet only at the webhook contract"
