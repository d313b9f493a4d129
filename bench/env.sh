# Sourced by the benchmark scripts: a work directory under /var/tmp
# removed on exit (with every process whose pid is added to `pids`), and
#   port                      a free TCP port
#   wait_for FILE TEXT        waits (60 s at most) for TEXT in FILE
#   addr LOG WHAT             the address an instance logged for WHAT
work="$(mktemp -d /var/tmp/eventmesh-bench.XXXX)"
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
addr() { grep -o "$2 listening on [0-9.:]*" "$1" | head -1 | awk '{print $NF}'; }
