#!/bin/sh
# bench.sh DEV PEER: yardsticks between two RDMA devices (ci/hw-validate --bench).
#
# Each measurement appends one line to $HWV_OUT/bench.txt:
#   <workload> <tool> <value> <unit>
# and the host prints the median of each (workload, tool) in a table with one
# column per tool, so our tools sit beside perftest and the kernel's NVMe host.
#   perftest:   ib_send_bw, ib_write_bw at 4 KiB and 1 MiB, client DEV -> server PEER
#   fio:        4 KiB randread on the kernel NVMe/RDMA host against the guest's
#               nvmet target (null_blk namespace), iodepth 1 and 32 (VM only)
#   bench.d/*.sh: our own tools (see bench.d/README.md)
# One check per group: bench-perftest, bench-fio, bench-<hook>.
#
# Environment: as checks.sh, plus HWV_BENCH_REPS (3), HWV_N_4K / HWV_N_1M
# (perftest iterations), HWV_FIO_RUNTIME (s), HWV_BENCH_DIR.
set -u
DEV=$1
PEER=$2
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
HWV_LIB=$HERE/lib.sh # hooks: . "$HWV_LIB" (cost_run, rxe_snap, ...)
: "${HWV_BENCH_REPS:=3}" "${HWV_N_4K:=30000}" "${HWV_N_1M:=120}" "${HWV_FIO_RUNTIME:=5}"
: "${HWV_BENCH_DIR:=$HERE/bench.d}" "${HWV_T_CHECK:=90}"
: "${RCTB:=$(command -v rctb || true)}"
BENCH=$HWV_OUT/bench.txt
RAW=$HWV_OUT/bench-raw
mkdir -p "$RAW"
: >"$BENCH"
DEV_GID=$(gid_index "$DEV")
PEER_GID=$(gid_index "$PEER")
DEV_IP="" PEER_IP=""
[ -n "$DEV_GID" ] && DEV_IP=$(gid_ipv4 "$DEV" "$DEV_GID")
[ -n "$PEER_GID" ] && PEER_IP=$(gid_ipv4 "$PEER" "$PEER_GID")
export RCTB DEV PEER DEV_GID PEER_GID DEV_IP PEER_IP HWV_OUT HWV_RESULTS HWV_BENCH_REPS HWV_LIB

xarg() { [ -n "$1" ] && echo "-x $1"; }

# ------------------------------------------------------------------ perftest
# pt WORKLOAD TOOL SIZE ITERS [EXTRA...]: REPS runs, server on PEER, client
# on DEV, both with the perftest options EXTRA (e.g. -t 32 -Q 1). Each side
# is pinned to its own CPU: perftest times with the TSC, and a process moving
# between TCG vCPUs (their TSCs differ) can measure 0 MB/s. Each run's CPU
# cost (perftest/rx, perftest/tx) and rxe counters go to cost.txt; with
# HWV_STRACE=1 one more run counts system calls (its MB/s is not kept).
ptfail=""
pt() {
    _pw=$1 _pt=$2 _ps=$3 _pn=$4
    shift 4
    _reps=$HWV_BENCH_REPS
    strace_wanted && _reps=$((_reps + 1))
    for r in $(seq 1 "$_reps"); do
        f=$RAW/$_pw-r$r
        if [ "$r" -gt "$HWV_BENCH_REPS" ]; then COST_STRACE=1; else COST_STRACE=0; fi
        export COST_STRACE
        # shellcheck disable=SC2046 # xarg is empty or two words
        cost_run "$_pw" perftest/rx "$_pn" -- taskset 1 "$TIMEOUT" 120 "$_pt" -d "$PEER" $(xarg "$PEER_GID") \
            -F -s "$_ps" -n "$_pn" "$@" >"$f.srv" 2>&1 &
        srv=$!
        # the server listens within 1.5 s; under strace it takes longer
        if [ "$COST_STRACE" = 1 ]; then sleep 5; else sleep 1.5; fi
        c0=$(rxe_snap "$DEV" "$PEER")
        # shellcheck disable=SC2046
        cost_run "$_pw" perftest/tx "$_pn" -- taskset 2 "$TIMEOUT" 120 "$_pt" -d "$DEV" $(xarg "$DEV_GID") \
            -F -s "$_ps" -n "$_pn" "$@" 127.0.0.1 >"$f.cli" 2>&1
        rc=$?
        wait $srv
        src=$?
        [ "$COST_STRACE" = 1 ] && { COST_STRACE=0; continue; }
        rxe_delta "$_pw" perftest "$c0" "$(rxe_snap "$DEV" "$PEER")" >/dev/null
        # the result row: "<bytes> <iterations> <peak> <average> <Mpps>"
        bw=$(awk -v s="$_ps" '$1 == s && NF >= 4 { print $4 }' "$f.cli" | tail -n 1)
        if [ $rc = 0 ] && [ $src = 0 ] && [ -n "$bw" ] && [ "$bw" != 0.00 ]; then
            echo "$_pw perftest $bw MB/s" >>"$BENCH"
            echo "HWV-BENCH $_pw perftest r$r $bw MB/s"
        else
            ptfail="$ptfail; $_pw r$r exit $rc/$src, ${bw:-no} MB/s: $(last_line "$f.cli")"
        fi
        sleep 0.5
    done
}
say "bench: perftest ($HWV_BENCH_REPS runs each)"
pt send_bw-4KiB ib_send_bw 4096 "$HWV_N_4K"
pt send_bw-1MiB ib_send_bw 1048576 "$HWV_N_1M"
pt write_bw-4KiB ib_write_bw 4096 "$HWV_N_4K"
pt write_bw-1MiB ib_write_bw 1048576 "$HWV_N_1M"
if [ -z "$ptfail" ]; then
    result PASS bench-perftest
