#!/usr/bin/env bash
# Runs every test of the workspace (unit, conformance suites and the
# integration tests that start the real binary), every test binary even
# after one fails, then the fuzz targets for a short bounded time
# (scripts/fuzz.sh; EVENTMESH_FUZZ_SECONDS=0 skips them).
#
# It ends with one line over the whole run: `tests: N passed, N failed`.
# A test binary that was built but did not report a result (it crashed,
# was killed, or never ran because the run was stopped) counts as one
# failure and is named above that line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The JetStream tests start their own servers from this binary.
EVENTMESH_NATS_SERVER="$(scripts/nats.sh)"
export EVENTMESH_NATS_SERVER
# The A2A gateway's tests drive it with the official Python client.
EVENTMESH_A2A_PYTHON="$(scripts/a2a.sh)"
export EVENTMESH_A2A_PYTHON
# ... and with the official JavaScript client.
EVENTMESH_A2A_JS="$(scripts/a2a-js.sh)"
export EVENTMESH_A2A_JS
# The MCP gateway's tests drive it with the official Python and TypeScript
# clients (scripts/mcp.sh prints the venv's python, then the Node directory).
mcp_paths="$(scripts/mcp.sh)"
EVENTMESH_MCP_PYTHON="$(sed -n 1p <<<"$mcp_paths")"
EVENTMESH_MCP_NODE="$(sed -n 2p <<<"$mcp_paths")"
export EVENTMESH_MCP_PYTHON EVENTMESH_MCP_NODE
# The MQTT listener's tests drive it with the Paho Python client.
EVENTMESH_MQTT_PYTHON="$(scripts/mqtt.sh)"
export EVENTMESH_MQTT_PYTHON
# The interop tests use third-party clients: the CloudEvents SDKs (Python
# and JavaScript), Prometheus's parsers and OpenTelemetry's protobuf types
# (scripts/interop.sh prints the venv's python, then the Node directory).
interop_paths="$(scripts/interop.sh)"
EVENTMESH_INTEROP_PYTHON="$(sed -n 1p <<<"$interop_paths")"
EVENTMESH_INTEROP_NODE="$(sed -n 2p <<<"$interop_paths")"
export EVENTMESH_INTEROP_PYTHON EVENTMESH_INTEROP_NODE
# The dashboard's tests drive headless Chromium with Selenium.
EVENTMESH_BROWSER_PYTHON="$(scripts/browser.sh)"
export EVENTMESH_BROWSER_PYTHON

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What to test: the whole workspace, or what the arguments choose.
if [ $# -eq 0 ]; then
    set -- --workspace
fi

# Every test executable the run should report on, by file name.
if ! cargo test --no-run --message-format=json "$@" >"$work/build.json"; then
    # The same build again, for the compiler's messages as text.
    cargo test --no-run "$@" 2>&1 | grep -v '^ *Compiling ' || true
    echo "the tests did not build"
    echo "tests: 0 passed, 1 failed"
    exit 1
fi
python3 - "$work/build.json" >"$work/expected" <<'PY'
import json, os, sys
names = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        names.add(os.path.basename(m["executable"]))
print("\n".join(sorted(names)))
PY

summary() {
    awk -v expected="$work/expected" -v extra="$1" '
        # `Running <target> (<executable>)`, then that binary'"'"'s output.
        /^     Running [^ ]+.* \([^()]+\)$/ {
            current = $0
            sub(/^.*\(/, "", current)
            sub(/\)$/, "", current)
            sub(/^.*\//, "", current)
            next
        }
        /^ *Doc-tests / { current = "doc-tests " $2; docs[current] = 1; next }
        /^test result:/ {
            passed += $4
            failed += $6
            if (current != "") { reported[current] = 1 }
            current = ""
        }
        END {
            while ((getline path < expected) > 0) {
                if (path != "" && !(path in reported)) {
                    print "no result from " path
                    missing++
                }
            }
            for (d in docs) {
                if (!(d in reported)) {
                    print "no result from " d
                    missing++
                }
            }
            printf "tests: %d passed, %d failed\n", passed, failed + missing + extra
            exit (failed + missing + extra > 0)
        }' "$work/test.log"
}

status=0
on_stop() {
    echo "the test run was stopped before it ended (time limit or signal)"
    summary 0 || true
    exit 124
}
trap on_stop TERM INT
cargo test --no-fail-fast "$@" 2>&1 | tee "$work/test.log" || status=$?
trap - TERM INT
# The fuzz targets run with the whole suite, not with a chosen part of it;
# a failed target counts as one failed test.
fuzz=0
if [ "$*" = --workspace ]; then
    scripts/fuzz.sh || fuzz=1
fi
counted=0
summary "$fuzz" || counted=$?
if [ "$status" -ne 0 ] || [ "$counted" -ne 0 ]; then
    exit 1
fi
