#!/usr/bin/env bash
# Makes sure the official JavaScript A2A SDK (@a2a-js/sdk 1.3, a client the
# A2A gateway's tests drive over JSON-RPC and HTTP+JSON) is installed in a
# directory of its own (A2A_JS_DIR, default /var/tmp/a2a-js) and prints
# that directory; its node_modules is what the test scripts import from.
set -euo pipefail
dir="${A2A_JS_DIR:-/var/tmp/a2a-js}"
have() { [ -f "$dir/node_modules/@a2a-js/sdk/package.json" ] &&
  grep -q '"version": "1\.3\.' "$dir/node_modules/@a2a-js/sdk/package.json"; }
if ! have; then
  echo "installing @a2a-js/sdk 1.3 from npm into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --silent '@a2a-js/sdk@1.3' >&2
fi
if ! have; then
  echo "@a2a-js/sdk 1.3 is not installed in $dir" >&2
  exit 1
fi
echo "$dir"
