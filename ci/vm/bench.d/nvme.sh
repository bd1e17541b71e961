#!/bin/sh
# nvme: rctb's NVMe-oF/RDMA initiator (`rctb nvme bench`, verbs on $DEV)
# against the kernel target, in the rows fio fills through the kernel's host
# in the same boot (bench.sh), on the same namespace (HWV_NVME_NSID, 2:
# null_blk):
# - nvme-randread-4KiB-qd<N>: 4 KiB random reads at each depth of HWV_QDS;
# - nvme-seqread-1MiB: 1 MiB reads at depth HWV_SEQ_QD, in MB/s (2^20 bytes),
#   sequential (`rctb nvme bench --pattern seq`: consecutive extents from
#   block 0, wrapping at the namespace's end), as fio and the Python tools
#   read that row;
# - variants of rctb's knobs (HWV_RCTB_VARIANTS, default "poll=adaptive
#   poll=busy qps=4 cpu=0 jobs=2 jobs=2,cpu=0+1 poll=adaptive,jobs=2,cpu=0+1":
#   --poll MODE, -i N I/O queues, --cpu LIST pinned (CPUs joined by +),
#   --jobs N initiators on their own threads; knobs joined by commas
#   combine), as tools `rctb[poll=busy]` etc., at the depths of
#   HWV_VARIANT_QDS ("1 32 64") that HWV_QDS has (qps=N and jobs=N only
#   from depth N on: rctb spreads the depth over the queues or jobs), each
#   run right after the default's run at that depth, so every variant is
#   measured beside its yardstick. Skipped (a note on stderr) when this
#   rctb has no --poll; cpu and jobs variants when it has no --cpu or
#   --jobs. HWV_RCTB_VARIANTS= (empty): no variants.
# Rep by rep, each rep sweeping the depths. Each run does about
# HWV_NVME_SECONDS (2.5) s of reads: the count comes from the last rep's rate
# at that depth (a first guess in rep 1). The runs at HWV_COST_QDS ("1 32")
# go through lib.sh cost_run (CPU time, context switches into cost.txt) with
# the rxe counter deltas; HWV_STRACE=1 adds one strace -c run at each of
# those depths whose figure is not kept.
# hwv-timeout: 600
set -u
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
if [ -z "${NVMET_NQN:-}" ] || [ -z "${RCTB:-}" ]; then
    echo "no NVMe target here" >&2
    exit 0
fi
: "${HWV_BENCH_REPS:=3}" "${HWV_QDS:=1 2 4 8 16 32 64}" "${HWV_SEQ_QD:=4}" "${HWV_NVME_NSID:=2}"
: "${HWV_NVME_SECONDS:=2.5}" "${HWV_COST_QDS:=1 32}" "${HWV_VARIANT_QDS:=1 32 64}"
: "${HWV_RCTB_VARIANTS=poll=adaptive poll=busy qps=4 cpu=0 jobs=2 jobs=2,cpu=0+1 poll=adaptive,jobs=2,cpu=0+1}"
W=$HWV_OUT/bench-nvme
mkdir -p "$W"
rc=0

if "$RCTB" nvme bench --help 2>/dev/null | grep -q -- --poll; then
    variants=$HWV_RCTB_VARIANTS
    for knob in cpu jobs; do
        if ! "$RCTB" nvme bench --help 2>/dev/null | grep -q -- "--$knob"; then
            variants=$(for v in $variants; do case $v in *$knob=*) ;; *) echo "$v" ;; esac; done)
            echo "this rctb nvme bench has no --$knob: its variants skipped" >&2
        fi
    done
else
    echo "this rctb nvme bench has no --poll: variants ($HWV_RCTB_VARIANTS) skipped" >&2
    variants=""
fi

# vargs VARIANT: rctb's arguments for one variant (empty: the default;
# knobs joined by commas: all of them)
vargs() {
    _va=""
    for _k in $(echo "$1" | tr ',' ' '); do
        case $_k in
            poll=*) _va="$_va --poll ${_k#poll=}" ;;
            qps=*) _va="$_va -i ${_k#qps=}" ;;
            cpu=*) _va="$_va --cpu $(echo "${_k#cpu=}" | tr + ,)" ;;
            jobs=*) _va="$_va --jobs ${_k#jobs=}" ;;
            *) echo "unknown variant knob $_k in $1" >&2; return 1 ;;
        esac
    done
    echo "$_va"
}
# A misspelt variant would run with the default settings under its own
# name (the command substitution swallows vargs' failure): refuse it here.
for v in $variants; do
    vargs "$v" >/dev/null || exit 1
done

# ios_for KEY GUESS SIZE: reads for about HWV_NVME_SECONDS at the rate the
# last run of KEY measured (GUESS reads/s before it ran), within 200-20000
# (4 KiB) or 8-64 (1 MiB: rctb registers SIZE x reads of memory)
ios_for() {
    eval "_r=\${RATE_$1:-$2}"
    awk -v r="$_r" -v s="$HWV_NVME_SECONDS" -v big="$3" 'BEGIN {
        n = int(r * s); lo = big ? 8 : 200; hi = big ? 64 : 20000
        print (n < lo ? lo : n > hi ? hi : n) }'
}

