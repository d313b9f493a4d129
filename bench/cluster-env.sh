# Sourced by the cluster benchmarks (bench/cluster.sh, bench/a2a.sh): starts
# etcd and a three-node NATS JetStream cluster on free loopback ports in the
# work directory of bench/env.sh, and defines, besides that file's helpers,
#   start_etcd                a fresh etcd in place of the running one
#   start_instance LOG PREFIX ID [-D key=value ...]
#                             a PARTITION_OWNED_PULL instance on them, its
#                             streams named PREFIX, its id ID
# The caller sets `target` (the release directory) first.
source bench/env.sh
nats="$(scripts/nats.sh)"
command -v etcd >/dev/null || { echo "etcd is needed (apt-get install etcd-server)" >&2; exit 1; }

# A fresh etcd (the one before it, if any, stopped and its data removed);
# its client port in `ec`.
etcd_pid=""
start_etcd() {
  if [ -n "$etcd_pid" ]; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
    rm -rf "$work/etcd"
  fi
  ec="$(port)"
  local ep
  ep="$(port)"
  etcd --name bench --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
    --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
    --initial-cluster "bench=http://127.0.0.1:$ep" >"$work/etcd.log" 2>&1 &
  etcd_pid=$!
  pids+=("$etcd_pid")
  wait_for "$work/etcd.log" "ready to serve client requests"
}
start_etcd

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

start_instance() {
  local log="$1" prefix="$2" id="$3"
  shift 3
  "$target/eventmesh" serve \
    -D eventmesh.storage.type=jetstream -D "eventmesh.storage.jetstream.servers=$servers" \
    -D eventmesh.storage.jetstream.replicas=3 -D "eventmesh.storage.jetstream.stream.prefix=$prefix" \
    -D eventmesh.meta.type=etcd -D "eventmesh.meta.etcd.endpoints=http://127.0.0.1:$ec" \
    -D eventmesh.cluster.enabled=true -D eventmesh.delivery.topology=PARTITION_OWNED_PULL \
    -D eventmesh.cluster.secret=bench-cluster-secret-0123 -D "eventmesh.cluster.instance.id=$id" \
    -D eventmesh.topic.default.partitions=12 -D "eventmesh.data.dir=$work/data-$id" \
    -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 -D eventmesh.server.tcp.port=0 \
    "$@" >"$log" 2>&1 &
  pids+=($!)
}
