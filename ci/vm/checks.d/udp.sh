#!/bin/sh
# udp: the udp backend (rctb-udp) as a RoCEv2 peer of kernel rxe.
#
# A second veth pair: veth2 (10.10.2.1) carries a third soft-RoCE device,
# rxe2; veth3 (10.10.2.2) sits in the network namespace "udp", which has no
# rxe device, so UDP port 4791 is free there. From inside that namespace,
# rctb runs the conformance suite between a UDP endpoint on 10.10.2.2 and
# rxe2 (opened with verbs, which does not care about namespaces), both ways:
# `udp-to-rxe/<case>` with the UDP endpoint requesting, `rxe-to-udp/<case>`
# with rxe2 requesting. The QPs are connected by hand (QPN, PSN, GID out of
# band); RDMA CM over UDP does not exist, so the cm/ cases are skipped.
# tcpdump in the namespace keeps the exchange in capture-udp.pcap, which
# the host decodes with tshark and ICRC-checks (capture-udp-decode,
# capture-udp-icrc).
set -u
IP=/usr/bin/ip
if [ "${HWV_MODE:-vm}" != vm ]; then
    echo "PASS host-mode (needs a throw-away VM: it adds rxe2 and a network namespace)"
    exit 0
fi
if [ -z "${RCTB:-}" ] || [ ! -x "$RCTB" ]; then
    echo "FAIL rctb no rctb binary (see the build check)"
    exit 1
fi
. /hwv/lib.sh
fails=0

if ! why=$(udp_ns_up); then
    echo "FAIL setup $why"
    udp_ns_down
    exit 1
fi
echo "PASS setup rxe2 on veth2 (10.10.2.1), UDP endpoint in netns udp (10.10.2.2)"

CAP=$HWV_OUT/capture-udp.pcap
tcpdump_pid=""
if command -v tcpdump >/dev/null; then
    $IP netns exec udp tcpdump -Z root -U -i veth3 -s 0 -w "$CAP" 'udp port 4791 or arp' \
        >"$HWV_OUT/tcpdump-udp.log" 2>&1 &
    tcpdump_pid=$!
    i=0
    while [ $i -lt 50 ] && ! grep -q listening "$HWV_OUT/tcpdump-udp.log" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
fi

# run_dir NAME DEVICE PEER: one direction of the suite, a line per case
run_dir() {
    log=$HWV_OUT/udp-$1.txt
    $IP netns exec udp "$TIMEOUT" 40 "$RCTB" conformance --backend udp --device "$2" --peer "$3" \
        >"$log" 2>"$HWV_OUT/udp-$1.err"
    rc=$?
    n=0
    while read -r st name why; do
        case "$st" in
            PASS) echo "PASS $1/$name"; n=$((n + 1)) ;;
            FAIL) echo "FAIL $1/$name $why"; n=$((n + 1)); fails=1 ;;
        esac
    done <"$log"
    if [ "$rc" = 124 ]; then
        echo "FAIL $1 timed out after 40s (ci/out/udp-$1.txt)"
        fails=1
    elif [ $n = 0 ]; then
        echo "FAIL $1 exit $rc, no case ran: $(tail -n 1 "$HWV_OUT/udp-$1.err" | cut -c1-200)"
        fails=1
    elif [ "$rc" != 0 ] && [ $fails = 0 ]; then
        echo "FAIL $1 exit $rc: $(tail -n 1 "$HWV_OUT/udp-$1.err" | cut -c1-200)"
        fails=1
    fi
    # the endpoint's counters: a bad ICRC from rxe would show here
    tail -n 1 "$HWV_OUT/udp-$1.err"
}

run_dir udp-to-rxe 10.10.2.2 rxe2
run_dir rxe-to-udp rxe2 10.10.2.2

if [ -n "$tcpdump_pid" ]; then
    sleep 0.5
    kill "$tcpdump_pid" 2>/dev/null
    wait "$tcpdump_pid" 2>/dev/null
fi
udp_ns_down
exit $fails
