#!/usr/bin/env bash
# The on-sale benchmark, end to end from a clean clone: installs what is missing (protoc, etcd
# 3.4, PostgreSQL 15), builds the release binaries, then the `bench` binary starts each system on
# loopback in turn (this cluster: 3 bookingd nodes on 127.0.0.1-3:7600; PostgreSQL 15 on
# 127.0.0.1:5460, once per design; etcd: 3 members on 127.0.0.1:2480-2485), runs the same
# workloads against it, stops it, and prints one table comparing them, also written to
# bench-results/latest.md. The first-minute workload (5,000 and 100,000 requests/s offered, open
# loop) puts nginx (Debian's, configured by jepsen/src/bench/cdn.rs) in front of the cluster as the
# CDN. Then the sweeps (clients 64 to 16,384; 1 to 10,000 shows; 1,000 to
# 100,000 seats per show) on the cluster, PostgreSQL's conditional update and etcd, with each
# backend's CPU per attempt and memory, drawn as SVG in bench-results/plots/. Data lives in
# fresh directories under $TMPDIR/booking-bench, removed afterwards; fsync stays on everywhere.
#
# Usage: bash scripts/bench.sh [--quick] [--backends cluster,pg,etcd]
#          [--workloads on-sale,many-shows,uncontended,map-reads,first-minute]
#          [--first-minute-rate 5000,100000] [--clients 256,1024,4096]
#          [--duration S] [--seats N] [--rate R[,R...]] [--open-only] [--readers N]
#          [--sweeps clients,shows,seats|none] [--sweep-backends ...] [--sweep-duration S]
#          [--pg-pool-max N] [--snapshot-logs N] [--out FILE]   (--help lists them all)
#   --quick: about a minute once built (C=256, 3 s runs, 10,000 seats, 100,000 uncontended,
#            no sweeps).
# Exit: 0 every run's check passed, 1 a check failed or a run could not be made, 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
BOOKING_BENCH_SETUP=1 bash scripts/setup.sh
# The same selection as the other scripts build, so that features unify the same way and
# nothing is compiled twice.
cargo build --release --workspace --bins
target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/release/bench" "$@"
