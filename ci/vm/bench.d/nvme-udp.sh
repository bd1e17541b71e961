#!/bin/sh
# nvme-udp: NVMe-oF/RDMA with rctb's udp backend on one end (no RDMA device
# there: lib.sh udp_ns_up puts rxe2 on veth2 at 10.10.2.1 and the network
# namespace "udp" at 10.10.2.2), in the rows of bench.sh's fio + kernel
# host against nvmet, measured in the same boot:
# - tool fio+kernel/rctb-target: fio through the kernel's NVMe/RDMA host
#   (over rxe2) against `rctb nvme target --backend udp` in the namespace,
#   a 32 MiB in-memory namespace of 4 KiB blocks;
# - tool rctb-udp: `rctb nvme bench --backend udp` in the namespace against
#   the kernel's nvmet on 10.10.2.1 (an nvmet port there), beside
#   bench.d/nvme.sh's rctb over verbs (tool rctb).
# 4 KiB random reads at queue depth 1 and 32, HWV_BENCH_REPS runs each.
# hwv-timeout: 400
set -u
IP=/usr/bin/ip
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
if [ "${HWV_MODE:-}" != vm ] || [ -z "${RCTB:-}" ] || [ -z "${NVMET_NQN:-}" ]; then
    echo "needs the VM, rctb and the nvmet target" >&2
    exit 0
fi
reps=${HWV_BENCH_REPS:-3}
secs=${HWV_FIO_RUNTIME:-5}
W=$HWV_OUT/bench-nvme-udp
mkdir -p "$W"
NQN=nqn.2026-01.io.rctb:bench
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6c1d4b4e-2d9c-4c55-9f4e-00000000b0b2
TGT=10.10.2.2
rc=0
if ! why=$(udp_ns_up); then
    echo "setup: $why" >&2
    udp_ns_down
    exit 1
fi

# ---- the kernel host against rctb's target
printf '[[namespace]]\nlba_size = 4096\nblocks = 8192\n' >"$W/target.toml"
$IP netns exec udp "$TIMEOUT" 300 "$RCTB" nvme target --backend udp --device "$TGT" -n "$NQN" \
    --config "$W/target.toml" --for 280 >"$W/target.out" 2>"$W/target.err" &
tpid=$!
before=" $(ls /dev/nvme*n* 2>/dev/null | tr '\n' ' ') "
if ! wait_listening "$W/target.out"; then
    echo "rctb nvme target did not listen: $(last_line "$W/target.err")" >&2
    rc=1
elif ! "$TIMEOUT" 60 nvme connect -t rdma -a "$TGT" -s 4420 -w 10.10.2.1 -n "$NQN" --hostnqn=$HOSTNQN \
    >"$W/connect.log" 2>&1; then
    echo "nvme connect to rctb's target: $(last_line "$W/connect.log")" >&2
    rc=1
else
    if ! blk=$(new_block_device "$before" '/dev/nvme*n1'); then
        echo "no new /dev/nvme*n1 after connecting" >&2
        blk=""
        rc=1
    fi
    for qd in 1 32; do
        r=0
        while [ -n "$blk" ] && [ "$r" -lt "$reps" ]; do
            r=$((r + 1))
            iops=$(fio_randread "$blk" "$qd" "$secs" "$W/fio-qd$qd-r$r")
            if [ -n "$iops" ]; then
                echo "BENCH nvme-randread-4KiB-qd$qd fio+kernel/rctb-target $iops IOPS"
            else
                echo "fio qd$qd r$r: $(last_line "$W/fio-qd$qd-r$r.err")" >&2
                rc=1
            fi
        done
    done
    "$TIMEOUT" 60 nvme disconnect -n "$NQN" >/dev/null 2>&1
fi
kill "$tpid" 2>/dev/null
wait "$tpid" 2>/dev/null

# ---- rctb's initiator over udp against nvmet
if nvmet_port_up 3 10.10.2.1; then
    for qd in 1 32; do
        ios=$((qd == 1 ? 1000 : 4000))
        r=0
        while [ "$r" -lt "$reps" ]; do
            r=$((r + 1))
            if $IP netns exec udp "$TIMEOUT" 120 "$RCTB" nvme bench --backend udp --device "$TGT" -a 10.10.2.1 \
                -n "$NVMET_NQN" --nsid 1 --bs 4096 --qd "$qd" --ios "$ios" -Q $((qd + 1 > 2 ? qd + 1 : 2)) \
                >"$W/rctb-qd$qd-r$r.out" 2>&1; then
                sed -n 's/^BENCH \([^ ]*\) rctb /BENCH \1 rctb-udp /p' "$W/rctb-qd$qd-r$r.out"
            else
                echo "rctb nvme bench --backend udp qd$qd r$r: $(last_line "$W/rctb-qd$qd-r$r.out")" >&2
                rc=1
            fi
        done
    done
    nvmet_port_down 3
else
    echo "no nvmet port on 10.10.2.1" >&2
    rc=1
fi
udp_ns_down
exit $rc
