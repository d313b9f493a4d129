#!/usr/bin/env bash
# Routing by content, measured: the runtime alone, a fresh standalone store
# per run, the same load generator (eventmesh-bench) throughout.
#
#   fan-out: `pubsub` over TCP, 1 KiB events, 4 publishers x 64 in flight,
#            flat out; once with one unfiltered group, then with FANOUT_GROUPS
#            groups, group k with the filter `benchgroup = 'gk'` (sql) and
#            event n carrying benchgroup "g<n mod FANOUT_GROUPS>", so every event
#            matches exactly one group. Reported: delivered events/s, the
#            server's CPU time per delivered event (user + system over the
#            server's life, divided by its eventmesh_acks_total), and its
#            resident memory at the end and at its peak.
#   skip:    `sub` over TCP: SKIP_EVENTS 1 KiB events prefilled, then drained
#            by one group of 2 subscribers taking all of them, and by one
#            whose filter takes one event in 100 (--select 100). Reported:
#            the seconds each took to catch up.
#
# Usage: bench/fanout.sh [--quick]
#   --quick   3 s runs, 100 groups and a 100,000-event backlog
# Environment:
#   DURATION          measured window of each fan-out run (default 10s)
#   FANOUT_GROUPS            filtered groups (default 1000)
#   SKIP_EVENTS       backlog of the skip runs (default 1000000)
#   CARGO_TARGET_DIR  where the release binaries are (default target)
#   NO_BUILD=1        skip `cargo build --release`
#
# Prints a markdown table on stdout (progress on stderr); stops the servers
# it started and removes their stores on exit.
set -euo pipefail

DURATION="${DURATION:-10s}"
FANOUT_GROUPS="${FANOUT_GROUPS:-1000}"
SKIP_EVENTS="${SKIP_EVENTS:-1000000}"
for arg in "$@"; do
  case "$arg" in
    --quick) DURATION=3s FANOUT_GROUPS=100 SKIP_EVENTS=100000 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
if [ "${NO_BUILD:-}" != 1 ]; then
  cargo build --release -p eventmesh-server -p eventmesh-bench >&2
fi
em="$target/release/eventmesh"
bench="$target/release/eventmesh-bench"

pid=""
dir=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  [ -z "$dir" ] || rm -rf -- "$dir"
}
trap cleanup EXIT

# A free TCP port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts a server on a fresh store; sets pid, dir, http, admin, tcp.
start() {
  dir=$(mktemp -d "${TMPDIR:-/tmp}/em-fanout.XXXXXX")
  http=$(free_port) admin=$(free_port) tcp=$(free_port)
  token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  "$em" serve -D "eventmesh.admin.token=$token" -D eventmesh.storage.type=standalone -D "eventmesh.data.dir=$dir/data" \
    -D "eventmesh.server.http.port=$http" -D "eventmesh.server.admin.port=$admin" \
    -D "eventmesh.server.tcp.port=$tcp" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    curl -fs "http://127.0.0.1:$admin/admin/ready" >/dev/null 2>&1 && return
    kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
    sleep 0.1
  done
  echo "error: the server did not come up" >&2
  exit 1
}

stop() {
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf -- "$dir"
  pid="" dir=""
}

# The server's CPU seconds so far (user + system).
cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$pid/stat"
}

# A counter's value from the server's /metrics.
counter() {
  curl -fs -H "authorization: Bearer $token" "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 == m {print $2}'
}

rows=()
fanout() {
  local name=$1; shift
  start
  log_line "fan-out: $name"
  local out
  out=$("$bench" pubsub --server "http://127.0.0.1:$http" --tcp-server "127.0.0.1:$tcp" \
    --transport tcp --size 1024 --publishers 4 --window 64 --duration "$DURATION" --warmup 2s \
    --json "$@")
  local acks cpu_s rss hwm
  acks=$(counter eventmesh_acks_total)
  cpu_s=$(cpu)
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
  rows+=("$(python3 - "$name" "$out" "$acks" "$cpu_s" "$rss" "$hwm" <<'EOF'
import json, sys
name, out, acks, cpu, rss, hwm = sys.argv[1:]
d = json.loads(out)
us = float(cpu) / max(float(acks), 1) * 1e6
errors = sum(d["errors"].values())
print(f"| fan-out: {name} | {d['events_per_sec']:,.0f} events/s | {us:.1f} µs CPU/event "
      f"| {int(rss) // 1024} MiB (peak {int(hwm) // 1024} MiB) | {errors} |")
EOF
)")
  stop
}

skip() {
  local name=$1; shift
  start
  log_line "skip: $name"
  local out
  out=$("$bench" sub --server "http://127.0.0.1:$http" --tcp-server "127.0.0.1:$tcp" \
    --transport tcp --size 1024 --subscribers 2 --count "$SKIP_EVENTS" --duration 600s --json "$@")
  rows+=("$(python3 - "$name" "$out" <<'EOF'
import json, sys
name, out = sys.argv[1:]
d = json.loads(out)
errors = sum(d["errors"].values())
print(f"| skip: {name} | {d['seconds']:.2f} s to catch up | {d['events']:,} delivered | | {errors} |")
EOF
)")
  stop
}

log_line() { printf '%s\n' "$*" >&2; }

fanout "1 group, no filter"
fanout "$FANOUT_GROUPS groups, 1 sql filter each" --groups "$FANOUT_GROUPS"
skip "all of $SKIP_EVENTS"
skip "1 % of $SKIP_EVENTS" --select 100

echo "| run | rate | cost | memory | errors |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