in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

# fits VARIANT QD: whether VARIANT runs at depth QD; -i N and --jobs N
# spread the depth over N queues or jobs: below N there is nothing to spread
fits() {
    for _k in $(echo "$1" | tr ',' ' '); do
        case $_k in qps=* | jobs=*) [ "$2" -ge "${_k#*=}" ] || return 1 ;; esac
    done
    return 0
}

# one TOOL KEY QD BS REP [RCTB-ARGS...]: one run of `rctb nvme bench`,
# its BENCH line printed under TOOL's name (REP "strace": a strace -c run,
# cost only)
one() {
    _tool=$1 _key=$2 _qd=$3 _bs=$4 _rep=$5
    shift 5
    if [ "$_bs" = 4096 ]; then
        _w=nvme-randread-4KiB-qd$_qd
        _ios=$(ios_for "$_key" $((_qd == 1 ? 1200 : _qd == 2 ? 1300 : _qd == 4 ? 1400 : 1800)) 0)
        _pat=rand
    else
        _w=nvme-seqread-1MiB
        _ios=$(ios_for "$_key" 20 1)
        _pat=seq
    fi
    _f=$W/$(echo "$_w-$_tool-r$_rep" | tr -c 'A-Za-z0-9.=\n-' _)
    set -- "$TIMEOUT" 120 "$RCTB" nvme bench --backend verbs --device "$DEV" -a "$NVMET_ADDR" -s "$NVMET_PORT" \
        -n "$NVMET_NQN" --nsid "$HWV_NVME_NSID" --bs "$_bs" --pattern "$_pat" --qd "$_qd" --ios "$_ios" \
        -Q $((_qd + 1 > 2 ? _qd + 1 : 2)) "$@"
    if [ "$_bs" = 4096 ] && in_list "$_qd" "$HWV_COST_QDS"; then
        if [ "$_rep" = strace ]; then COST_STRACE=1; else COST_STRACE=0; fi
        export COST_STRACE
        _c0=$(rxe_snap "$DEV" "$PEER")
        cost_run "$_w" "$_tool" "$_ios" -- "$@" >"$_f.out" 2>"$_f.err"
        _rc=$?
        COST_STRACE=0
        [ "$_rep" = strace ] && return 0
        rxe_delta "$_w" "$_tool" "$_c0" "$(rxe_snap "$DEV" "$PEER")" >/dev/null
    else
        "$@" >"$_f.out" 2>"$_f.err"
        _rc=$?
    fi
    # rctb's line: BENCH nvme-randread-<size>-qd<N> rctb <IOPS> IOPS (or
    # nvme-seqread-...); the row's name and tool are this script's
    _iops=$(awk '$1 == "BENCH" && $5 == "IOPS" { print $4 }' "$_f.out" | tail -n 1)
    if [ $_rc != 0 ] || [ -z "$_iops" ]; then
        echo "$_w $_tool r$_rep: exit $_rc: $(last_line "$_f.err")" >&2
        rc=1
        return 0
    fi
    eval "RATE_$_key=$_iops"
    if [ "$_bs" = 4096 ]; then
        echo "BENCH $_w $_tool $_iops IOPS"
    else
        echo "BENCH $_w $_tool $(awk -v i="$_iops" -v b="$_bs" 'BEGIN { printf "%.1f", i * b / 1048576 }') MB/s"
    fi
}

# sweep REP: every depth with the default, each variant after it at its depths
sweep() {
    for qd in $HWV_QDS; do
        one rctb "d$qd" "$qd" 4096 "$1"
        in_list "$qd" "$HWV_VARIANT_QDS" || continue
        vi=0
        for v in $variants; do
            vi=$((vi + 1))
            fits "$v" "$qd" || continue
            # shellcheck disable=SC2046 # vargs is a word list
            one "rctb[$v]" "v${vi}_$qd" "$qd" 4096 "$1" $(vargs "$v")
        done
    done
}

for r in $(seq 1 "$HWV_BENCH_REPS"); do
    sweep "$r"
    if [ "$HWV_SEQ_QD" -gt 0 ]; then one rctb seq "$HWV_SEQ_QD" 1048576 "$r"; fi
done
if strace_wanted; then
    for qd in $HWV_COST_QDS; do
        in_list "$qd" "$HWV_QDS" || continue
        one rctb "d$qd" "$qd" 4096 strace
        in_list "$qd" "$HWV_VARIANT_QDS" || continue
        for v in $variants; do
            fits "$v" "$qd" || continue
            # shellcheck disable=SC2046
            one "rctb[$v]" "s$qd" "$qd" 4096 strace $(vargs "$v")
        done
    done
fi
exit $rc
