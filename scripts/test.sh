#!/usr/bin/env bash
# Runs every test of the workspace (unit, conformance suites and the
# integration tests that start the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The JetStream tests start their own servers from this binary.
EVENTMESH_NATS_SERVER="$(scripts/nats.sh)"
export EVENTMESH_NATS_SERVER
# The A2A gateway's tests drive it with the official Python client.
EVENTMESH_A2A_PYTHON="$(scripts/a2a.sh)"
export EVENTMESH_A2A_PYTHON
# The dashboard's tests drive headless Chromium with Selenium.
EVENTMESH_BROWSER_PYTHON="$(scripts/browser.sh)"
export EVENTMESH_BROWSER_PYTHON
exec cargo test --workspace "$@"
