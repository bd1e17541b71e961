#!/bin/sh
# object: the hipobj gateway on rxe. `rctb object serve --backend verbs` on
# PEER (rxe0), its clients on DEV (rxe1) over HTTP to PEER_IP:8080.
#
# Checks:
#   serve      the server comes up and prints its address
#   roundtrip  OBJ_COUNT (200) objects (0 B, 1 B, then up to OBJ_MAX bytes)
#              PUT, GET back and compared byte for byte, ETags too, by
#              OBJ_JOBS (4) concurrent clients (concurrent data phases)
#   cli        `rctb object put` and `get` of a 3 MiB file, compared with cmp
#   crash-data the server SIGKILLed while an 8 MiB PUT's RDMA WRITE runs:
#              after a restart the key still holds its previous version, whole
#   crash-commit the server SIGKILLed as soon as the PUT's temporary file
#              appears (its commit): after a restart the key holds the old
#              version or the new one, whole, never a part; no temporary left
#
# hwv-timeout: 150
set -u
: "${OBJ_COUNT:=200}" "${OBJ_MAX:=65536}" "${OBJ_JOBS:=4}" "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
export AWS_ACCESS_KEY_ID=AKHWV AWS_SECRET_ACCESS_KEY=hwvsecret
work=${TMPDIR:-/tmp}/object.$$
root=$work/root
mkdir -p "$root"
LOG=$HWV_OUT/object-serve.log
fails=0
t0=$(cut -d' ' -f1 /proc/uptime)
# at WHAT: a progress line with the seconds since the hook started
at() { echo "[+$(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime)s] $*"; }
pass() { echo "PASS $*"; }
fail() {
    echo "FAIL $*"
    fails=1
}
if [ -z "${RCTB:-}" ] || [ -z "${PEER_IP:-}" ]; then
    echo "FAIL setup no rctb binary or no peer address (RCTB=${RCTB:-} PEER_IP=${PEER_IP:-})"
    exit 1
fi
EP=http://$PEER_IP:8080
srv=""
start_server() {
    "$RCTB" object serve --backend verbs --device "$PEER" --root "$root" --listen "$PEER_IP:8080" >>"$LOG" 2>&1 &
    srv=$!
    _i=0
    while [ $_i -lt 300 ]; do
        [ "$(grep -c '^listening on' "$LOG")" -ge "$1" ] && return 0
        kill -0 $srv 2>/dev/null || return 1
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}
client() { $TIMEOUT 100 "$RCTB" object "$@" --endpoint "$EP" --device "$DEV" --quiet; }

if start_server 1; then
    pass serve "$(grep '^listening on' "$LOG" | tail -n 1)"
else
    fail serve "$(tail -n 3 "$LOG" | tr '\n' ' ')"
    kill $srv 2>/dev/null
    exit 1
fi

at "roundtrip"
out=$(client roundtrip --count "$OBJ_COUNT" --max-size "$OBJ_MAX" --jobs "$OBJ_JOBS" --bucket rt --prefix hwv 2>&1)
rc=$?
echo "$out"
if [ $rc = 0 ]; then
    pass roundtrip "$(echo "$out" | tail -n 1)"
else
    fail roundtrip "exit $rc: $(echo "$out" | grep -m 3 -e FAIL -e 'rctb object' | tr '\n' ' ')"
fi

at "cli"
head -c 3145728 /dev/urandom >"$work/in.bin"
if client put s3://cli/file.bin "$work/in.bin" && client get s3://cli/file.bin "$work/out.bin" \
    && cmp "$work/in.bin" "$work/out.bin"; then
    pass cli "3 MiB put, get, cmp"
else
    fail cli "put/get/cmp of 3 MiB failed"
fi

# crash: v1 (4 KiB) first; then an 8 MiB v2 whose PUT the server does not survive.
at "crash"
head -c 4096 /dev/urandom >"$work/v1.bin"
head -c 8388608 /dev/urandom >"$work/v2.bin"
# after_restart NAME: the key holds v1 or v2 whole, and no temporary is left
after_restart() {
    if ! start_server "$2"; then
        fail "$1" "the server did not restart: $(tail -n 2 "$LOG" | tr '\n' ' ')"
        return
    fi
    left=$(ls -A "$root/.tmp" | wc -l)
    if client get s3://crash/obj "$work/got.bin" >/dev/null 2>&1 && cmp -s "$work/got.bin" "$work/v1.bin"; then
        held=v1
    elif cmp -s "$work/got.bin" "$work/v2.bin"; then
        held=v2
    else
        held="neither ($(wc -c <"$work/got.bin" 2>/dev/null) bytes)"
    fi
    case "$held" in
        v1 | v2) [ "$left" = 0 ] && pass "$1" "$3; after restart the key holds $held whole, no temporary left" \
            || fail "$1" "$left temporaries left after restart" ;;
        *) fail "$1" "$3; after restart the key holds $held" ;;
    esac
}

for kind in data commit; do
    client put s3://crash/obj "$work/v1.bin" >/dev/null || fail "crash-$kind" "PUT of v1 failed"
    rm -f "$work/phases"
    $TIMEOUT 60 "$RCTB" object put s3://crash/obj "$work/v2.bin" --endpoint "$EP" --device "$DEV" --quiet \
        --phases 2>"$work/phases" >/dev/null &
    put=$!
    _i=0
    when="never (the PUT finished first)"
    if [ $kind = data ]; then
        while [ $_i -lt 600 ] && kill -0 $put 2>/dev/null; do
            if grep -q 'phase: RDMA WRITE' "$work/phases"; then
                kill -9 $srv
                when="during the RDMA WRITE"
                break
            fi
            sleep 0.02
            _i=$((_i + 1))
        done
    else
        while [ $_i -lt 20000 ] && kill -0 $put 2>/dev/null; do
            if [ -n "$(ls -A "$root/.tmp")" ]; then
                kill -9 $srv
                when="with the temporary file present (commit)"
                break
            fi
            _i=$((_i + 1))
        done
    fi
    wait $put
    prc=$?
    kill -9 $srv 2>/dev/null
    wait $srv 2>/dev/null
    at "crash-$kind: killed $when; the PUT exited $prc"
    n=$(grep -c '^listening on' "$LOG")
    after_restart "crash-$kind" $((n + 1)) "killed $when, PUT exit $prc"
done

kill $srv 2>/dev/null
wait $srv 2>/dev/null
at "done"
echo "---- serve log"
cat "$LOG"
rm -rf "$work"
exit $fails
