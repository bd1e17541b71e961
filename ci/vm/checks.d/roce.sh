#!/bin/sh
# roce: the RoCEv2 receive server on real verbs, fed by the software FPGA
# engine: `rctb fpga-emu` on DEV (rxe1) streams SEND_WITH_IMM frames with a
# PRBS payload to `rctb roce-rx` on PEER (rxe0), which checks every byte and
# ring position. The connection hand-off goes through two files, as a host
# driver's register writes would.
#
# ROCE_FRAMES (100000) frames on ROCE_CHANNELS (0,1,2,3), ROCE_SIZE (256)
# bytes each. Checks: handoff, fpga-emu, roce-rx, frames (exactly
# ROCE_FRAMES, as many bytes as the FPGA says it sent), lost (none lost,
# repeated, reordered or corrupt), channels (each channel's exact share);
# then handoff-stdio and handoff-fifo: short runs with the hand-off through
# a pipe and FIFOs instead of files (see below).
#
# Time: rxe under TCG moves about 1,600 of these frames a second (one ACK
# each, all captured), so 100,000 take about 65 s of the 90 s HWV_T_CHECK;
# the frame size barely matters (the cost is per packet). Hence the budget:
# hwv-timeout: 150
set -u
: "${ROCE_FRAMES:=100000}" "${ROCE_CHANNELS:=0,1,2,3}" "${ROCE_SIZE:=256}"
: "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
dir=${TMPDIR:-/tmp}/roce-handoff.$$
mkdir -p "$dir"
H=$dir/host.params
F=$dir/fpga.params
RX=$HWV_OUT/roce-rx.log
EMU=$HWV_OUT/fpga-emu.log
fails=0
pass() { echo "PASS $*"; }
fail() {
    echo "FAIL $*"
    fails=1
}
if [ -z "${RCTB:-}" ] || [ -z "${DEV_IP:-}" ] || [ -z "${PEER_IP:-}" ]; then
    echo "FAIL setup no rctb binary or no device addresses (RCTB=${RCTB:-} DEV_IP=${DEV_IP:-} PEER_IP=${PEER_IP:-})"
    exit 1
fi
$TIMEOUT 140 "$RCTB" roce-rx --device "$PEER" --fpga-ip "$DEV_IP" --frames "$ROCE_FRAMES" --wait-done \
    --depth 256 --max-payload 4096 --host-params "$H" --fpga-params "$F" \
    --handoff-timeout 30s --idle-timeout 20s --interval 5s >"$RX" 2>&1 &
rx=$!
$TIMEOUT 140 "$RCTB" fpga-emu --device "$DEV" --host-ip "$PEER_IP" --frames "$ROCE_FRAMES" \
    --channels "$ROCE_CHANNELS" --size "$ROCE_SIZE" --window 32 \
    --host-params "$H" --fpga-params "$F" --handoff-timeout 30s --interval 5s >"$EMU" 2>&1
erc=$?
wait $rx
rrc=$?
echo "---- fpga-emu (exit $erc)"
cat "$EMU"
echo "---- roce-rx (exit $rrc)"
cat "$RX"

if grep -q '^ready' "$H" 2>/dev/null && grep -q '^fpga ' "$F" 2>/dev/null; then
    pass handoff "$(head -n 1 "$F")"
else
    fail handoff "host: $(head -c 200 "$H" 2>/dev/null | tr '\n' ' '); fpga: $(head -c 200 "$F" 2>/dev/null | tr '\n' ' ')"
fi
if [ $erc = 0 ]; then
    pass fpga-emu "$(grep 'frames, .* bytes sent' "$EMU")"
else
    fail fpga-emu "exit $erc: $(grep -v '^[[:space:]]*$' "$EMU" | tail -n 1 | cut -c1-200)"
fi
if [ $rrc = 0 ]; then
    pass roce-rx "$(grep '^roce-rx: [0-9]* frames, [0-9]* bytes in' "$RX")"
else
    fail roce-rx "exit $rrc: $(grep -v '^[[:space:]]*$' "$RX" | tail -n 1 | cut -c1-200)"
