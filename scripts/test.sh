#!/usr/bin/env bash
# Runs every test of the workspace (unit, conformance suites and the
# integration tests that start the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
exec cargo test --workspace "$@"