else
    result FAIL bench-perftest "${ptfail#; }"
fi

# ------------------------------------------------------------------ fio
# The kernel's NVMe/RDMA host (bound to DEV's address) against the nvmet
# target the VM's /init set up on PEER.
if [ "${HWV_MODE:-}" = vm ]; then
    say "bench: fio on the kernel NVMe/RDMA host"
    fiofail=""
    HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6c1d4b4e-2d9c-4c55-9f4e-00000000b0b0
    if [ ! -x /usr/bin/fio ]; then
        fiofail="no fio in the image"
    elif [ -z "${NVMET_NQN:-}" ]; then
        fiofail="no nvmet target (see vm-nvmet)"
    elif ! $TIMEOUT 30 nvme connect -t rdma -a "$NVMET_ADDR" -s "$NVMET_PORT" -w "$DEV_IP" \
        -n "$NVMET_NQN" --hostnqn=$HOSTNQN >"$RAW/nvme-connect.log" 2>&1; then
        fiofail="nvme connect: $(last_line "$RAW/nvme-connect.log")"
    else
        i=0
        while [ $i -lt 50 ] && [ ! -b /dev/nvme0n2 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        for qd in 1 32; do
            w=nvme-randread-4KiB-qd$qd
            for r in $(seq 1 "$HWV_BENCH_REPS"); do
                f=$RAW/$w-r$r
                $TIMEOUT $((HWV_FIO_RUNTIME + 60)) /usr/bin/fio --name="$w" --filename=/dev/nvme0n2 \
                    --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=$qd --numjobs=1 \
                    --runtime="$HWV_FIO_RUNTIME" --time_based --norandommap --randrepeat=0 \
                    --output-format=terse --terse-version=3 >"$f.terse" 2>"$f.err"
                rc=$?
                # terse v3: field 8 is the read IOPS
                iops=$(awk -F';' 'NF > 8 { print $8 }' "$f.terse" | tail -n 1)
                if [ $rc = 0 ] && [ -n "$iops" ]; then
                    echo "$w fio+kernel $iops IOPS" >>"$BENCH"
                    echo "HWV-BENCH $w fio+kernel r$r $iops IOPS"
                else
                    fiofail="$fiofail; $w r$r exit $rc: $(last_line "$f.err")"
                fi
            done
        done
        nvme disconnect -n "$NVMET_NQN" >/dev/null 2>&1 || fiofail="$fiofail; nvme disconnect failed"
    fi
    if [ -z "$fiofail" ]; then
        result PASS bench-fio
    else
        result FAIL bench-fio "${fiofail#; }"
    fi
fi

# ------------------------------------------------------------------ our tools
# bench.d/NAME.sh prints `BENCH <workload> <tool> <value> <unit>` lines (one
# per run); check bench-NAME passes when it exits 0 having printed one.
for f in "$HWV_BENCH_DIR"/*.sh; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .sh)
    case " ${HWV_HOOKS:-$n} " in *" $n "*) ;; *) continue ;; esac
    say "bench: $n"
    t=$(hook_timeout "$f")
    $TIMEOUT "$t" /bin/sh "$f" >"$RAW/$n.out" 2>"$RAW/$n.err" </dev/null
    rc=$?
    grep '^BENCH ' "$RAW/$n.out" | cut -d' ' -f2- >>"$BENCH"
    nb=$(grep -c '^BENCH ' "$RAW/$n.out")
    if [ $rc = 0 ] && [ "$nb" -gt 0 ]; then
        result PASS "bench-$n" "$nb measurements"
    elif [ $rc = 124 ]; then
        result FAIL "bench-$n" "timed out after ${t}s"
    elif [ $rc != 0 ]; then
        result FAIL "bench-$n" "exit $rc: $(last_line "$RAW/$n.err")"
    else
        result FAIL "bench-$n" "printed no BENCH line"
    fi
done
say "bench done"
