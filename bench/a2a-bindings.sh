#!/usr/bin/env bash
# The A2A bindings and the MCP gateway side by side, in one run, against one
# standalone instance on its defaults (gRPC listener on):
#
#   1. `eventmesh-bench a2a --binding jsonrpc|rest|grpc`: blocking
#      SendMessage to the same agent (in the bench's process, completing
#      each task at once), 1 client and then 4; the bindings take turns
#      within each of RUNS rounds, DURATION each after 2 s of warm-up;
#   2. bench/mcp.py: one client calling the `echo` agent (`eventmesh agent
#      echo`) by A2A JSON-RPC, by MCP tools/call, and by the official MCP
#      Python SDK, the three in turn, CALLS calls each.
#
#   bench/a2a-bindings.sh                             # 10 s, 3 rounds, 1000 calls
#   DURATION=3s RUNS=1 CALLS=200 bench/a2a-bindings.sh  # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-10s}"
runs="${RUNS:-3}"
calls="${CALLS:-1000}"
target="${CARGO_TARGET_DIR:-target}/release"
cargo build --release -q -p eventmesh-server -p eventmesh-bench
py="$(scripts/mcp.sh | head -1)"
source bench/env.sh

log="$work/server.log"
"$target/eventmesh" serve -D "eventmesh.data.dir=$work/data" \
  -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 \
  -D eventmesh.server.tcp.port=off -D eventmesh.server.grpc.port=0 \
  -D eventmesh.a2a.task.retention.ms=2000 >"$log" 2>&1 &
pids+=($!)
wait_for "$log" "traffic HTTP listening on"
wait_for "$log" "gRPC listening on"
url="http://$(addr "$log" "traffic HTTP")"
grpc="$(addr "$log" "gRPC")"

for clients in 1 4; do
  for r in $(seq 1 "$runs"); do
    for binding in jsonrpc rest grpc; do
      "$target/eventmesh-bench" a2a --server "$url" --grpc "$grpc" --binding "$binding" \
        --clients "$clients" --duration "$duration" --warmup 2s
    done
  done
done

"$target/eventmesh" agent echo --id echo --server "$url" >"$work/echo.log" 2>&1 &
pids+=($!)
wait_for "$work/echo.log" '"inbox"'
"$py" bench/mcp.py "$url" echo echo "$calls" 100
