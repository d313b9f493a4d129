#!/usr/bin/env bash
# A bounded soak test. Starts `eventmesh serve` on free loopback ports with a
# temporary data directory (standalone storage, embedded meta store, the
# log's retention on so that the disk is bounded, webhooks to loopback
# allowed) and runs `eventmesh-bench soak` against it: SOAK_RATE events/s for
# SOAK_DURATION to one topic read at once by a webhook group (pushed to a
# receiver in the load generator), a long-poll group and an SSE group, with a
# sample of the server's resident memory, open descriptors, async tasks and
# disk usage every SOAK_SAMPLE. Then it stops the server with SIGTERM and
# exits with the soak's verdict: 0 when no resource grew without bound, the
# rate was kept and every group caught up (see docs/benchmarks.md, "Soak").
#
#   scripts/soak.sh                                  # 30 minutes at 5,000 events/s
#   SOAK_DURATION=3m scripts/soak.sh                 # a short run
#   SOAK_DURATION=10m SOAK_RATE=2000 scripts/soak.sh
#
# Environment:
#   SOAK_DURATION      how long to publish: 90s, 3m, 1h or bare seconds (default 30m)
#   SOAK_RATE          events/s (default 5000)
#   SOAK_SAMPLE        interval between samples (default 60s; a run shorter
#                      than ten of them samples more often)
#   SOAK_RETENTION_MS  the log's retention (default a sixth of the duration,
#                      at most 300000: the disk has levelled off before the
#                      warm-up, the first fifth of the run, is over)
#   SOAK_ARGS          more options for `eventmesh-bench soak`, e.g.
#                      "--pollers 4 --fd-slack 64" (see its --help)
#   SOAK_RESULTS       where each run's directory goes (default
#                      $CARGO_TARGET_DIR/soak, target/soak without it)
#   SOAK_KEEP_DATA=1   keep the data directory (printed) instead of removing it
#   SOAK_BUILD_TIMEOUT the longest the build may take, seconds (default 3600)
#   CARGO_TARGET_DIR   cargo's target dir (default target)
#   NO_BUILD=1         use the release binaries already built
#
# A run writes <results dir>/samples.jsonl (one JSON object per sample, then
# the verdict), soak.log (the samples and the verdict for people),
# eventmesh.log and eventmesh.properties (the server's configuration).
#
# Bounded: after the build (at most SOAK_BUILD_TIMEOUT), the rest runs under
# a hard timeout of the duration plus 6 minutes (the catch-up, starting and
# stopping the server, a margin); past it everything started here gets
# SIGTERM and the script exits 124.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
em_bin="$target/release/eventmesh"
bench_bin="$target/release/eventmesh-bench"

log() { printf 'soak.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Seconds in a duration: 90s, 3m, 1h, or bare seconds.
to_seconds() {
  [[ "$1" =~ ^([0-9]+)(s|m|h)?$ ]] || return 1
  case "${BASH_REMATCH[2]}" in
    h) echo $((BASH_REMATCH[1] * 3600)) ;;
    m) echo $((BASH_REMATCH[1] * 60)) ;;
    *) echo "${BASH_REMATCH[1]}" ;;
  esac
}
duration_secs=$(to_seconds "${SOAK_DURATION:-30m}") ||
  die "SOAK_DURATION=${SOAK_DURATION:-} is not a duration (try 30m, 90s, 1h)"
[ "$duration_secs" -gt 0 ] || die "SOAK_DURATION must be longer than 0"
rate="${SOAK_RATE:-5000}"
[[ "$rate" =~ ^[0-9]+$ ]] && [ "$rate" -gt 0 ] || die "SOAK_RATE=$rate is not a positive whole number"
sample_secs=$(to_seconds "${SOAK_SAMPLE:-60s}") || die "SOAK_SAMPLE=${SOAK_SAMPLE:-} is not a duration"
retention_ms="${SOAK_RETENTION_MS:-$((duration_secs * 1000 / 6 < 300000 ? duration_secs * 1000 / 6 : 300000))}"
[[ "$retention_ms" =~ ^[0-9]+$ ]] && [ "$retention_ms" -gt 0 ] ||
  die "SOAK_RETENTION_MS=$retention_ms is not a positive number of milliseconds"
drain_secs=30
limit_secs=$((duration_secs + drain_secs + 330))

# --- Build, then the rest again under the hard timeout --------------------------
if [ -z "${SOAK_UNDER_TIMEOUT:-}" ]; then
  command -v timeout >/dev/null || die "timeout (coreutils) is needed"
  command -v python3 >/dev/null || die "python3 is needed (to find a free port)"
  if [ "${NO_BUILD:-}" != 1 ]; then
    log "building eventmesh and eventmesh-bench (release, in $target)"
    timeout "${SOAK_BUILD_TIMEOUT:-3600}" \
      cargo build --release -q -p eventmesh-server -p eventmesh-bench || die "cargo build failed"
  fi
  [ -x "$em_bin" ] || die "no $em_bin (build it, or unset NO_BUILD)"
  [ -x "$bench_bin" ] || die "no $bench_bin (build it, or unset NO_BUILD)"
  log "hard timeout: ${limit_secs}s"
  # timeout signals its whole process group: the server, the soak and this
  # script (whose trap then cleans up).
  SOAK_UNDER_TIMEOUT=1 exec timeout -k 30 "$limit_secs" "$0" "$@"
