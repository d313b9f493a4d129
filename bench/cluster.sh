#!/usr/bin/env bash
# PARTITION_OWNED_PULL with one, two and three eventmesh instances on a
# three-node NATS JetStream cluster (replicas 3) and etcd, all on this one
# machine: what running as a cluster costs, not how it scales (every process
# shares the same cores). For each instance count, a fresh set of streams:
#
#   pub:    one load generator per instance, each 8 publishers x 256
#           pipelined publishes in flight over TCP, 1 KiB: the aggregate
#           events/s;
#   e2e:    one publisher and one subscriber (a group of one) on instance 0
#           at a fixed 2,000 events/s, 1 KiB: the latency from each event's
#           due time to its delivery, whichever instance owns its partition
#           (the owners forward to the subscriber's instance).
#
#   bench/cluster.sh                 # 10 s measured per run
#   DURATION=3s bench/cluster.sh     # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-10s}"
target="${CARGO_TARGET_DIR:-target}/release"
cargo build --release -q -p eventmesh-server -p eventmesh-bench
source bench/cluster-env.sh

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

for n in 1 2 3; do
  inst=()
  for k in $(seq 0 $((n - 1))); do
    log="$work/em$n-$k.log"
    start_instance "$log" "B$n" "b$n-$k"
    inst+=("$log")
  done
  for log in "${inst[@]}"; do wait_for "$log" "TCP listening on"; done
  common=(--size 1024 --duration "$duration" --warmup 2s --json --target eventmesh --transport tcp)
  jobs=()
  for k in $(seq 0 $((n - 1))); do
    log="${inst[$k]}"
    "$target/eventmesh-bench" pub --publishers 8 --window 256 --batch 1 "${common[@]}" \
      --server "http://$(addr "$log" "traffic HTTP")" --tcp-server "$(addr "$log" TCP)" \
      --topic "load$n" >"$work/pub$n-$k.json" &
    jobs+=($!)
  done
  wait "${jobs[@]}"
  total=0
  for k in $(seq 0 $((n - 1))); do
    total=$(python3 -c "print($total + $(field "$work/pub$n-$k.json" events_per_sec))")
  done
  log="${inst[0]}"
  "$target/eventmesh-bench" pubsub --rate 2000 --publishers 1 --subscribers 1 "${common[@]}" \
    --server "http://$(addr "$log" "traffic HTTP")" --tcp-server "$(addr "$log" TCP)" \
    --topic "e2e$n" >"$work/e2e$n.json"
  printf '%d instance(s): pub %.0f events/s in all; e2e at 2,000/s p50 %s ms, p99 %s ms\n' \
    "$n" "$total" "$(field "$work/e2e$n.json" p50_ms)" "$(field "$work/e2e$n.json" p99_ms)"
  # The next count starts on its own streams, with these instances gone.
  for k in $(seq 0 $((n - 1))); do
    pkill -TERM -f "eventmesh.cluster.instance.id=b$n-$k" || true
  done
  sleep 2
done
