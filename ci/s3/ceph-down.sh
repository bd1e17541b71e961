#!/usr/bin/env bash
# ci/s3/ceph-down.sh DIR: stops the RGW, OSD and mon that ci/s3/ceph-up.sh
# DIR started (their pid files; TERM, then KILL after 10 s) and removes DIR.
set -euo pipefail
DIR=${1:?usage: ci/s3/ceph-down.sh DIR}
for p in rgw osd mon; do
  [ -f "$DIR/$p.pid" ] || continue
  pid=$(cat "$DIR/$p.pid")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
done
rm -rf "$DIR"
