#!/usr/bin/env bash
# A local 3-node booking cluster on loopback: node N serves clients on 127.0.0.1:710N and its
# peers (Raft, mutual TLS) on 127.0.0.1:720N, and the simulated payment provider (paysim) on 127.0.0.1:7100. Each data group's leader charges checkouts and
# makes refunds through paysim (--provider-url); paysim's signed webhooks go to whichever node
# answers (it is given every node's webhook URL and moves on from one that is down).
#
#   bash scripts/cluster.sh up          build if needed, start the nodes that are not running,
#                                       wait until every group has a leader, print the status
#   bash scripts/cluster.sh down        stop the nodes and paysim this script started (TERM, then KILL)
#   bash scripts/cluster.sh status      bookctl status (extra arguments are passed on)
#   bash scripts/cluster.sh kill N      kill -9 node N
#   bash scripts/cluster.sh restart N   stop node N if it runs, start it again (never bootstrapping)
#   bash scripts/cluster.sh logs N [-f] the end of node N's log (-f: follow it)
#   bash scripts/cluster.sh backup FILE  bookctl backup --out FILE (every group, online)
#   bash scripts/cluster.sh restore FILE a new cluster from a backup: starts fresh nodes (their
#                                       data directories must not exist) without --bootstrap,
#                                       bookctl restore --from FILE, then paysim; give the old
#                                       cluster's session secret (BOOKING_SESSION_SECRET) to
#                                       keep its buyers' tokens valid
#
# Node N keeps its database in $BOOKING_CLUSTER_DIR/nN, its log in nN.log and its pid in nN.pid
# (BOOKING_CLUSTER_DIR defaults to ./cluster-data at the repository root). A node is started
# with --bootstrap only when its data directory does not exist yet, i.e. on the very first start
# of the cluster; a wiped node restarted later joins without it. paysim keeps its ledger in
# $BOOKING_CLUSTER_DIR/paysim (GET http://127.0.0.1:7100/ledger), its log in paysim.log; it signs
# with the nodes' webhook secret.
#
# Secrets: on its first start the cluster gets random ones (32 bytes, hex), in files only their
# owner reads: $BOOKING_CLUSTER_DIR/secrets/{session,operator,webhook} (or the values of
# BOOKING_SESSION_SECRET, BOOKING_OPERATOR_TOKEN, BOOKING_WEBHOOK_SECRET, when set then). The
# nodes read them with --session-secret-file, --operator-token-file, --webhook-secret-file, so a
# node restarted from any shell comes back with the same ones; bookctl reads the operator's with
# --operator-token-file (export BOOKCTL_OPERATOR_TOKEN_FILE=$BOOKING_CLUSTER_DIR/secrets/operator).
#
# TLS: on its first start the cluster gets its own CA and a certificate per node, made by
# `bookctl certs` in $BOOKING_CLUSTER_DIR/tls (ca.crt, ca.key, node-N.crt, node-N.key; keys
# readable by their owner only). The nodes speak Raft to each other over mutual TLS with them,
# and serve their clients over TLS (--client-tls: https://127.0.0.1:710N/, REST, gRPC and the
# pages); clients trust ca.crt (bookctl: export BOOKCTL_CA_FILE=$BOOKING_CLUSTER_DIR/tls/ca.crt;
# curl --cacert; a browser warns until ca.crt is imported). paysim's own port is plain HTTP.
#
# Environment: BOOKING_GROUPS (data groups, default 4), BOOKINGD_ARGS (extra bookingd arguments),
# PAYSIM_ARGS (extra paysim arguments, e.g. --decline-ratio 0.1; see paysim --help),
# BOOKING_UP_TIMEOUT_S (how long `up` waits for leaders, default 60), BOOKINGD_BIN (another
# bookingd to start, e.g. a previous release's for scripts/upgrade-test.sh), CARGO_TARGET_DIR,
# RUST_LOG.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# Relative paths are taken from where the script is run, as cargo does for CARGO_TARGET_DIR.
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
target_dir="$(absolute "${CARGO_TARGET_DIR:-$root/target}")"
cluster_dir="$(absolute "${BOOKING_CLUSTER_DIR:-$root/cluster-data}")"
groups="${BOOKING_GROUPS:-4}"
up_timeout_s="${BOOKING_UP_TIMEOUT_S:-60}"
stop_timeout_s=10
bookingd="$(absolute "${BOOKINGD_BIN:-$target_dir/release/bookingd}")"
bookctl="$target_dir/release/bookctl"
paysim="$target_dir/release/paysim"
paysim_address=127.0.0.1:7100
node_ids=(1 2 3)
secrets_dir="$cluster_dir/secrets"
tls_dir="$cluster_dir/tls"

