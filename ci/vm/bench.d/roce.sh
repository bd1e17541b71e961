#!/bin/sh
# roce: receiver throughput of `rctb roce-rx` fed by `rctb fpga-emu`
# (SEND_WITH_IMM, DEV -> PEER), at the message sizes ib_send_bw runs, so the
# table puts rctb beside perftest in the rows send_bw-4KiB and send_bw-1MiB.
# Like perftest: both sides busy-poll, each pinned to its own CPU, payloads
# are not generated or checked (--payload unchecked / --no-verify), 32 sends
# in flight (the engine's window; ib_send_bw keeps 128). The figure is the
# receiver's: bytes / (last frame - first frame), in perftest's MB (2^20).
# ROCE_N_4K (8000) and ROCE_N_1M (40) frames per run: about 3-4 s each on
# a quiet host, 10-15 s on a loaded one (with the ib_send_bw -t 32 runs
# that took 150 s in all), hence the budget:
# hwv-timeout: 300
set -u
: "${ROCE_N_4K:=8000}" "${ROCE_N_1M:=40}" "${HWV_BENCH_REPS:=3}" "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
fails=0
# rxe's own counters (requester rxe1 = DEV, responder rxe0 = PEER): an RNR
# NAK, a retry or a drop would explain a slow run.
COUNTERS="$DEV:sent_pkts $DEV:rcvd_rnr_err $DEV:completer_retry_err $PEER:rcvd_pkts $PEER:send_rnr_err $PEER:out_of_seq_request $PEER:duplicate_request"
counters() {
    for _c in $COUNTERS; do
        cat "/sys/class/infiniband/${_c%%:*}/ports/1/hw_counters/${_c#*:}" 2>/dev/null || echo 0
    done | tr '\n' ' '
}
# deltas BEFORE AFTER: "name +n" for each counter that moved
deltas() {
    echo "$1" "$2" | awk -v names="$COUNTERS" 'BEGIN { n = split(names, nm, " ") }
        { for (i = 1; i <= n; i++) if ($(i + n) != $i) printf "%s +%d ", nm[i], $(i + n) - $i }'
}
# run WORKLOAD SIZE FRAMES DEPTH REP
run() {
    dir=${TMPDIR:-/tmp}/roce-bench.$$
    mkdir -p "$dir"
    log=$HWV_OUT/bench-roce-$1-r$5
    taskset 1 "$TIMEOUT" 60 "$RCTB" roce-rx --device "$PEER" --fpga-ip "$DEV_IP" --frames "$3" --wait-done \
        --busy-poll --no-verify --max-payload "$2" --depth "$4" --interval 0s \
        --host-params "$dir/h" --fpga-params "$dir/f" --handoff-timeout 20s --idle-timeout 10s >"$log.rx" 2>&1 &
    rx=$!
    c0=$(counters)
    taskset 2 "$TIMEOUT" 60 "$RCTB" fpga-emu --device "$DEV" --host-ip "$PEER_IP" --frames "$3" --size "$2" \
        --window 32 --busy-poll --payload unchecked --interval 0s \
        --host-params "$dir/h" --fpga-params "$dir/f" --handoff-timeout 20s >"$log.emu" 2>&1
    erc=$?
    wait $rx
    rrc=$?
    echo "roce $1 r$5: rxe counters: $(deltas "$c0" "$(counters)")"
    rm -rf "$dir"
    # roce-rx: N frames, B bytes in T s: ...
    mbs=$(awk '/^roce-rx: [0-9]+ frames, [0-9]+ bytes in / { printf "%.1f", $4 / 1048576 / $7 }' "$log.rx")
    if [ $erc = 0 ] && [ $rrc = 0 ] && [ -n "$mbs" ]; then
        echo "BENCH $1 rctb $mbs MB/s"
    else
        echo "roce $1 r$5: fpga-emu exit $erc, roce-rx exit $rrc: $(tail -n 1 "$log.rx")" >&2
        fails=1
    fi
}
if [ -z "${RCTB:-}" ]; then
    echo "no rctb binary" >&2
    exit 1
fi
# The engine's window is the surf engine's max_send_wr (32) with every send
# signalled; ib_send_bw keeps 128 in flight, one in 100 signalled. For
# comparison, ib_send_bw with the engine's settings (-t 32 -Q 1): the row
# send_bw-4KiB-t32.
xarg() { [ -n "$1" ] && echo "-x $1"; }
pt32() {
    f=$HWV_OUT/bench-roce-perftest-t32-r$1
    # shellcheck disable=SC2046 # xarg is empty or two words
    taskset 1 "$TIMEOUT" 60 ib_send_bw -d "$PEER" $(xarg "${PEER_GID:-}") -F -s 4096 -n "$ROCE_N_4K" -t 32 -Q 1 >"$f.srv" 2>&1 &
    srv=$!
    sleep 1.5
    c0=$(counters)
    # shellcheck disable=SC2046
    taskset 2 "$TIMEOUT" 60 ib_send_bw -d "$DEV" $(xarg "${DEV_GID:-}") -F -s 4096 -n "$ROCE_N_4K" -t 32 -Q 1 127.0.0.1 >"$f.cli" 2>&1
    wait $srv
    echo "perftest -t 32 -Q 1 r$1: rxe counters: $(deltas "$c0" "$(counters)")"
    bw=$(awk '$1 == 4096 && NF >= 4 { print $4 }' "$f.cli" | tail -n 1)
    [ -n "$bw" ] && [ "$bw" != 0.00 ] && echo "BENCH send_bw-4KiB-t32 perftest $bw MB/s"
}
for r in $(seq 1 "$HWV_BENCH_REPS"); do
    run send_bw-4KiB 4096 "$ROCE_N_4K" 256 "$r"
    pt32 "$r"
done
for r in $(seq 1 "$HWV_BENCH_REPS"); do
    run send_bw-1MiB 1048576 "$ROCE_N_1M" 64 "$r"
done
exit $fails
