#!/usr/bin/env bash
# ci/s3/seaweed-down.sh DIR: stops the SeaweedFS that ci/s3/seaweed-up.sh DIR
# started (its pid file; TERM, then KILL after 10 s) and removes DIR.
set -euo pipefail
DIR=${1:?usage: ci/s3/seaweed-down.sh DIR}
if [ -f "$DIR/weed.pid" ]; then
  pid=$(cat "$DIR/weed.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
fi
rm -rf "$DIR"
