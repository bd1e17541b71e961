#!/bin/sh
# rcsession: GET throughput of the RC session server for 1 MiB objects, in
# the same boot as perftest's ib_write_bw at 1 MiB (the write_bw-1MiB row).
# `rctb rc-session selftest` runs the server on PEER (rxe0) and the client on
# DEV (rxe1) in one process: each GET is a whole session (PREPARE: PD, CQ,
# QP and a 1 MiB staging region registered, the object copied in; the
# client's QP connected; READY; one 1 MiB WRITE_WITH_IMM; the client's
# completion; the reaper destroying it all). Throughput is object bytes over
# the time from the first PREPARE to the last completion, in perftest's MB
# (2^20). Columns: rctb-session (one session at a time), rctb-session-d4
# and -d8 (four and eight sessions in flight, a client QP each, as that many
# concurrent gateway clients), all busy-polling as perftest does.
# RCS_BENCH_N (120, as HWV_N_1M) GETs per run. The selftest's "time" line
# (kept in bench-raw/rcsession.out) splits each run's time into PREPARE,
# client set-up, READY (RTR, RTS and the post, which on rxe starts sending
# inside the call), the data phase and the final step.
# hwv-timeout: 300
set -u
: "${RCS_BENCH_N:=${HWV_N_1M:-120}}" "${TIMEOUT:=timeout}" "${HWV_BENCH_REPS:=3}"
if [ -z "${RCTB:-}" ] || [ ! -x "$RCTB" ]; then
    echo "no rctb binary" >&2
    exit 1
fi
rc=0
for depth in 1 4 8; do
    tool=rctb-session
    [ $depth = 1 ] || tool=rctb-session-d$depth
    "$TIMEOUT" 95 "$RCTB" rc-session selftest --backend verbs --device "$DEV" --peer "$PEER" \
        --gid-index "${DEV_GID:-1}" --ops get --size 1MiB --transfers "$RCS_BENCH_N" --no-verify \
        --busy-poll --depth $depth --reps "$HWV_BENCH_REPS" --bench write_bw-1MiB --bench-tool $tool \
        --time-limit 90s || rc=1
done
exit $rc
