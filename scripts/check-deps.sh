#!/usr/bin/env bash
# Fails when the statemachine crate depends, even indirectly, on a crate that would make it
# impure (async runtime, raft, RPC, storage, randomness). shared/DESIGN.md: "Crates and the
# direction of imports".
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
