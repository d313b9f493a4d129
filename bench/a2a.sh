#!/usr/bin/env bash
# A2A round trips (`eventmesh-bench a2a`: blocking v1.0 SendMessage to
# agents that complete each task at once) side by side, on this one machine:
#
#   standalone:  one instance on its defaults (local log, embedded meta);
#   cluster, 1:  one PARTITION_OWNED_PULL instance on etcd and a three-node
#                JetStream cluster (replicas 3), clients and agents on it;
#   cluster, 2:  two such instances, the clients on the first and the agents
#                on the second: every round trip crosses them.
#
# Each with 1 agent and 1 client, then 2 agents and 8 clients; RUNS runs of
# each (fresh instances every run), DURATION measured after 2 s of warm-up.
#
#   bench/a2a.sh                      # 10 s, 3 runs
#   DURATION=3s RUNS=1 bench/a2a.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-10s}"
runs="${RUNS:-3}"
target="${CARGO_TARGET_DIR:-target}/release"
cargo build --release -q -p eventmesh-server -p eventmesh-bench
source bench/cluster-env.sh

# Finished tasks go soon: the gateway's sweeper reads every task.
a2a=(-D eventmesh.a2a.task.retention.ms=2000)

bench() { # LABEL CLIENT_URL AGENT_URL AGENTS CLIENTS
  local out
  out="$("$target/eventmesh-bench" a2a --server "$2" --agent-server "$3" --agents "$4" \
    --clients "$5" --duration "$duration" --warmup 2s --json)"
  python3 -c '
import json, sys
d = json.loads(sys.argv[2])
print("%s, %s agent(s), %s client(s): %.0f tasks/s, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, errors %s"
      % (sys.argv[1], sys.argv[3], sys.argv[4], d["tasks_per_sec"], d["p50_ms"], d["p90_ms"],
         d["p99_ms"], d["errors"]))' "$1" "$out" "$4" "$5"
}

stop() { # PID...
  kill -TERM "$@" 2>/dev/null || true
  wait "$@" 2>/dev/null || true
}

for shape in "1 1" "2 8"; do
  read -r agents clients <<<"$shape"
  for r in $(seq 1 "$runs"); do
    tag="$agents-$clients-$r"

    log="$work/sa-$tag.log"
    "$target/eventmesh" serve -D "eventmesh.data.dir=$work/sa-$tag" \
      -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 \
      -D eventmesh.server.tcp.port=off "${a2a[@]}" >"$log" 2>&1 &
    pid=$!
    wait_for "$log" "traffic HTTP listening on"
    url="http://$(addr "$log" "traffic HTTP")"
    bench standalone "$url" "$url" "$agents" "$clients"
    stop "$pid"

    # A fresh etcd: agents, groups and offsets of the last run stay there.
    start_etcd
    start_instance "$work/c1-$tag.log" "A1x$tag" "c1-$tag" "${a2a[@]}"
    pid=$!
    wait_for "$work/c1-$tag.log" "traffic HTTP listening on"
    url="http://$(addr "$work/c1-$tag.log" "traffic HTTP")"
    bench "cluster, 1" "$url" "$url" "$agents" "$clients"
    stop "$pid"

    start_etcd
    start_instance "$work/c2a-$tag.log" "A2x$tag" "c2a-$tag" "${a2a[@]}"
    a=$!
    start_instance "$work/c2b-$tag.log" "A2x$tag" "c2b-$tag" "${a2a[@]}"
    b=$!
    wait_for "$work/c2a-$tag.log" "traffic HTTP listening on"
    wait_for "$work/c2b-$tag.log" "traffic HTTP listening on"
    bench "cluster, 2" "http://$(addr "$work/c2a-$tag.log" "traffic HTTP")" \
      "http://$(addr "$work/c2b-$tag.log" "traffic HTTP")" "$agents" "$clients"
    stop "$a" "$b"
  done
done
