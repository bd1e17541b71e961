#!/bin/sh
# verbs-shim: Debian's perftest through rctb's libibverbs.so.1 against
# perftest on kernel rxe, beside perftest on rxe alone, in one boot, runs
# interleaved (HWV_BENCH_REPS each):
#
#   rxe           ib_*  -d rxe1 (10.10.0.2)  ->  ib_* -d rxe0 (10.10.0.1)
#   rctb-ibverbs  ib_*  -d rctb0 (10.10.2.2, netns udp, the library)  ->  ib_* -d rxe2 (10.10.2.1)
#
# Workloads: write_bw-64KiB and send_bw-4KiB (MB/s, perftest's average) and
# send_lat-64B (us, perftest's typical latency), and write_bw-64KiB-cm:
# the same WRITEs connected through RDMA CM (`-R`; rctb's librdmacm.so.1
# as well), for the library only (see below why rxe has no such row). The
# library is the client
# (the side that posts); rxe serves. Each client runs through lib.sh
# cost_run (CPU time and context switches into cost.txt); the library's
# counts (sent, retransmitted, timeouts, NAKs) go to
# bench-verbs-shim-rctb-ibverbs-WORKLOAD.stats. HWV_STRACE=1 adds one run
# of each client under strace -c (system calls per operation).
# hwv-timeout: 420
set -u
IP=/usr/bin/ip
SHIM=/usr/local/lib/rctb-verbs
. "${HWV_LIB:-/hwv/lib.sh}"
if [ "${HWV_MODE:-vm}" != vm ] || [ ! -e "$SHIM/libibverbs.so.1" ]; then
    echo "verbs-shim bench: needs the VM and the library" >&2
    exit 1
fi
if ! why=$(udp_ns_up); then
    echo "setup: $why" >&2
    udp_ns_down
    exit 1
fi
RXE2_GID=$(gid_index rxe2)
port=18800

# listening PORT CM: whether the server (in the root namespace, on rxe)
# listens: its TCP port, or with CM (1) its rdma_cm id on PORT
listening() {
    if [ "$2" = 1 ]; then
        /usr/bin/rdma res show cm_id 2>/dev/null | grep 'state LISTEN' | grep -q ":$1 "
    else
        grep -q ":$(printf '%04X' "$1") 00000000:0000 0A" /proc/net/tcp
    fi
}

# run TOOL WORKLOAD OPS PROG ARGS...: one run (OPS: its operations, for
# the cost lines); prints its BENCH line unless COST_STRACE=1
run() {
    tool=$1 workload=$2 ops=$3 prog=$4
    shift 4
    port=$((port + 1))
    out=$HWV_OUT/bench-verbs-shim-$tool-$workload
    if [ "$tool" = rxe ]; then
        "$TIMEOUT" 120 "$prog" -d "$PEER" -x "$PEER_GID" -p "$port" "$@" >"$out.srv" 2>&1 &
    else
        "$TIMEOUT" 120 "$prog" -d rxe2 -x "$RXE2_GID" -p "$port" "$@" >"$out.srv" 2>&1 &
    fi
    spid=$!
    cm=0
    case " $* " in *" -R "*) cm=1 ;; esac
    n=0
    while ! listening "$port" "$cm" && [ $n -lt 100 ]; do sleep 0.2; n=$((n + 1)); done
    if [ "$tool" = rxe ]; then
        cost_run "$workload" "$tool" "$ops" -- \
            "$TIMEOUT" 120 "$prog" -d "$DEV" -x "$DEV_GID" -p "$port" "$@" "$PEER_IP" >"$out.cli" 2>&1
    else
        cost_run "$workload" "$tool" "$ops" -- $IP netns exec udp env LD_LIBRARY_PATH=$SHIM RCTB_IBV_ADDR=10.10.2.2 \
            RCTB_IBV_STATS="$out.stats" "$TIMEOUT" 120 "$prog" -d rctb0 -p "$port" "$@" 10.10.2.1 >"$out.cli" 2>&1
    fi
    # The client's figure is the one kept. A server whose client left
    # without its closing exchange (perftest gives up on its report when
    # its clock estimate fails, as on a busy TCG host) would wait out its
    # timeout: 10 s after the client, it is stopped.
    n=0
    while kill -0 "$spid" 2>/dev/null && [ $n -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
    kill "$spid" 2>/dev/null
    wait "$spid"
    [ "${COST_STRACE:-0}" = 1 ] && return 0
    line=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$out.cli" | tail -n 1)
    case $workload in
        send_lat-*) v=$(echo "$line" | awk '{ print $5 }') unit=us ;;      # t_typical
        *) v=$(echo "$line" | awk '{ print $4 }') unit=MB/s ;;             # BW average
    esac
    [ -n "$v" ] && echo "BENCH $workload $tool $v $unit"
}

reps=$(seq "${HWV_BENCH_REPS:-3}")
[ "${HWV_STRACE:-0}" = 1 ] && reps="$reps strace"
for rep in $reps; do
    if [ "$rep" = strace ]; then COST_STRACE=1; else COST_STRACE=0; fi
    export COST_STRACE
    for tool in rxe rctb-ibverbs; do
        run "$tool" write_bw-64KiB 200 ib_write_bw -s 65536 -n 200
        # rxe1 -> rxe0 through the kernel's RDMA CM would not cross the
        # veth: both addresses are the root namespace's own, so the CM
        # resolves the route as loopback (rxe0 to itself, as the first
        # boot showed). The CM row is the library's alone, beside the two
        # rows without CM.
        [ "$tool" = rctb-ibverbs ] && run "$tool" write_bw-64KiB-cm 200 ib_write_bw -s 65536 -n 200 -R
        run "$tool" send_bw-4KiB 1000 ib_send_bw -s 4096 -n 1000
        run "$tool" send_lat-64B 500 ib_send_lat -s 64 -n 500
    done
done
COST_STRACE=0
udp_ns_down
