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
# repeated, reordered or corrupt), channels (each channel's exact share).
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
rm -rf "$dir"
exit $fails
