#!/usr/bin/env bash
# Connector throughput on this one machine: how fast each source moves
# records from its system into the log, and each sink events from the log
# out to its system, on one standalone instance (positions in RocksDB),
# against real PostgreSQL and Redis servers and the local disk. Each figure
# is the median of RUNS runs with fresh servers and a fresh instance; the
# mesh's own batched publish rate of the same events, measured in the same
# run, is the ceiling a source is compared with.
#
#   bench/connectors.sh                  # 100,000 records, 3 runs
#   N=20000 RUNS=1 bench/connectors.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/release"
cargo build --release -q -p eventmesh-server
exec python3 bench/connectors.py "$target/eventmesh" "${N:-100000}" "${RUNS:-3}"
