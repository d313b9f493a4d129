#!/usr/bin/env bash
# The MQTT listener side by side with Mosquitto, the same client
# (`eventmesh-bench mqtt`) against both, the two brokers taking turns in
# each of RUNS rounds:
#
#   1. pub: QoS 1 publishes of SIZE bytes (256), 16 clients × 64 in flight;
#      eventmesh syncs every publish to disk before its PUBACK (the default
#      durability), Mosquitto runs with `persistence true` (its in-memory
#      store, saved to disk from time to time);
#   2. fanout: one publisher at RATE (10,000) QoS 0 messages/s to 100 QoS 0
#      subscribers of `bench/fan/#`; each subscriber's rate, and each
#      broker's CPU time per delivered message;
#   3. idle: CONNECTIONS (10,000) connections that only keep alive; each
#      broker's resident memory while it holds them.
#
#   bench/mqtt.sh                          # 10 s, 3 rounds
#   DURATION=3s RUNS=1 bench/mqtt.sh       # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-10s}"
runs="${RUNS:-3}"
rate="${RATE:-10000}"
size="${SIZE:-256}"
conns="${CONNECTIONS:-10000}"
target="${CARGO_TARGET_DIR:-target}/release"
cargo build --release -q -p eventmesh-server -p eventmesh-bench
mosquitto="$(command -v mosquitto || echo /usr/sbin/mosquitto)"
source bench/env.sh
ulimit -n 65536 2>/dev/null || true

log="$work/server.log"
"$target/eventmesh" serve -D "eventmesh.data.dir=$work/data" \
  -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 \
  -D eventmesh.server.tcp.port=off -D eventmesh.server.mqtt.port=0 \
  -D eventmesh.server.connections.max=30000 \
  -D eventmesh.server.connections.per.address.max=30000 >"$log" 2>&1 &
em=$!
pids+=("$em")
wait_for "$log" "MQTT listening on"
em_addr="$(addr "$log" "MQTT")"

mport="$(port)"
mkdir -p "$work/mosquitto"
cat >"$work/mosquitto.conf" <<CONF
listener $mport 127.0.0.1
allow_anonymous true
persistence true
persistence_location $work/mosquitto/
max_inflight_messages 0
max_queued_messages 0
CONF
"$mosquitto" -c "$work/mosquitto.conf" >"$work/mosquitto.log" 2>&1 &
mq=$!
pids+=("$mq")
sleep 1

bench() { "$target/eventmesh-bench" mqtt "$@" --duration "$duration"; }
for round in $(seq 1 "$runs"); do
  for broker in eventmesh mosquitto; do
    if [ "$broker" = eventmesh ]; then a="$em_addr"; p="$em"; else a="127.0.0.1:$mport"; p="$mq"; fi
    echo "round $round $broker pub $(bench pub --addr "$a" --clients 16 --window 64 --size "$size" --pid "$p")"
    echo "round $round $broker fanout $(bench fanout --addr "$a" --subscribers 100 --rate "$rate" --size "$size" --pid "$p")"
  done
done
for broker in eventmesh mosquitto; do
  if [ "$broker" = eventmesh ]; then a="$em_addr"; p="$em"; else a="127.0.0.1:$mport"; p="$mq"; fi
  echo "$broker idle $("$target/eventmesh-bench" mqtt idle --addr "$a" --connections "$conns" --duration 5s --pid "$p")"
done
