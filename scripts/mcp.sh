#!/usr/bin/env bash
# Makes sure the official MCP clients the MCP gateway's tests drive are
# installed, and prints where they are:
# - Python's `mcp` package in a venv (MCP_VENV, default /var/tmp/mcp-venv);
# - the TypeScript SDK `@modelcontextprotocol/sdk` under a directory for
#   Node (MCP_NODE, default /var/tmp/mcp-node; Node 18 or later).
# It prints two lines: the venv's python, then the Node directory (the one
# holding node_modules).
set -euo pipefail
venv="${MCP_VENV:-/var/tmp/mcp-venv}"
node_dir="${MCP_NODE:-/var/tmp/mcp-node}"
py="$venv/bin/python"

have_py() { "$py" -c 'import mcp.client.streamable_http, httpx' >/dev/null 2>&1; }
if ! { [ -x "$py" ] && have_py; }; then
  echo "installing the MCP Python SDK from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'mcp>=1.20,<2' httpx >&2
fi
if ! have_py; then
  echo "the MCP Python SDK is not importable from $py" >&2
  exit 1
fi

have_node() {
  [ -f "$node_dir/node_modules/@modelcontextprotocol/sdk/package.json" ] &&
    (cd "$node_dir" && node -e 'require.resolve("@modelcontextprotocol/sdk/client/streamableHttp.js")') >/dev/null 2>&1
}
if ! have_node; then
  command -v npm >/dev/null 2>&1 || { echo "npm not found (scripts/deps.sh installs nodejs and npm)" >&2; exit 1; }
  echo "installing the MCP TypeScript SDK from npm into $node_dir" >&2
  mkdir -p "$node_dir"
  [ -f "$node_dir/package.json" ] || echo '{"name":"eventmesh-mcp-tests","private":true}' >"$node_dir/package.json"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent '@modelcontextprotocol/sdk@^1' >&2
fi
if ! have_node; then
  echo "the MCP TypeScript SDK is not usable from $node_dir" >&2
  exit 1
fi
echo "$py"
echo "$node_dir"
