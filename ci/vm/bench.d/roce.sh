#!/bin/sh
# roce: receiver throughput of `rctb roce-rx` fed by `rctb fpga-emu`
# (SEND_WITH_IMM, DEV -> PEER) against message size, beside `ib_send_bw`
# at the same sizes and frame counts, interleaved run by run in the same
# boot: workloads send_bw-64B, -256B, -1KiB, -4KiB, -16KiB, -64KiB,
# -256KiB, -1MiB, tools rctb and perftest (ci/plot-bench draws the curve).
# Like perftest: both sides busy-poll, each pinned to its own CPU, payloads
# are not generated or checked (--payload unchecked / --no-verify), 32 sends
# in flight (the engine's window; ib_send_bw keeps 128). The figure is the
# receiver's: bytes / (last frame - first frame), in perftest's MB (2^20).
#
# At ROCE_VARIANT_SIZES (64 and 4096) the knobs run too, each its own tool
# in the same rows, when the binary has them (detected with --help):
#   rctb[poll=adaptive]  --poll adaptive on both sides
#   rctb[signal=16]      fpga-emu --signal-every 16
#   rctb[repost=16]      roce-rx --repost-batch 16
#   rctb[poll=adaptive,signal=16,repost=16]  all three
# and at 4 KiB ib_send_bw with the engine's window (-t 32 -Q 1): the row
# send_bw-4KiB-t32 (ROCE_T32=0 leaves it out).
#
# Every run's CPU cost per side (rctb/rx, rctb/tx, perftest/rx, perftest/tx,
# rctb[...]/rx, ...) and rxe's counter deltas go to cost.txt (lib.sh
# cost_run); with HWV_STRACE=1, one more run per tool at the variant sizes
# counts system calls (its figure is not kept).
#
# Environment (besides bench.sh's):
#   ROCE_SIZES          message sizes in bytes (64 256 1024 4096 16384 65536 262144 1048576)
#   ROCE_FRAMES         "SIZE:FRAMES ..." overriding the frames per run of some sizes
#   ROCE_SCALE          percent applied to every frame count (100), e.g. 25 for a short boot
#   ROCE_VARIANT_SIZES  where the knob variants run (64 4096; empty: none)
#   ROCE_T32            1 (default) or 0: the send_bw-4KiB-t32 perftest row
# The frame counts are about 2-4 s a run under TCG (a test boot at load 4:
# 64 B 5,200/s rctb, 7,000/s ib_send_bw; 1 KiB 6-8 MB/s; 4 KiB to 1 MiB
# 6-12 MB/s), plus about 2 s of start-up and hand-off a run; the whole hook,
# 3 reps with the variants, about 7 minutes (twice that on a loaded host):
# hwv-timeout: 1200
set -u
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
: "${HWV_BENCH_REPS:=3}" "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
: "${ROCE_SIZES:=64 256 1024 4096 16384 65536 262144 1048576}"
: "${ROCE_FRAMES:=}" "${ROCE_SCALE:=100}" "${ROCE_T32:=1}"
ROCE_VARIANT_SIZES=${ROCE_VARIANT_SIZES-64 4096}
fails=0
RAWD=$HWV_OUT/bench-raw/roce # every run's output
mkdir -p "$RAWD"
if [ -z "${RCTB:-}" ]; then
    echo "no rctb binary" >&2
    exit 1
fi

# frames SIZE: frames per run at SIZE (ROCE_FRAMES, else the default), scaled
frames() {
    _n=""
    for _p in $ROCE_FRAMES; do
        [ "${_p%%:*}" = "$1" ] && _n=${_p#*:}
    done
    if [ -z "$_n" ]; then
        case $1 in
            64 | 256) _n=16000 ;;
            1024) _n=20000 ;;
            4096) _n=8000 ;;
            16384) _n=1800 ;;
            65536) _n=400 ;;
            262144) _n=150 ;;
            *) _n=$((33554432 / $1)) ;; # 32 MiB a run
        esac
    fi
    _n=$((_n * ROCE_SCALE / 100))
    [ "$_n" -ge 4 ] || _n=4
    echo "$_n"
}
# sizename SIZE: 64B, 4KiB, 1MiB
sizename() {
    if [ $(($1 % 1048576)) = 0 ]; then
        echo "$(($1 / 1048576))MiB"
    elif [ $(($1 % 1024)) = 0 ]; then
        echo "$(($1 / 1024))KiB"
    else
        echo "${1}B"
    fi
}

