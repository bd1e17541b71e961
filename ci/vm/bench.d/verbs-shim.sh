#!/bin/sh
# verbs-shim: Debian's perftest through rctb's libibverbs.so.1 against
# perftest on kernel rxe, beside perftest on rxe alone, in one boot, runs
# interleaved (HWV_BENCH_REPS each):
#
#   rxe           ib_*  -d rxe1 (10.10.0.2)  ->  ib_* -d rxe0 (10.10.0.1)
#   rctb-ibverbs  ib_*  -d rctb0 (10.10.2.2, netns udp, the library)  ->  ib_* -d rxe2 (10.10.2.1)
#
# Workloads: write_bw-64KiB and send_bw-4KiB (MB/s, perftest's average) and
# send_lat-64B (us, perftest's typical latency). The library is the client
# (the side that posts); rxe serves. Each client runs through lib.sh
# cost_run (CPU time and context switches into cost.txt); the library's
# counts (sent, retransmitted, timeouts, NAKs) go to
# bench-verbs-shim-rctb-ibverbs-WORKLOAD.stats. HWV_STRACE=1 adds one run
# of each client under strace -c (system calls per operation).
# hwv-timeout: 300
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

listening() { # NS PORT
    hex=$(printf '%04X' "$2")
    if [ "$1" = udp ]; then t=$($IP netns exec udp cat /proc/net/tcp); else t=$(cat /proc/net/tcp); fi
    echo "$t" | grep -q ":$hex 00000000:0000 0A"
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
    n=0
    while ! listening root "$port" && [ $n -lt 100 ]; do sleep 0.2; n=$((n + 1)); done
    if [ "$tool" = rxe ]; then
        cost_run "$workload" "$tool" "$ops" -- \
            "$TIMEOUT" 120 "$prog" -d "$DEV" -x "$DEV_GID" -p "$port" "$@" "$PEER_IP" >"$out.cli" 2>&1
    else
        cost_run "$workload" "$tool" "$ops" -- $IP netns exec udp env LD_LIBRARY_PATH=$SHIM RCTB_IBV_ADDR=10.10.2.2 \
            RCTB_IBV_STATS="$out.stats" "$TIMEOUT" 120 "$prog" -d rctb0 -p "$port" "$@" 10.10.2.1 >"$out.cli" 2>&1
    fi
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
        run "$tool" send_bw-4KiB 1000 ib_send_bw -s 4096 -n 1000
        run "$tool" send_lat-64B 500 ib_send_lat -s 64 -n 500
    done
done
COST_STRACE=0
udp_ns_down
