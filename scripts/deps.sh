#!/usr/bin/env bash
# Installs the system packages the build needs, when they are missing:
# libclang-dev (RocksDB's Rust bindings are generated with libclang) and a
# C++ compiler. Uses apt-get (Debian/Ubuntu); run as root or with sudo.
set -euo pipefail

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing build dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install the Rust toolchain (rustup)" >&2; exit 1; }