address() { printf '127.0.0.1:710%s\n' "$1"; }
peer_address() { printf '127.0.0.1:720%s\n' "$1"; }
peers() {
  local id list=()
  for id in "${node_ids[@]}"; do list+=("$id=$(peer_address "$id")"); done
  (IFS=,; printf '%s\n' "${list[*]}")
}
nodes() {
  local id list=()
  for id in "${node_ids[@]}"; do list+=("$(address "$id")"); done
  (IFS=,; printf '%s\n' "${list[*]}")
}
die() { echo "cluster: $*" >&2; exit 1; }
check_node() {
  case "${1:-}" in
    1 | 2 | 3) ;;
    *) die "node must be one of ${node_ids[*]}, got '${1:-}'" ;;
  esac
}

# Makes the cluster's secrets once: random (or from the environment), readable by their owner only.
make_secrets() {
  local name variable value
  mkdir -p "$secrets_dir"
  chmod 700 "$secrets_dir"
  for name in session operator webhook; do
    [ -s "$secrets_dir/$name" ] && continue
    case "$name" in
      session) variable=BOOKING_SESSION_SECRET ;;
      operator) variable=BOOKING_OPERATOR_TOKEN ;;
      webhook) variable=BOOKING_WEBHOOK_SECRET ;;
    esac
    value="${!variable:-}"
    [ -n "$value" ] || value="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
    (umask 077 && printf '%s\n' "$value" >"$secrets_dir/$name")
  done
}

# The pid of node N if it runs a bookingd started by this script, else nothing.
running_pid() {
  local pid_file="$cluster_dir/n$1.pid" pid
  [ -f "$pid_file" ] || return 0
  pid="$(cat "$pid_file")"
  # The pid must still be ours: alive and a bookingd (pids are reused).
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    grep -q "bookingd .*--id $1 " < <(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null); then
    printf '%s\n' "$pid"
  fi
}

# The pid of the paysim this script started, if it still runs, else nothing.
paysim_pid() {
  local pid_file="$cluster_dir/paysim.pid" pid
  [ -f "$pid_file" ] || return 0
  pid="$(cat "$pid_file")"
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    grep -q "paysim .*--listen $paysim_address " < <(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null); then
    printf '%s\n' "$pid"
  fi
}

# Whether the process this script just started and recorded in pid file $1 is still alive. Right
# after the start it may not have exec'd yet (its command line is still this script's, which
# running_pid and paysim_pid would not recognise), so only its state is asked: alive and not a
# zombie (an exited child of this shell stays one until waited for).
started_alive() {
  local pid state
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Starts paysim unless it runs, and waits until it serves.
start_paysim() {
  if [ -n "$(paysim_pid)" ]; then
    echo "cluster: paysim already runs (pid $(paysim_pid))" >&2
    return
  fi
  [ -x "$paysim" ] || die "$paysim is missing: run '$0 up' (it builds) or cargo build --release -p node"
  local log="$cluster_dir/paysim.log" offset=0
  [ -f "$log" ] && offset="$(wc -c <"$log")"
  local args=(--listen "$paysim_address" --data-dir "$cluster_dir/paysim") id
  # Every node's endpoint: any node verifies a webhook and forwards it to the leader, so paysim
  # delivers through another one while a node is down.
  for id in "${node_ids[@]}"; do
    args+=(--webhook-url "https://$(address "$id")/v1/payments/webhook")
  done
  args+=(--webhook-ca-file "$tls_dir/ca.crt")
  # shellcheck disable=SC2206 # PAYSIM_ARGS is split on purpose
  args+=(${PAYSIM_ARGS:-})
  echo "cluster: starting paysim ${args[*]}" >&2
  make_secrets
  PAYSIM_WEBHOOK_SECRET="$(cat "$secrets_dir/webhook")" \
    setsid "$paysim" "${args[@]}" >>"$log" 2>&1 </dev/null &
  echo $! >"$cluster_dir/paysim.pid"
  local deadline=$((SECONDS + 10))
  until grep -q "paysim listening=" < <(tail -c +"$((offset + 1))" "$log"); do
    started_alive "$cluster_dir/paysim.pid" || die "paysim exited; see $log"
    [ "$SECONDS" -lt "$deadline" ] || die "paysim is not serving after 10s; see $log"
    sleep 0.1
  done
  echo "cluster: paysim serves on $paysim_address (ledger: http://$paysim_address/ledger)" >&2
}

stop_paysim() {
  local pid
  pid="$(paysim_pid)"
  [ -n "$pid" ] || return 0
  echo "cluster: stopping paysim (pid $pid)" >&2
  kill -TERM "$pid" 2>/dev/null || true
  local waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge $((stop_timeout_s * 10)) ]; then
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rm -f "$cluster_dir/paysim.pid"
}

