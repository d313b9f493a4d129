#!/usr/bin/env bash
# Builds and starts the runtime on its embedded defaults:
# standalone storage and local state in ./data, traffic HTTP on
# 127.0.0.1:10105, admin HTTP on 127.0.0.1:10106, the TCP protocol on
# 127.0.0.1:10000 (conf/eventmesh.properties).
# Extra arguments are passed to `eventmesh serve`, e.g. -D key=value.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
exec cargo run --release -p eventmesh-server --bin eventmesh -- serve "$@"
