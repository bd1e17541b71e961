#!/usr/bin/env bash
# ci/s3/ceph-up.sh DIR: a one-node Ceph (one mon, one memstore OSD, RGW on
# 127.0.0.1:${RCTB_S3_PORT:-7480}) with its state under DIR, cephx off and no
# mgr (RGW does not need one; `ceph -s` then shows no pool statistics), the
# S3 user AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (default rctbtest /
# rctbtestsecret) and the bucket ${RCTB_S3_BUCKET:-rctb}. Needs Debian's
# ceph-mon, ceph-osd and radosgw installed (apt-get install
# --no-install-recommends ceph-mon ceph-osd radosgw; 16.2 on Debian 12).
# Prints the export lines the tests need; ci/s3/ceph-down.sh DIR stops it.
# RGW answers after about 13 s (most of it making its pools).
set -euo pipefail
DIR=${1:?usage: ci/s3/ceph-up.sh DIR}
PORT=${RCTB_S3_PORT:-7480}
BUCKET=${RCTB_S3_BUCKET:-rctb}
AK=${AWS_ACCESS_KEY_ID:-rctbtest}
SK=${AWS_SECRET_ACCESS_KEY:-rctbtestsecret}
for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool; do
  command -v "$b" >/dev/null || { echo "ceph-up: no $b (apt-get install --no-install-recommends ceph-mon ceph-osd radosgw)" >&2; exit 1; }
done
DIR=$(realpath -m "$DIR")
mkdir -p "$DIR/mon" "$DIR/osd" "$DIR/run" "$DIR/log"
CONF=$DIR/ceph.conf
FSID=$(cat /proc/sys/kernel/random/uuid)
cat >"$CONF" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:3300
mon initial members = a
public addr = 127.0.0.1
# One node for tests: no authentication, one replica, few placement groups.
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
# The default stops the mon below 5% free disk.
mon data avail warn = 2
mon data avail crit = 1
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
pid file = $DIR/run/\$name.pid
mon data = $DIR/mon/\$cluster-\$id
osd data = $DIR/osd/\$cluster-\$id
[osd]
osd objectstore = memstore
memstore device bytes = 1073741824
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$PORT
# With auth none radosgw still asks for a secure mon session unless told.
ms mon client mode = crc
CONF
t0=$(date +%s.%N)
monmaptool --create --fsid "$FSID" --addv a '[v2:127.0.0.1:3300]' "$DIR/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap"
ceph-mon -c "$CONF" -i a -f >"$DIR/log/mon.out" 2>&1 &
echo $! >"$DIR/mon.pid"
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
ID=$(timeout 60 ceph -c "$CONF" osd new "$OSD_UUID")
mkdir -p "$DIR/osd/ceph-$ID"
ceph-osd -c "$CONF" -i "$ID" --mkfs --osd-uuid "$OSD_UUID" >"$DIR/log/osd-mkfs.out" 2>&1
ceph-osd -c "$CONF" -i "$ID" -f >"$DIR/log/osd.out" 2>&1 &
echo $! >"$DIR/osd.pid"
radosgw -c "$CONF" -n client.rgw.a -f >"$DIR/log/rgw.out" 2>&1 &
echo $! >"$DIR/rgw.pid"
for _ in $(seq 1 600); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break
  for p in mon osd rgw; do
    kill -0 "$(cat "$DIR/$p.pid")" 2>/dev/null || { echo "ceph-up: $p exited:" >&2; tail -20 "$DIR/log/$p.out" >&2; exit 1; }
  done
  sleep 0.1
done
curl -s -o /dev/null "http://127.0.0.1:$PORT/" || { echo "ceph-up: RGW does not answer on :$PORT after 60 s" >&2; exit 1; }
timeout 60 radosgw-admin -c "$CONF" user create --uid=rctb --display-name=rctb \
  --access-key="$AK" --secret-key="$SK" >/dev/null
# RGW needs CreateBucket (an existing one answers 409).
# RGW checks the payload hash header, which curl 7.88 does not send itself.
code=$(curl -s -o "$DIR/mkbucket.out" -w '%{http_code}' -X PUT --user "$AK:$SK" \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
  --aws-sigv4 "aws:amz:us-east-1:s3" "http://127.0.0.1:$PORT/$BUCKET")
case "$code" in
  200 | 409) ;;
  *) echo "ceph-up: CreateBucket $BUCKET answered $code:" >&2; cat "$DIR/mkbucket.out" >&2; exit 1 ;;
esac
echo "ceph-up: RGW on http://127.0.0.1:$PORT, bucket $BUCKET, in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" >&2
echo "export RCTB_S3_ENDPOINT=http://127.0.0.1:$PORT RCTB_S3_BUCKET=$BUCKET AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_REGION=us-east-1"
