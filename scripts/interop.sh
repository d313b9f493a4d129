#!/usr/bin/env bash
# Makes sure the third-party clients the interop tests use are installed:
# in a Python venv (INTEROP_VENV, default /var/tmp/interop-venv) the
# CloudEvents SDK (PyPI `cloudevents` 2, both its `v1` and its `core` API), the Prometheus client's
# text parsers (`prometheus_client`) and OpenTelemetry's protobuf types
# (`opentelemetry-proto`); in a directory of its own (INTEROP_JS_DIR,
# default /var/tmp/interop-js) the JavaScript CloudEvents SDK (npm
# `cloudevents` 10). Prints the venv's python, then the Node directory
# (whose node_modules the test scripts import from).
set -euo pipefail
venv="${INTEROP_VENV:-/var/tmp/interop-venv}"
dir="${INTEROP_JS_DIR:-/var/tmp/interop-js}"
py="$venv/bin/python"
have_py() {
  "$py" -c 'import cloudevents.core.bindings.http, cloudevents.v1.http, prometheus_client.parser, prometheus_client.openmetrics.parser, opentelemetry.proto.trace.v1.trace_pb2, httpx' >/dev/null 2>&1
}
if ! { [ -x "$py" ] && have_py; }; then
  echo "installing cloudevents, prometheus_client and opentelemetry-proto from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'cloudevents>=2.2,<3' 'prometheus_client>=0.20' 'opentelemetry-proto>=1.27' httpx >&2
fi
if ! have_py; then
  echo "the interop clients are not importable from $py" >&2
  exit 1
fi
have_js() { [ -f "$dir/node_modules/cloudevents/package.json" ] &&
  grep -q '"version": "10\.' "$dir/node_modules/cloudevents/package.json"; }
if ! have_js; then
  echo "installing cloudevents 10 from npm into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --silent 'cloudevents@10' >&2
fi
if ! have_js; then
  echo "cloudevents 10 is not installed in $dir" >&2
  exit 1
fi
echo "$py"
echo "$dir"
