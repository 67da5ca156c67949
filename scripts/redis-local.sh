#!/usr/bin/env bash
# Starts Debian's redis-server for `headroom serve --queue` and `headroom worker` on this machine:
# loopback only, in the foreground (Ctrl-C stops it), data in ./redis-data (an append-only file,
# so queued jobs and history survive a Redis restart).
#
#   bash scripts/redis-local.sh [PORT]          # default 6379
#   ./build/headroom serve  --queue redis://127.0.0.1:6379/0 --output-dir /shared/output &
#   ./build/headroom worker --queue redis://127.0.0.1:6379/0 --output-dir /shared/output --device cuda:0 &
#   ./build/headroom worker --queue redis://127.0.0.1:6379/0 --output-dir /shared/output --device cuda:1 &
#
# Fronts and workers on other hosts need Redis on an address they reach: see docs/DISTRIBUTED.md
# (bind, protected-mode and requirepass are then the deployment's business, not this script's).
set -euo pipefail
PORT="${1:-6379}"
DATA="${REDIS_DATA:-redis-data}"
if ! command -v redis-server > /dev/null 2>&1; then
  echo "redis-server is not installed: sudo apt-get install redis-server (or .ci/install-deps)" >&2
  exit 1
fi
mkdir -p "$DATA"
echo "redis on redis://127.0.0.1:$PORT/0 (data in $DATA); Ctrl-C stops it" >&2
exec redis-server --bind 127.0.0.1 --port "$PORT" --dir "$DATA" \
  --appendonly yes --appendfsync everysec --save "" --protected-mode yes