build() {
  echo "cluster: building bookingd and bookctl (release)" >&2
  (cd "$root" && cargo build --release --workspace --bins)
}

# Makes the cluster's CA once, and node N's certificate once.
make_certs() {
  local id="$1"
  [ -x "$bookctl" ] || die "$bookctl is missing: run '$0 up' (it builds) or cargo build --release -p client"
  if [ ! -s "$tls_dir/ca.crt" ]; then
    mkdir -p "$tls_dir"
    chmod 700 "$tls_dir"
    "$bookctl" certs init --dir "$tls_dir" --name "local booking cluster CA" >/dev/null
  fi
  if [ ! -s "$tls_dir/node-$id.crt" ]; then
    "$bookctl" certs node --dir "$tls_dir" --id "$id" --host 127.0.0.1 --host localhost >/dev/null
  fi
}

# Starts node N in the background; bootstraps only if its data directory is new and $2 is yes.
start() {
  local id="$1" may_bootstrap="$2" data="$cluster_dir/n$1" log="$cluster_dir/n$1.log"
  make_secrets
  make_certs "$id"
  local args=(--id "$id" --data "$data" --listen "$(address "$id")" --peers "$(peers)"
    --peer-listen "$(peer_address "$id")" --tls-ca-file "$tls_dir/ca.crt"
    --tls-cert-file "$tls_dir/node-$id.crt" --tls-key-file "$tls_dir/node-$id.key" --client-tls
    --groups "$groups" --provider-url "http://$paysim_address"
    --session-secret-file "$secrets_dir/session" --operator-token-file "$secrets_dir/operator"
    --webhook-secret-file "$secrets_dir/webhook"
    # The demo's thousands of simulated buyers all come from 127.0.0.1.
    --rate-new-sessions-per-address 10000)
  if [ "$may_bootstrap" = yes ] && [ ! -e "$data" ]; then args+=(--bootstrap); fi
  # BOOKINGD_ARGS is split on spaces on purpose: it holds several arguments.
  # shellcheck disable=SC2206
  args+=(${BOOKINGD_ARGS:-})
  [ -x "$bookingd" ] || die "$bookingd is missing: run '$0 up' (it builds) or cargo build --release -p node"
  mkdir -p "$cluster_dir"
  echo "cluster: starting node $id: bookingd ${args[*]}" >&2
  echo "=== $(date -u +%FT%TZ) start: bookingd ${args[*]}" >>"$log"
  # setsid: the node outlives this shell and gets no signal meant for the terminal.
  # The files are the secrets: the same variables in the environment would be a second source.
  env -u BOOKING_SESSION_SECRET -u BOOKING_OPERATOR_TOKEN -u BOOKING_WEBHOOK_SECRET \
    -u BOOKING_SINK_SECRET setsid "$bookingd" "${args[@]}" >>"$log" 2>&1 </dev/null &
  echo $! >"$cluster_dir/n$id.pid"
}

# Stops node N: SIGTERM, then SIGKILL after the timeout.
stop() {
  local id="$1" pid waited=0
  pid="$(running_pid "$id")"
  if [ -z "$pid" ]; then
    rm -f "$cluster_dir/n$id.pid"
    return 0
  fi
  echo "cluster: stopping node $id (pid $pid)" >&2
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge $((stop_timeout_s * 10)) ]; then
      echo "cluster: node $id did not stop within ${stop_timeout_s}s, killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rm -f "$cluster_dir/n$id.pid"
}

bookctl_status() {
  [ -x "$bookctl" ] || die "$bookctl is missing: run '$0 up' (it builds) or cargo build --release -p client"
  "$bookctl" --nodes "$(nodes)" --ca-file "$tls_dir/ca.crt" \
    --operator-token-file "$secrets_dir/operator" status "$@"
}

