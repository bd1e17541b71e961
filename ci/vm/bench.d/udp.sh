#!/bin/sh
# udp: RDMA WRITE bandwidth of the udp backend (rctb-udp) against kernel
# rxe, in the same boot as perftest's ib_write_bw (the write_bw-1MiB row):
# `rctb udp-bench` in network namespace "udp" (10.10.2.2) writes 1 MiB
# messages, 4 outstanding, into rxe2 (10.10.2.1; lib.sh udp_ns_up), one
# BENCH line per run. It also prints the 64-byte SEND round trip and the
# CPU time an idle wait used (kept in ci/out/bench-udp.out).
set -u
. /hwv/lib.sh
if [ -z "${RCTB:-}" ] || [ ! -x "$RCTB" ]; then
    echo "no rctb binary" >&2
    exit 1
fi
if [ "${HWV_MODE:-vm}" != vm ]; then
    # on a host: two UDP endpoints on loopback (no rxe2, no namespace)
    exec "$TIMEOUT" 120 "$RCTB" udp-bench --iters 64 --reps "${HWV_BENCH_REPS:-3}" --pingpong 500 --idle-secs 2
fi
if ! why=$(udp_ns_up); then
    echo "setup: $why" >&2
    udp_ns_down
    exit 1
fi
/usr/bin/ip netns exec udp "$TIMEOUT" 120 "$RCTB" udp-bench --device 10.10.2.2 --peer rxe2 --mtu 1024 \
    --iters 64 --reps "${HWV_BENCH_REPS:-3}" --pingpong 500 --idle-secs 2
rc=$?
udp_ns_down
exit $rc
