#!/usr/bin/env bash
# Publish-path benchmark: for 1 KiB events, 1 and 64 concurrent HTTP
# publishers, with synced (durable) and unsynced appends, each against a
# fresh release server on a temporary data directory. One JSON line per run.
# Usage: scripts/bench-publish.sh [duration, default 10s]
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-10s}"
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p eventmesh-server -p eventmesh-bench
for sync in true false; do
  data=$(mktemp -d)
  "$target/release/eventmesh" serve \
    -D eventmesh.storage.type=standalone -D eventmesh.data.dir="$data" \
    -D eventmesh.server.http.port=0 -D eventmesh.server.admin.port=0 \
    -D eventmesh.storage.sync=$sync 2> "$data.log" &
  pid=$!
  url=""
  for _ in $(seq 100); do
    url=$(grep -o 'traffic HTTP listening on [0-9.:]*' "$data.log" | awk '{print $NF}' || true)
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$data.log"; kill $pid; exit 1; }
  for c in 1 64; do
    printf '{"sync":%s,' "$sync"
    "$target/release/eventmesh-bench" publish --url "http://$url" --topic "bench-$c" \
      --concurrency "$c" --duration "$duration" --warmup 2s --size 1024 --json | sed 's/^{//'
  done
  kill -TERM $pid; wait $pid || true
  grep -o 'log writer: .*' "$data.log" | sed "s/^/# sync=$sync /" || true
  rm -rf "$data" "$data.log"
done
