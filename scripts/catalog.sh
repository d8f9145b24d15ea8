#!/usr/bin/env bash
# Builds the demo's small catalog on a running cluster (scripts/cluster.sh up): venues in
# Lisbon, Porto and Madrid, a hall in each with its seat geometry, four events, and shows of
# them over the coming days, on sale; one show has a strict waiting room and a waitlist. Every
# call is idempotent (the same record again changes nothing), so running it twice is harmless.
#
# Usage: bash scripts/catalog.sh [node address, default 127.0.0.1:7101]
# The operator credential is read from $BOOKING_OPERATOR_TOKEN_FILE, by default the file that
# scripts/cluster.sh made (cluster-data/secrets/operator at the repository's root); the nodes
# serve TLS, verified against $BOOKCTL_CA_FILE, by default the cluster's CA (cluster-data/tls/ca.crt).
set -euo pipefail
node="${1:-127.0.0.1:7101}"
root="$(cd "$(dirname "$0")/.." && pwd)"
token_file="${BOOKING_OPERATOR_TOKEN_FILE:-${BOOKING_CLUSTER_DIR:-$root/cluster-data}/secrets/operator}"
[ -r "$token_file" ] || { echo "catalog: no operator credential at $token_file" >&2; exit 2; }
token="$(cat "$token_file")"
ca_file="${BOOKCTL_CA_FILE:-${BOOKING_CLUSTER_DIR:-$root/cluster-data}/tls/ca.crt}"
[ -r "$ca_file" ] || { echo "catalog: no CA certificate at $ca_file" >&2; exit 2; }
# (The header is handed to curl through a file descriptor: never on its command line.)

# POSTs a JSON body as the operator, again under the same idempotency key while the cluster
# answers 503 (no leader yet, or the request needs another node's replica to catch up: the
# answer is retryable by contract) or 429; fails loudly on anything else but 200/201.
post() {
  local path=$1 body=$2 key answer status
  key="catalog-$(sha256sum <<<"$path $body" | cut -c1-32)"
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    answer=$(curl -sS --cacert "$ca_file" -w '\n%{http_code}' -X POST "https://$node$path" \
      -H @<(printf 'Authorization: Bearer %s\n' "$token") -H "Idempotency-Key: $key" \
      -H 'Content-Type: application/json' --data "$body")
    status=${answer##*$'\n'}
    case "$status" in
      200 | 201) return 0 ;;
      429 | 503) sleep 0.5 ;;
      *) break ;;
    esac
  done
  echo "catalog: POST $path answered $status: ${answer%$'\n'*}" >&2
  exit 1
}

# A hall's section of `rows` rows (labels from `first`) of `count` seats, drawn from y.
rows() {
  local first=$1 rows=$2 count=$3 y=$4 out="" label
  for ((i = 0; i < rows; i++)); do
    label=$(printf "\\$(printf '%03o' $(($(printf '%d' "'$first") + i)))")
    # Rows further back are wider, and shifted left by half a seat per extra seat.
    local seats=$((count + i)) x=$((-5 * i))
    out+="{\"label\":\"$label\",\"count\":$seats,\"x\":$x,\"y\":$((y + 12 * i)),\"dx\":10},"
  done
  echo "[${out%,}]"
}

venue() { # id name address city postal lat lon
  post /v1/venues "{\"venue_id\":$1,\"name\":\"$2\",\"address\":\"$3\",\"city\":\"$4\",\"postal_code\":\"$5\",\"latitude\":$6,\"longitude\":$7}"
}
hall() { # id venue name stalls-rows stalls-seats balcony-rows balcony-seats
  local stalls balcony
  stalls=$(rows A "$4" "$5" 0)
  balcony=$(rows "$(printf "\\$(printf '%03o' $((65 + $4)))")" "$6" "$7" $((12 * $4 + 30)))
  post /v1/halls "{\"hall_id\":$1,\"venue_id\":$2,\"name\":\"$3\",\"sections\":[{\"name\":\"Stalls\",\"class\":0,\"rows\":$stalls},{\"name\":\"Balcony\",\"class\":1,\"rows\":$balcony}]}"
}
event() { # id title genre language minutes description
  post /v1/events "{\"event_id\":$1,\"title\":\"$2\",\"genre\":\"$3\",\"language\":\"$4\",\"duration_min\":$5,\"description\":\"$6\"}"
}
# A show of event $2 in hall $3, $4 days and $5 hours from today's midnight UTC, prices $6/$7
# (cents), and extra fields $8.
show() {
  local midnight starts
  midnight=$(($(date -u +%s) / 86400 * 86400))
  starts=$(((midnight + $4 * 86400 + $5 * 3600) * 1000))
  post /v1/shows "{\"show_id\":$1,\"currency\":\"EUR\",\"prices_minor\":[$6,$7],\"listing\":{\"event_id\":$2,\"hall_id\":$3,\"starts_at_ms\":$starts}${8:+,$8}}"
}

venue 1 "Teatro Nacional D. Maria II" "Praça Dom Pedro IV" Lisboa 1100-201 38.7148 -9.1405
venue 2 "Cinema São Jorge" "Avenida da Liberdade 175" Lisboa 1250-141 38.7205 -9.1456
venue 3 "Coliseu do Porto" "Rua de Passos Manuel 137" Porto 4000-385 41.1466 -8.6060
venue 4 "Teatro Real" "Plaza de Isabel II" Madrid 28013 40.4184 -3.7109
hall 1 1 "Sala Garrett" 8 16 3 20
hall 2 2 "Sala Manoel de Oliveira" 10 18 2 22
hall 3 3 "Sala Principal" 9 20 4 24
hall 4 4 "Sala Principal" 10 22 4 26
event 1 "Hamlet" drama pt-PT 170 "Shakespeare's prince of Denmark, in a new Portuguese staging."
event 2 "The Magic Flute" opera de 160 "Mozart's singspiel of trials, birds and a queen of the night."
event 3 "Swan Lake" ballet en 140 "Tchaikovsky's ballet of Odette, Siegfried and the black swan."
event 4 "Dune: Part Two" film en 166 "Paul Atreides unites with the Fremen of Arrakis."
show 101 1 1 1 21 2500 1800
show 102 1 1 2 21 2500 1800
show 103 1 3 3 20 2200 1500
show 201 2 4 4 20 9000 5500
show 202 2 3 6 20 4500 3000
show 301 3 4 5 19 8000 5000 '"admission":{"enabled":true,"window":1},"waitlist":{"enabled":true}'
show 302 3 3 7 21 4000 2500
show 401 4 2 1 18 900 700
show 402 4 2 1 22 900 700
show 403 4 2 2 18 900 700
echo "catalog: 4 venues in Lisboa, Porto and Madrid, 4 halls, 4 events, 10 shows on sale" >&2
