#!/bin/sh
# nvme: 4 KiB random reads of namespace 1 through rctb's NVMe-oF/RDMA
# initiator (verbs on $DEV) against the kernel target, at queue depth 1 and
# 32, in the rows fio fills through the kernel's host in the same boot.
set -u
if [ -z "${NVMET_NQN:-}" ] || [ -z "${RCTB:-}" ]; then
    echo "no NVMe target here" >&2
    exit 0
fi
reps=${HWV_BENCH_REPS:-3}
rc=0
for qd in 1 32; do
    # About two seconds each under TCG (fio: ~500 IOPS at 1, ~1600 at 32).
    ios=$((qd == 1 ? 1000 : 4000))
    i=0
    while [ "$i" -lt "$reps" ]; do
        i=$((i + 1))
        if ! "$TIMEOUT" 120 "$RCTB" nvme bench --backend verbs --device "$DEV" -a "$NVMET_ADDR" -s "$NVMET_PORT" \
            -n "$NVMET_NQN" --nsid 1 --bs 4096 --qd "$qd" --ios "$ios" -Q $((qd + 1 > 2 ? qd + 1 : 2)); then
            rc=1
        fi
    done
done
exit $rc
