#!/usr/bin/env bash
# Runs a random schedule of faults against three eventmesh instances with
# PARTITION_OWNED_PULL (a three-node NATS JetStream cluster and etcd, all
# started by the test): kill -9 and restart of an instance, SIGSTOP past its
# lease, etcd killed and restarted, a graceful leave and join, while events
# are published without pause. At the end it checks that every acknowledged
# publish was delivered and that duplicates stay within the windows of the
# faults, and prints what it did.
#
#   scripts/chaos.sh            # 10 minutes
#   scripts/chaos.sh 60         # one minute
#   EVENTMESH_CHAOS_SEED=123 scripts/chaos.sh 60   # the same schedule again
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
scripts/deps.sh
EVENTMESH_NATS_SERVER="$(scripts/nats.sh)"
export EVENTMESH_NATS_SERVER EVENTMESH_CHAOS_SECS="$secs"
exec cargo test -p eventmesh-server --test chaos -- --exact chaos --nocapture
