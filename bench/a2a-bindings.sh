#!/usr/bin/env bash
# The A2A bindings and the MCP gateway side by side, in one run, against one
# standalone instance on its defaults (gRPC listener on):
#
#   1. `eventmesh-bench a2a --binding jsonrpc|rest|grpc`: blocking
#      SendMessage to the same agent (in the bench's process, completing
#      each task at once), 1 client and then 4; the bindings take turns
#      within each of RUNS rounds, DURATION each after 2 s of warm-up.
#      Besides tasks/s and latency, the server's CPU time (user + system,
#      from /proc) per task, warm-up included;
#   2. bench/mcp_call.py: one client calling the `echo` agent (`eventmesh
#      agent echo`) by A2A JSON-RPC, by MCP tools/call, and by the official
#      MCP Python SDK, the three in turn, CALLS calls each.
#
#   bench/a2a-bindings.sh                               # 10 s, 3 rounds, 1000 calls
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
server=$!
pids+=("$server")
wait_for "$log" "traffic HTTP listening on"
wait_for "$log" "gRPC listening on"
url="http://$(addr "$log" "traffic HTTP")"
grpc="$(addr "$log" "gRPC")"
cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }

for clients in 1 4; do
  for r in $(seq 1 "$runs"); do
    for binding in jsonrpc rest grpc; do
      before="$(cpu)"
      out="$("$target/eventmesh-bench" a2a --server "$url" --grpc "$grpc" --binding "$binding" \
        --clients "$clients" --duration "$duration" --warmup 2s --json)"
      after="$(cpu)"
      python3 -c '
import json, os, sys
d = json.loads(sys.argv[1])
ticks = int(sys.argv[3]) - int(sys.argv[2])
cpu_us = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(d["tasks_with_warmup"], 1)
print("%-7s %s client(s): %6.0f tasks/s, p50 %.3f ms, p90 %.3f ms, server CPU %4.0f us/task, errors %s"
      % (d["binding"], d["clients"], d["tasks_per_sec"], d["p50_ms"], d["p90_ms"], cpu_us, d["errors"]))
' "$out" "$before" "$after"
    done
  done
done

"$target/eventmesh" agent echo --id echo --server "$url" >"$work/echo.log" 2>&1 &
pids+=($!)
wait_for "$work/echo.log" '"inbox"'
"$py" bench/mcp_call.py "$url" echo echo "$calls" 100
