#!/bin/sh
# bench.sh DEV PEER: yardsticks between two RDMA devices (ci/hw-validate --bench).
#
# Each measurement appends one line to $HWV_OUT/bench.txt:
#   <workload> <tool> <value> <unit>
# and the host prints the median of each (workload, tool) in a table with one
# column per tool, so our tools sit beside perftest and the kernel's NVMe host.
#   perftest:   ib_write_bw at 4 KiB and 1 MiB, client DEV -> server PEER; and
#               ib_send_bw at the same sizes unless bench.d/roce.sh runs (it
#               runs ib_send_bw from 64 B to 1 MiB beside rctb's receiver)
#   fio:        4 KiB randread at each depth of HWV_QDS and 1 MiB sequential
#               reads at HWV_SEQ_QD, on the kernel NVMe/RDMA host against the
#               guest's nvmet target (null_blk namespace HWV_NVME_NSID) (VM only);
#               and at the depths of HWV_FIO_JOBS_QDS ("32 64") that HWV_QDS
#               has, two jobs pinned one per CPU (--numjobs=2
#               --cpus_allowed_policy=split, half the depth each, summed: tool
#               fio+kernel[jobs=2]), the yardstick of `rctb nvme bench --jobs
#               2 --cpu 0,1`
#   bench.d/*.sh: our own tools (see bench.d/README.md)
# One check per group: bench-perftest, bench-fio, bench-<hook>.
#
# Environment: as checks.sh, plus HWV_BENCH_REPS (3), HWV_N_4K / HWV_N_1M
# (perftest iterations), HWV_FIO_RUNTIME (s per fio run, 3), HWV_BENCH_DIR,
# HWV_FIO_JOBS_QDS ("32 64": fio's two-job runs; "": none), and for every
# NVMe tool (exported to bench.d/): HWV_QDS ("1 2 4 8 16 32
# 64", the depths of the 4 KiB random-read sweep), HWV_SEQ_QD (4, the depth
# of the 1 MiB sequential reads; 0: none), HWV_NVME_NSID (2), HWV_NVME_SECONDS
# (2.5, about how long each run of bench.d's NVMe tools lasts), HWV_COST_QDS
# ("1 32": the depths whose runs go through lib.sh cost_run into cost.txt).
set -u
DEV=$1
PEER=$2
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
HWV_LIB=$HERE/lib.sh # hooks: . "$HWV_LIB" (cost_run, rxe_snap, ...)
: "${HWV_BENCH_REPS:=3}" "${HWV_N_4K:=30000}" "${HWV_N_1M:=120}" "${HWV_FIO_RUNTIME:=3}"
: "${HWV_QDS:=1 2 4 8 16 32 64}" "${HWV_SEQ_QD:=4}" "${HWV_NVME_NSID:=2}" "${HWV_NVME_SECONDS:=2.5}"
: "${HWV_COST_QDS:=1 32}" "${HWV_FIO_JOBS_QDS=32 64}"
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
export HWV_QDS HWV_SEQ_QD HWV_NVME_NSID HWV_NVME_SECONDS HWV_COST_QDS


# ------------------------------------------------------------------ perftest
# pt WORKLOAD TOOL SIZE ITERS [EXTRA...]: REPS runs of lib.sh perftest_run
# (server on PEER, client on DEV, each pinned; CPU cost and rxe counters to
# cost.txt); with HWV_STRACE=1 one more ib_send_bw run counts system calls
# (its MB/s is not kept).
ptfail=""
pt() {
    _pw=$1 _pt=$2 _ps=$3 _pn=$4
    shift 4
    _reps=$HWV_BENCH_REPS
    # the strace run: ib_send_bw only (ib_write_bw's 1 MiB run takes minutes under it)
    [ "$_pt" = ib_send_bw ] && strace_wanted && _reps=$((_reps + 1))
    for r in $(seq 1 "$_reps"); do
        f=$RAW/$_pw-r$r
        if [ "$r" -gt "$HWV_BENCH_REPS" ]; then COST_STRACE=1; else COST_STRACE=0; fi
        export COST_STRACE
        if bw=$(perftest_run "$_pw" "$_pt" "$_ps" "$_pn" "$f" "$@"); then
            [ "$COST_STRACE" = 1 ] && { COST_STRACE=0; continue; }
            echo "$_pw perftest $bw MB/s" >>"$BENCH"
            echo "HWV-BENCH $_pw perftest r$r $bw MB/s"
        else
            ptfail="$ptfail; $_pw r$r: $(last_line "$f.cli")"
        fi
        sleep 0.5
    done
}
say "bench: perftest ($HWV_BENCH_REPS runs each)"
# bench.d/roce.sh runs ib_send_bw at every message size, interleaved with
# rctb's receiver: here only when that hook does not run
case " ${HWV_HOOKS:-roce} " in
    *" roce "*) roce_hook=1 ;;
    *) roce_hook=0 ;;
esac
if [ $roce_hook = 0 ] || [ -z "$RCTB" ] || [ ! -f "$HWV_BENCH_DIR/roce.sh" ]; then
    pt send_bw-4KiB ib_send_bw 4096 "$HWV_N_4K"
    pt send_bw-1MiB ib_send_bw 1048576 "$HWV_N_1M"
fi
pt write_bw-4KiB ib_write_bw 4096 "$HWV_N_4K"
pt write_bw-1MiB ib_write_bw 1048576 "$HWV_N_1M"
if [ -z "$ptfail" ]; then
    result PASS bench-perftest
else
    result FAIL bench-perftest "${ptfail#; }"
fi

