#!/usr/bin/env bash
# Makes sure Python's official A2A SDK (a2a-sdk 1.3 with its gRPC extra,
# the client the A2A gateway's tests drive over every binding) is installed
# in a venv (A2A_VENV, default /var/tmp/a2a-venv) and prints the venv's
# python.
set -euo pipefail
venv="${A2A_VENV:-/var/tmp/a2a-venv}"
py="$venv/bin/python"
have() { "$py" -c 'import a2a.client, httpx, grpc; from importlib.metadata import version; assert version("a2a-sdk").startswith("1.3")' >/dev/null 2>&1; }
if ! { [ -x "$py" ] && have; }; then
  echo "installing a2a-sdk 1.3 (with gRPC) from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'a2a-sdk[grpc]==1.3.*' httpx >&2
fi
if ! have; then
  echo "a2a-sdk 1.3 (with grpc) is not importable from $py" >&2
  exit 1
fi
echo "$py"