cmd_up() {
  build
  local id started=0
  for id in "${node_ids[@]}"; do
    if [ -n "$(running_pid "$id")" ]; then
      echo "cluster: node $id already runs (pid $(running_pid "$id"))" >&2
    else
      start "$id" yes
      started=$((started + 1))
    fi
  done
  echo "cluster: waiting up to ${up_timeout_s}s for a leader in every group (0..=$groups)" >&2
  local deadline=$((SECONDS + up_timeout_s))
  until bookctl_status --require-leaders --data-groups "$groups" >/dev/null 2>&1; do
    for id in "${node_ids[@]}"; do
      started_alive "$cluster_dir/n$id.pid" ||
        die "node $id is not running; the end of its log ($cluster_dir/n$id.log):
$(tail -n 20 "$cluster_dir/n$id.log" 2>/dev/null)"
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      bookctl_status --require-leaders --data-groups "$groups" || true
      die "not every group has a leader after ${up_timeout_s}s; logs in $cluster_dir"
    fi
    sleep 0.5
  done
  # Every node runs this build: the groups may write what its feature level adds (a no-op once
  # raised; a rolling upgrade raises it by hand, see the README).
  "$bookctl" --nodes "$(nodes)" --ca-file "$tls_dir/ca.crt" --operator-token-file "$secrets_dir/operator" \
    feature-level --raise max >/dev/null
  start_paysim
  bookctl_status
  echo "cluster: the buyer's page at https://$(address "${node_ids[0]}")/, the operator's at /ops (the cluster's CA: $tls_dir/ca.crt)" >&2
  echo "cluster: API reference (Swagger UI) at https://$(address "${node_ids[0]}")/docs" >&2
  echo "cluster: bookctl trusts the CA with: export BOOKCTL_CA_FILE=$tls_dir/ca.crt" >&2
  echo "cluster: the operator credential is in $secrets_dir/operator (bookctl: export BOOKCTL_OPERATOR_TOKEN_FILE=$secrets_dir/operator)" >&2
}

cmd_down() {
  local id
  stop_paysim
  for id in "${node_ids[@]}"; do stop "$id"; done
}

cmd_kill() {
  check_node "${1:-}"
  local pid
  pid="$(running_pid "$1")"
  [ -n "$pid" ] || die "node $1 is not running"
  echo "cluster: kill -9 node $1 (pid $pid)" >&2
  kill -KILL "$pid"
  rm -f "$cluster_dir/n$1.pid"
}

cmd_restart() {
  check_node "${1:-}"
  stop "$1"
  local log="$cluster_dir/n$1.log" offset=0
  [ -f "$log" ] && offset="$(wc -c <"$log")"
  start "$1" no
  local deadline=$((SECONDS + 20))
  # Only what this start wrote counts: earlier starts logged the same line.
  # (Process substitution, not a pipe: grep -q stops reading early, which would make tail fail
  # with SIGPIPE and, under pipefail, the test false.)
  until grep -q "bookingd node=$1 listening=" < <(tail -c +"$((offset + 1))" "$log"); do
    started_alive "$cluster_dir/n$1.pid" || die "node $1 exited; see $cluster_dir/n$1.log"
    [ "$SECONDS" -lt "$deadline" ] || die "node $1 is not serving after 20s; see $cluster_dir/n$1.log"
    sleep 0.2
  done
  echo "cluster: node $1 serves on $(address "$1")" >&2
}

bookctl_operator() {
  [ -x "$bookctl" ] || die "$bookctl is missing: run '$0 up' (it builds) or cargo build --release -p client"
  "$bookctl" --nodes "$(nodes)" --ca-file "$tls_dir/ca.crt" \
    --operator-token-file "$secrets_dir/operator" "$@"
}

cmd_backup() {
  [ -n "${1:-}" ] || die "usage: $0 backup FILE"
  bookctl_operator backup --out "$1"
}

cmd_restore() {
  local file="${1:-}" id
  [ -n "$file" ] || die "usage: $0 restore FILE"
  [ -f "$file" ] || die "no backup at $file"
  file="$(absolute "$file")"
  build
  for id in "${node_ids[@]}"; do
    [ ! -e "$cluster_dir/n$id" ] || die "$cluster_dir/n$id exists: restore builds a new cluster (another BOOKING_CLUSTER_DIR)"
  done
  for id in "${node_ids[@]}"; do start "$id" no; done
  local deadline=$((SECONDS + up_timeout_s))
  until bookctl_status >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "the fresh nodes do not answer after ${up_timeout_s}s; logs in $cluster_dir"
    sleep 0.2
  done
  bookctl_operator restore --from "$file"
  start_paysim
  bookctl_status
}

cmd_logs() {
  check_node "${1:-}"
  local log="$cluster_dir/n$1.log"
  [ -f "$log" ] || die "no log at $log"
  if [ "${2:-}" = "-f" ]; then tail -n 100 -f "$log"; else tail -n 100 "$log"; fi
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) shift; bookctl_status "$@" ;;
  kill) cmd_kill "${2:-}" ;;
  restart) cmd_restart "${2:-}" ;;
  logs) cmd_logs "${2:-}" "${3:-}" ;;
  backup) cmd_backup "${2:-}" ;;
  restore) cmd_restore "${2:-}" ;;
  *)
    sed -n '2,16s/^# \{0,1\}//p' "$0" >&2
    exit 2
    ;;
esac