# ------------------------------------------------------------------ fio
# The kernel's NVMe/RDMA host (bound to DEV's address) against the nvmet
# target the VM's /init set up on PEER: namespace HWV_NVME_NSID (2, null_blk,
# the one every NVMe tool of bench.d reads). Rep by rep, each rep sweeping
# the depths, so a drift during the boot spreads over all of them.
if [ "${HWV_MODE:-}" = vm ]; then
    say "bench: fio on the kernel NVMe/RDMA host (depths $HWV_QDS; 1 MiB at $HWV_SEQ_QD)"
    fiofail=""
    HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6c1d4b4e-2d9c-4c55-9f4e-00000000b0b0
    blk=/dev/nvme0n$HWV_NVME_NSID
    if [ ! -x /usr/bin/fio ]; then
        fiofail="no fio in the image"
    elif [ -z "${NVMET_NQN:-}" ]; then
        fiofail="no nvmet target (see vm-nvmet)"
    elif ! $TIMEOUT 30 nvme connect -t rdma -a "$NVMET_ADDR" -s "$NVMET_PORT" -w "$DEV_IP" \
        -n "$NVMET_NQN" --hostnqn=$HOSTNQN >"$RAW/nvme-connect.log" 2>&1; then
        fiofail="nvme connect: $(last_line "$RAW/nvme-connect.log")"
    else
        i=0
        while [ $i -lt 50 ] && [ ! -b "$blk" ]; do
            sleep 0.1
            i=$((i + 1))
        done
        # fio_run NAME FIELD COST FIO-ARGS...: one run; prints terse v3 field
        # FIELD (8: read IOPS, 7: read KiB/s), nothing when fio failed. COST
        # "WORKLOAD": through cost_run with the rxe counter deltas (the I/O
        # count from fio's read KiB, 4 KiB each); "strace:WORKLOAD": the
        # strace -c run, whose figure is not kept; "": neither.
        fio_run() {
            _f=$RAW/$1 _fld=$2 _cw=$3
            shift 3
            set -- $TIMEOUT $((HWV_FIO_RUNTIME + 60)) /usr/bin/fio --name=bench --filename="$blk" --direct=1 \
                --ioengine=libaio --numjobs="${FIO_JOBS:-1}" --runtime="$HWV_FIO_RUNTIME" --time_based \
                --output-format=terse --terse-version=3 "$@"
            case $_cw in
                "") "$@" >"$_f.terse" 2>"$_f.err" || return 0 ;;
                strace:*)
                    COST_STRACE=1
                    cost_run "${_cw#strace:}" fio+kernel "?" -- "$@" >"$_f.terse" 2>"$_f.err"
                    COST_STRACE=0
                    return 0
                    ;;
                *)
                    _c0=$(rxe_snap "$DEV" "$PEER")
                    COST_STRACE=0
                    cost_run "$_cw" fio+kernel "?" -- "$@" >"$_f.terse" 2>"$_f.err" || return 0
                    cost_set_ops "$_cw" fio+kernel "$(awk -F';' 'NF > 8 { print int($6 / 4) }' "$_f.terse" | tail -n 1)"
                    rxe_delta "$_cw" fio+kernel "$_c0" "$(rxe_snap "$DEV" "$PEER")" >/dev/null
                    ;;
            esac
            awk -F';' -v f="$_fld" 'NF > 8 { print $f }' "$_f.terse" | tail -n 1
        }
        costw() { case " $HWV_COST_QDS " in *" $1 "*) echo "$2" ;; esac; }
        for r in $(seq 1 "$HWV_BENCH_REPS"); do
            for qd in $HWV_QDS; do
                w=nvme-randread-4KiB-qd$qd
                iops=$(fio_run "$w-r$r" 8 "$(costw "$qd" "$w")" --rw=randread --bs=4k --iodepth="$qd" \
                    --norandommap --randrepeat=0)
                if [ -n "$iops" ]; then
                    echo "$w fio+kernel $iops IOPS" >>"$BENCH"
                    echo "HWV-BENCH $w fio+kernel r$r $iops IOPS"
                else
                    fiofail="$fiofail; $w r$r: $(last_line "$RAW/$w-r$r.err")"
                fi
                case " $HWV_FIO_JOBS_QDS " in *" $qd "*) ;; *) continue ;; esac
                iops=$(FIO_JOBS=2 fio_run "$w-jobs2-r$r" 8 "" --rw=randread --bs=4k --iodepth=$((qd / 2)) \
                    --norandommap --randrepeat=0 --group_reporting --cpus_allowed=0-1 --cpus_allowed_policy=split)
                if [ -n "$iops" ]; then
                    echo "$w fio+kernel[jobs=2] $iops IOPS" >>"$BENCH"
                    echo "HWV-BENCH $w fio+kernel[jobs=2] r$r $iops IOPS"
                else
                    fiofail="$fiofail; $w jobs=2 r$r: $(last_line "$RAW/$w-jobs2-r$r.err")"
                fi
            done
            if [ "$HWV_SEQ_QD" -gt 0 ]; then
                w=nvme-seqread-1MiB
                kib=$(fio_run "$w-r$r" 7 "" --rw=read --bs=1m --iodepth="$HWV_SEQ_QD")
                if [ -n "$kib" ]; then
                    mb=$(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }')
                    echo "$w fio+kernel $mb MB/s" >>"$BENCH"
                    echo "HWV-BENCH $w fio+kernel r$r $mb MB/s"
                else
                    fiofail="$fiofail; $w r$r: $(last_line "$RAW/$w-r$r.err")"
                fi
            fi
        done
        if strace_wanted; then
            for qd in $HWV_COST_QDS; do
                case " $HWV_QDS " in *" $qd "*) ;; *) continue ;; esac
                w=nvme-randread-4KiB-qd$qd
                fio_run "$w-strace" 8 "strace:$w" --rw=randread --bs=4k --iodepth="$qd" \
                    --norandommap --randrepeat=0 >/dev/null
            done
        fi
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