fi
# RESULT PASS frames=N bytes=B lost=0 out_of_order=0 corrupt=0 rx_errors=0 fpga=N B 0
res=$(grep '^RESULT ' "$RX" | tail -n 1)
val() { echo "$res" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
fpga_frames=$(echo "$res" | sed -n 's/.* fpga=\([0-9]*\) \([0-9]*\) \([0-9]*\).*/\1/p')
fpga_bytes=$(echo "$res" | sed -n 's/.* fpga=\([0-9]*\) \([0-9]*\) \([0-9]*\).*/\2/p')
want_bytes=$((ROCE_FRAMES * ROCE_SIZE))
if [ "$(val frames)" = "$ROCE_FRAMES" ] && [ "$(val bytes)" = "$want_bytes" ] &&
    [ "$fpga_frames" = "$ROCE_FRAMES" ] && [ "$fpga_bytes" = "$want_bytes" ]; then
    pass frames "$ROCE_FRAMES frames, $want_bytes bytes received, as sent"
else
    fail frames "want $ROCE_FRAMES frames / $want_bytes bytes: ${res:-no RESULT line}"
fi
if [ -n "$res" ] && [ "$(val lost)" = 0 ] && [ "$(val out_of_order)" = 0 ] && [ "$(val corrupt)" = 0 ] &&
    [ "$(val rx_errors)" = 0 ]; then
    pass lost "none lost, repeated, reordered or corrupt"
else
    fail lost "${res:-no RESULT line}"
fi
# each of the n channels gets frames i with i mod n = its position
n=$(echo "$ROCE_CHANNELS" | tr ',' '\n' | grep -c .)
i=0 bad=""
for ch in $(echo "$ROCE_CHANNELS" | tr ',' ' '); do
    want=$(((ROCE_FRAMES - i + n - 1) / n))
    got=$(sed -n "s/^  channel $ch: \([0-9]*\) frames.*/\1/p" "$RX")
    [ "$got" = "$want" ] || bad="$bad channel $ch: ${got:-none} of $want;"
    i=$((i + 1))
done
if [ -z "$bad" ]; then
    pass channels "$n channels, each its exact share"
else
    fail channels "$bad"
fi

# The hand-off through stdin/stdout and FIFOs, as a host driver and an FPGA
# that talk through pipes would: ROCE_HANDOFF_FRAMES (2000) frames each.
#   handoff-stdio: roce-rx's stdout is fpga-emu's stdin (a pipe); fpga-emu's
#     stdout goes into a FIFO that roce-rx follows (--fpga-params FIFO).
#     roce-rx stops at its frame count without waiting for `done`, so
#     fpga-emu may find the FIFO closed: that must not fail it.
#   handoff-fifo: both directions through FIFOs named on both command lines
#     (each side opens the one it writes, the other reads it); roce-rx
#     waits for `done` and checks the FPGA's totals.
: "${ROCE_HANDOFF_FRAMES:=2000}"
hf=$ROCE_HANDOFF_FRAMES
rx_args="--device $PEER --fpga-ip $DEV_IP --frames $hf --handoff-timeout 20s --idle-timeout 10s --interval 0s"
emu_args="--device $DEV --host-ip $PEER_IP --frames $hf --channels $ROCE_CHANNELS --size $ROCE_SIZE --handoff-timeout 20s --interval 0s"
# handoff_verdict NAME FPGA: roce-rx's and fpga-emu's exits (in
# $dir/NAME.rx.rc, .emu.rc) and the receiver's RESULT line, whose fpga= field
# must start with FPGA (an extended regular expression)
handoff_verdict() {
    _rx=$HWV_OUT/roce-$1-rx.log _emu=$HWV_OUT/roce-$1-emu.log
    _rrc=$(cat "$dir/$1.rx.rc" 2>/dev/null) _erc=$(cat "$dir/$1.emu.rc" 2>/dev/null)
    echo "---- $1: roce-rx (exit $_rrc)"
    cat "$_rx"
    echo "---- $1: fpga-emu (exit $_erc)"
    cat "$_emu"
    _res=$(grep '^RESULT ' "$_rx" | tail -n 1)
    if [ "$_rrc" = 0 ] && [ "$_erc" = 0 ] &&
        echo "$_res" | grep -Eq "^RESULT PASS frames=$hf .* fpga=($2)"; then
        pass "$1" "$hf frames: $_res"
    else
        fail "$1" "roce-rx exit ${_rrc:-?}, fpga-emu exit ${_erc:-?}: ${_res:-$(grep -hv '^[[:space:]]*$' "$_rx" "$_emu" | tail -n 1 | cut -c1-200)}"
    fi
}

# shellcheck disable=SC2086 # rx_args and emu_args are lists of words
mkfifo "$dir/f.fifo" && {
    { $TIMEOUT 60 "$RCTB" roce-rx $rx_args --fpga-params "$dir/f.fifo" 2>"$HWV_OUT/roce-handoff-stdio-rx.log"
        echo $? >"$dir/handoff-stdio.rx.rc"
        # (if roce-rx died before opening the FIFO, this ends the shell's
        # wait to open it for fpga-emu's stdout)
        : <>"$dir/f.fifo"; } |
        { $TIMEOUT 60 "$RCTB" fpga-emu $emu_args >"$dir/f.fifo" 2>"$HWV_OUT/roce-handoff-stdio-emu.log"
            echo $? >"$dir/handoff-stdio.emu.rc"; }
}
handoff_verdict handoff-stdio "-|$hf "

# shellcheck disable=SC2086
mkfifo "$dir/h2.fifo" "$dir/f2.fifo" && {
    { $TIMEOUT 60 "$RCTB" roce-rx $rx_args --wait-done --host-params "$dir/h2.fifo" --fpga-params "$dir/f2.fifo" \
        >"$HWV_OUT/roce-handoff-fifo-rx.log" 2>&1 </dev/null
        echo $? >"$dir/handoff-fifo.rx.rc"; } &
    $TIMEOUT 60 "$RCTB" fpga-emu $emu_args --host-params "$dir/h2.fifo" --fpga-params "$dir/f2.fifo" \
        >"$HWV_OUT/roce-handoff-fifo-emu.log" 2>&1 </dev/null
    echo $? >"$dir/handoff-fifo.emu.rc"
    wait
}
handoff_verdict handoff-fifo "$hf "

rm -rf "$dir"
exit $fails