# The knobs the binary has (another build may not have them yet)
RXH=$("$RCTB" roce-rx --help 2>&1)
EMUH=$("$RCTB" fpga-emu --help 2>&1)
has() { printf '%s\n' "$1" | grep -q -- "$2"; }
HAS_POLL=0 HAS_SIGNAL=0 HAS_REPOST=0
has "$RXH" '--poll <' && has "$EMUH" '--poll <' && HAS_POLL=1
has "$EMUH" '--signal-every' && HAS_SIGNAL=1
has "$RXH" '--repost-batch' && HAS_REPOST=1
echo "knobs: poll=$HAS_POLL signal-every=$HAS_SIGNAL repost-batch=$HAS_REPOST"
# variants: "TOOL|ROCE-RX ARGS|FPGA-EMU ARGS" a line, those the binary has
VARIANTS=""
addv() { VARIANTS="$VARIANTS$1
"; }
[ $HAS_POLL = 1 ] && addv "rctb[poll=adaptive]|--poll adaptive|--poll adaptive"
[ $HAS_SIGNAL = 1 ] && addv "rctb[signal=16]||--signal-every 16"
[ $HAS_REPOST = 1 ] && addv "rctb[repost=16]|--repost-batch 16|"
[ $HAS_POLL = 1 ] && [ $HAS_SIGNAL = 1 ] && [ $HAS_REPOST = 1 ] &&
    addv "rctb[poll=adaptive,signal=16,repost=16]|--poll adaptive --repost-batch 16|--poll adaptive --signal-every 16"

# rctb WORKLOAD TOOL SIZE FRAMES REP RXARGS EMUARGS: one roce-rx/fpga-emu
# run; RXARGS/EMUARGS (word lists) replace --busy-poll when they name a
# --poll mode. With COST_STRACE=1 it runs under strace and prints nothing.
rctb() {
    _w=$1 _t=$2 _s=$3 _n=$4 _r=$5 _rxa=$6 _emua=$7
    dir=${TMPDIR:-/tmp}/roce-bench.$$
    mkdir -p "$dir"
    log=$RAWD/$_w-$(echo "$_t" | tr -c 'a-zA-Z0-9=,\n' _)-r$_r
    # receive slots: 256, fewer for big messages (64 MiB at most)
    depth=256
    [ $((depth * _s)) -le 67108864 ] || depth=$((67108864 / _s))
    case " $_rxa " in *" --poll "*) rxp="" ;; *) rxp=--busy-poll ;; esac
    case " $_emua " in *" --poll "*) emup="" ;; *) emup=--busy-poll ;; esac
    # shellcheck disable=SC2086 # rxp, _rxa, emup, _emua are word lists
    cost_run "$_w" "$_t/rx" "$_n" -- taskset 1 "$TIMEOUT" 60 "$RCTB" roce-rx --device "$PEER" --fpga-ip "$DEV_IP" \
        --frames "$_n" --wait-done $rxp $_rxa --no-verify --max-payload "$_s" --depth "$depth" --interval 0s \
        --host-params "$dir/h" --fpga-params "$dir/f" --handoff-timeout 20s --idle-timeout 10s >"$log.rx" 2>&1 &
    rx=$!
    c0=$(rxe_snap "$DEV" "$PEER")
    # shellcheck disable=SC2086
    cost_run "$_w" "$_t/tx" "$_n" -- taskset 2 "$TIMEOUT" 60 "$RCTB" fpga-emu --device "$DEV" --host-ip "$PEER_IP" \
        --frames "$_n" --size "$_s" --window 32 $emup $_emua --payload unchecked --interval 0s \
        --host-params "$dir/h" --fpga-params "$dir/f" --handoff-timeout 20s >"$log.emu" 2>&1
    erc=$?
    wait $rx
    rrc=$?
    rm -rf "$dir"
    [ "${COST_STRACE:-0}" = 1 ] && return 0
    rxe_delta "$_w" "$_t" "$c0" "$(rxe_snap "$DEV" "$PEER")" >/dev/null
    # roce-rx: N frames, B bytes in T s: ...
    mbs=$(awk '/^roce-rx: [0-9]+ frames, [0-9]+ bytes in / { printf "%.2f", $4 / 1048576 / $7 }' "$log.rx")
    if [ $erc = 0 ] && [ $rrc = 0 ] && [ -n "$mbs" ]; then
        echo "BENCH $_w $_t $mbs MB/s"
    else
        echo "roce $_w $_t r$_r: fpga-emu exit $erc, roce-rx exit $rrc: $(last_line "$log.rx")" >&2
        fails=1
    fi
}

# perftest WORKLOAD SIZE ITERS REP [EXTRA...]: one ib_send_bw run (lib.sh
# perftest_run: server on PEER, client on DEV, each pinned)
perftest() {
    _w=$1 _s=$2 _n=$3 _r=$4
    shift 4
    f=$RAWD/$_w-perftest-r$_r
    if bw=$(perftest_run "$_w" ib_send_bw "$_s" "$_n" "$f" "$@"); then
        [ "${COST_STRACE:-0}" = 1 ] || echo "BENCH $_w perftest $bw MB/s"
    else
        echo "roce $_w perftest r$_r: $(last_line "$f.cli")" >&2
        fails=1
    fi
}

# one_size SIZE REP: every tool at SIZE, interleaved
one_size() {
    w=send_bw-$(sizename "$1")
    n=$(frames "$1")
    rctb "$w" rctb "$1" "$n" "$2" "" ""
    perftest "$w" "$1" "$n" "$2"
    # The engine's window is the surf engine's max_send_wr (32); ib_send_bw
    # keeps 128 in flight, one in 100 signalled. For comparison, ib_send_bw
    # with the engine's settings (-t 32 -Q 1), with or without the variants.
    if [ "$1" = 4096 ] && [ "$ROCE_T32" = 1 ]; then
        perftest send_bw-4KiB-t32 4096 "$n" "$2" -t 32 -Q 1
    fi
    case " $ROCE_VARIANT_SIZES " in *" $1 "*) ;; *) return 0 ;; esac
    while IFS='|' read -r vt vrx vemu; do
        [ -n "$vt" ] && rctb "$w" "$vt" "$1" "$n" "$2" "$vrx" "$vemu" </dev/null
    done <<EOF
$VARIANTS
EOF
}

say "roce: sizes $ROCE_SIZES at scale $ROCE_SCALE%, variants at ${ROCE_VARIANT_SIZES:-none}: $(printf '%s' "$VARIANTS" | cut -d'|' -f1 | tr '\n' ' ')"
for r in $(seq 1 "$HWV_BENCH_REPS"); do
    for s in $ROCE_SIZES; do
        one_size "$s" "$r"
    done
done
# system calls per frame: one more run of each tool at the variant sizes
if strace_wanted; then
    COST_STRACE=1
    export COST_STRACE
    for s in $ROCE_VARIANT_SIZES; do
        one_size "$s" strace >/dev/null
    done
fi
exit $fails