fi

# --- Everything started or created here is undone on exit ----------------------
em_pid=""
data=""
cleanup() {
  if [ -n "$em_pid" ] && kill -0 "$em_pid" 2>/dev/null; then
    kill -TERM "$em_pid" 2>/dev/null || true
    wait "$em_pid" 2>/dev/null || true
  fi
  if [ -n "$data" ] && [ "${SOAK_KEEP_DATA:-}" != 1 ]; then
    rm -rf -- "$data"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'log "hard timeout reached: stopping"; exit 124' TERM

results="${SOAK_RESULTS:-$target/soak}/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$results"
results=$(cd "$results" && pwd)
data=$(mktemp -d "${TMPDIR:-/var/tmp}/eventmesh-soak.XXXXXX")
log "results in $results"
[ "${SOAK_KEEP_DATA:-}" != 1 ] || log "data directory $data (kept)"

# A loopback port free a moment ago, for the TCP protocol (0 would turn it
# off); the HTTP ports take 0 and are read from the server's log.
tcp_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$results/eventmesh.properties" <<EOF
eventmesh.storage.type=standalone
eventmesh.meta.type=embedded
eventmesh.data.dir=$data
eventmesh.server.host=127.0.0.1
eventmesh.server.http.port=0
eventmesh.server.admin.port=0
eventmesh.server.tcp.port=$tcp_port
eventmesh.storage.retention.ms=$retention_ms
eventmesh.storage.retention.check.ms=1000
eventmesh.webhook.denied.cidrs=
EOF
# The admin token goes through the environment (the server and the soak both
# read EVENTMESH_ADMIN_TOKEN), not into a file or onto a command line.
EVENTMESH_ADMIN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export EVENTMESH_ADMIN_TOKEN

"$em_bin" serve --config "$results/eventmesh.properties" >"$results/eventmesh.log" 2>&1 &
em_pid=$!
for ((i = 0; i < 600; i++)); do
  grep -q "eventmesh ready in" "$results/eventmesh.log" && break
  kill -0 "$em_pid" 2>/dev/null || { cat "$results/eventmesh.log" >&2; die "eventmesh exited while starting"; }
  sleep 0.1
done
grep -q "eventmesh ready in" "$results/eventmesh.log" || die "eventmesh not ready after 60 s (see $results/eventmesh.log)"
listening() { grep -o "$1 listening on [0-9.:]*" "$results/eventmesh.log" | head -n 1 | awk '{print $NF}'; }
http_addr=$(listening "traffic HTTP")
admin_addr=$(listening "admin HTTP")
[ -n "$http_addr" ] && [ -n "$admin_addr" ] || die "no listening addresses in $results/eventmesh.log"
log "eventmesh (pid $em_pid) on http://$http_addr, admin http://$admin_addr, tcp 127.0.0.1:$tcp_port; retention ${retention_ms} ms"

rc=0
# shellcheck disable=SC2086 # SOAK_ARGS is a list of options
RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 "$bench_bin" soak \
  --server "http://$http_addr" --tcp-server "127.0.0.1:$tcp_port" --admin "http://$admin_addr" \
  --duration "${duration_secs}s" --rate "$rate" --sample "${sample_secs}s" \
  --drain "${drain_secs}s" --data-dir "$data" --out "$results/samples.jsonl" ${SOAK_ARGS:-} \
  2> >(tee "$results/soak.log" >&2) || rc=$?

# The server's CPU over its life (user + system), for the record.
if read -r -a stat <"/proc/$em_pid/stat" 2>/dev/null; then
  # Fields 14 and 15 (utime, stime) in clock ticks; the name in field 2 has no spaces.
  cpu_secs=$(( (stat[13] + stat[14]) / $(getconf CLK_TCK) ))
  up_secs=$(( $(date +%s) - $(stat -c %Y "$results/eventmesh.properties") ))
  log "eventmesh used ${cpu_secs}s of CPU in ${up_secs}s ($(( cpu_secs * 100 / (up_secs > 0 ? up_secs : 1) ))% of one core)"
fi

# Stop the server as an operator would, and check that it went down cleanly.
kill -TERM "$em_pid" 2>/dev/null || true
stopped=""
for ((i = 0; i < 300; i++)); do
  kill -0 "$em_pid" 2>/dev/null || { stopped=1; break; }
  sleep 0.1
done
if [ -z "$stopped" ]; then
  log "eventmesh did not stop within 30 s of SIGTERM; killing it"
  kill -KILL "$em_pid" 2>/dev/null || true
fi
em_rc=0
wait "$em_pid" 2>/dev/null || em_rc=$?
em_pid=""
if [ "$em_rc" -ne 0 ]; then
  log "eventmesh exited $em_rc on SIGTERM (see $results/eventmesh.log)"
  [ "$rc" -ne 0 ] || rc=1
fi
if [ "$rc" -eq 0 ]; then
  log "passed; samples in $results/samples.jsonl"
else
  log "FAILED (exit $rc); samples in $results/samples.jsonl"
fi
exit "$rc"
