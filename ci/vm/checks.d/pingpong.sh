#!/bin/sh
# pingpong: rc-pingpong (example/, the guide's worked example, a user's
# application written against rctb's Transport) unchanged on two real
# backends: its echo server on rxe0 and its client on rxe1, both verbs
# (check pingpong/verbs); then the server on rxe2 and the client on the udp
# backend in the network namespace "udp", which has no RDMA device (check
# pingpong/udp; lib.sh udp_ns_up). Each client pings 500 times and prints
# its round trips.
set -u
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
if [ "${HWV_MODE:-vm}" != vm ]; then
    echo "PASS host-mode (needs a throw-away VM: it adds rxe2 and a network namespace)"
    exit 0
fi
PP=$(command -v rc-pingpong || true)
if [ -z "$PP" ]; then
    echo "FAIL binary no rc-pingpong in the guest (HWV_BINS)"
    exit 1
fi
W=$HWV_OUT/pingpong
mkdir -p "$W"
fails=0

# run NAME SERVER-DEVICE SERVER-IP CLIENT-COMMAND...
run() {
    _n=$1 _dev=$2 _ip=$3
    shift 3
    "$TIMEOUT" 90 "$PP" server --backend verbs --device "$_dev" --for 80 >"$W/server-$_n.out" 2>"$W/server-$_n.err" &
    _spid=$!
    wait_listening "$W/server-$_n.out"
    if ! grep -q "^LISTENING $_ip:7471" "$W/server-$_n.out"; then
        echo "FAIL $_n server did not listen: $(last_line "$W/server-$_n.err")"
        fails=1
    elif "$TIMEOUT" 60 "$@" --peer "$_ip" -n 500 >"$W/client-$_n.out" 2>"$W/client-$_n.err" &&
        grep -q '^rtt n=500 ' "$W/client-$_n.out"; then
        echo "PASS $_n $(cat "$W/client-$_n.out")"
    else
        echo "FAIL $_n client: $(last_line "$W/client-$_n.err")"
        fails=1
    fi
    kill "$_spid" 2>/dev/null
    wait "$_spid" 2>/dev/null
}

run verbs "$PEER" "$PEER_IP" "$PP" client --backend verbs --device "$DEV"

if why=$(udp_ns_up); then
    run udp rxe2 10.10.2.1 /usr/bin/ip netns exec udp "$PP" client --backend udp --device 10.10.2.2
else
    echo "FAIL udp setup: $why"
    fails=1
fi
udp_ns_down
exit $fails
