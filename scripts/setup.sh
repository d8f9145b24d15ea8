#!/usr/bin/env bash
# Installs what a fresh machine of this kind lacks for building the workspace. Idempotent: when
# nothing is missing it prints nothing and touches no network (scripts/test.sh checks that).
# Run by the other scripts; safe to run by hand.
set -euo pipefail

need_apt=()
# The shared libraries the loader knows, read once. Not `ldconfig -p | grep -q`: under pipefail,
# grep -q exits at its first match, ldconfig dies of SIGPIPE and the pipeline fails, so a library
# that is installed looked missing on some runs (and every such run went to the network).
libraries=$(ldconfig -p 2>/dev/null || true)
# RocksDB's bindings (from issue 3 on) need libclang and a C++ compiler.
if ! [[ $libraries =~ libclang(-[0-9]+)?\.so ]]; then need_apt+=(libclang-dev); fi
if ! command -v c++ >/dev/null 2>&1; then need_apt+=(g++); fi
# The Jepsen suite's clock-skew nemesis runs nodes under libfaketime (LD_PRELOAD).
if ! compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; then need_apt+=(libfaketime); fi
# The benchmark's etcd client (etcd-client's build script) compiles etcd's protos with a system
# protoc; the benchmark runs etcd 3.4 and PostgreSQL 15 against the cluster (scripts/bench.sh).
if ! command -v protoc >/dev/null 2>&1; then need_apt+=(protobuf-compiler); fi
# The alert rules (node/prometheus) are checked and unit-tested with promtool, which Debian
# ships in its prometheus package.
if ! command -v promtool >/dev/null 2>&1; then need_apt+=(prometheus); fi
# The browser test drives headless Chromium through WebDriver (node/tests/process/browser.rs).
if ! command -v chromium >/dev/null 2>&1; then need_apt+=(chromium); fi
if ! command -v chromedriver >/dev/null 2>&1; then need_apt+=(chromium-driver); fi
# The first-minute benchmark puts nginx in front of the nodes as the CDN, and its test
# (jepsen/tests/cdn.rs) checks that configuration against a real cluster.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then need_apt+=(nginx); fi
if [ "${BOOKING_BENCH_SETUP:-0}" = 1 ]; then
  if ! command -v etcd >/dev/null 2>&1; then need_apt+=(etcd-server); fi
  if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then need_apt+=(postgresql-15); fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]}" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install ${need_apt[*]}" >&2
    exit 1
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install the Rust toolchain (rustup)" >&2
  exit 1
fi
