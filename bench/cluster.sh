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
nats="$(scripts/nats.sh)"
command -v etcd >/dev/null || { echo "etcd is needed (apt-get install etcd-server)" >&2; exit 1; }

work="$(mktemp -d /var/tmp/eventmesh-cluster-bench.XXXX)"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # FILE TEXT
  for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; tail -20 "$1" >&2; exit 1
}

ec="$(port)"; ep="$(port)"
etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
  --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
  --initial-cluster "bench=http://127.0.0.1:$ep" >"$work/etcd.log" 2>&1 &
pids+=($!)

cp=(); np=(); mp=()
for i in 0 1 2; do cp+=("$(port)"); np+=("$(port)"); mp+=("$(port)"); done
routes="nats://127.0.0.1:${cp[0]},nats://127.0.0.1:${cp[1]},nats://127.0.0.1:${cp[2]}"
for i in 0 1 2; do
  "$nats" -js -a 127.0.0.1 -p "${np[$i]}" -m "${mp[$i]}" --server_name "n$i" -sd "$work/n$i" \
    --cluster_name bench --cluster "nats://127.0.0.1:${cp[$i]}" --routes "$routes" >"$work/n$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:${mp[$i]}/healthz" >/dev/null && break
    sleep 0.1
  done
done
servers="nats://127.0.0.1:${np[0]},nats://127.0.0.1:${np[1]},nats://127.0.0.1:${np[2]}"

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

for n in 1 2 3; do
  inst=()
  for k in $(seq 0 $((n - 1))); do
    log="$work/em$n-$k.log"
    "$target/eventmesh" serve \
      -D eventmesh.storage.type=jetstream -D "eventmesh.storage.jetstream.servers=$servers" \
      -D eventmesh.storage.jetstream.replicas=3 -D "eventmesh.storage.jetstream.stream.prefix=B$n" \
      -D eventmesh.meta.type=etcd -D "eventmesh.meta.etcd.endpoints=http://127.0.0.1:$ec" \
      -D eventmesh.cluster.enabled=true -D eventmesh.delivery.topology=PARTITION_OWNED_PULL \
      -D eventmesh.cluster.secret=bench -D "eventmesh.cluster.instance.id=b$n-$k" \
      -D eventmesh.topic.default.partitions=12 -D "eventmesh.data.dir=$work/data$n-$k" \
      -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 -D "eventmesh.server.tcp.port=$(port)" \
      >"$log" 2>&1 &
    pids+=($!)
    inst+=("$log")
  done
  addr() { grep -o "$2 listening on [0-9.:]*" "$1" | head -1 | awk '{print $NF}'; }
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
