#!/usr/bin/env bash
# Runs every test of the workspace (unit, conformance suites and the
# integration tests that start the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The JetStream tests start their own servers from this binary.
EVENTMESH_NATS_SERVER="$(scripts/nats.sh)"
export EVENTMESH_NATS_SERVER
exec cargo test --workspace "$@"
