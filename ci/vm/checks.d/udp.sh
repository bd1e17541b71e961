#!/bin/sh
# udp: the udp backend (rctb-udp) as a RoCEv2 peer of kernel rxe.
#
# A second veth pair: veth2 (10.10.2.1) carries a third soft-RoCE device,
# rxe2; veth3 (10.10.2.2) sits in the network namespace "udp", which has no
# rxe device, so UDP port 4791 is free there. rctb runs the conformance
# suite between a UDP endpoint on 10.10.2.2 whose sockets it opens in that
# namespace (`--device 10.10.2.2@udp`) and rxe2 (verbs; its rdma_cm binds
# in the root namespace, where 10.10.2.1 is), both ways:
# `udp-to-rxe/<case>` with the UDP endpoint requesting, `rxe-to-udp/<case>`
# with rxe2 requesting. The data cases connect their QPs by hand (QPN, PSN,
# GID out of band); the cm/ cases connect through RDMA CM, the UDP
# endpoint's MADs on QP1 against the kernel's rdma_cm on rxe2.
# tcpdump in the namespace keeps the exchange in capture-udp.pcap, which
# the host decodes with tshark and ICRC-checks (capture-udp-decode,
# capture-udp-icrc).
#
# Then the software FPGA over UDP into a real NIC: `rctb fpga-emu --backend
# udp` on 10.10.2.2 (in the namespace) streams UDP_ROCE_FRAMES PRBS frames
# on 4 channels (sizes 64, 1000, 1024 and 3000: one to three packets at
# rxe's MTU 1024) to `rctb roce-rx` on rxe2 (verbs), hand-off through two
# files. Checks `roce/handoff`, `roce/fpga-emu`, `roce/roce-rx` (the
# receiver's RESULT line: every byte checked, none lost, repeated or out of
# order, its counters equal to the FPGA's totals) and `roce/icrc` (rxe's
# ACKs all passed the UDP endpoint's ICRC check). Its frames are captured
# apart, in capture-udp-roce.pcap (capture-udp-roce-decode, -icrc).
#
# Last, udp-pair.toml between two UDP endpoints in two namespaces over a
# veth with tc netem loss (netem/run, netem/loss; see below).
#
# Time: about 15 s for the suite both ways, 10 s for the stream and 20 s for
# the scenario under TCG.
# hwv-timeout: 150
set -u
: "${UDP_ROCE_FRAMES:=4000}"
IP=/usr/bin/ip
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
needs_vm_and_rctb "it adds rxe2 and a network namespace"
fails=0

if ! why=$(udp_ns_up); then
    echo "FAIL setup $why"
    udp_ns_down
    exit 1
fi
echo "PASS setup rxe2 on veth2 (10.10.2.1), UDP endpoint in netns udp (10.10.2.2)"

# cap_start NAME / capture_stop: tcpdump on veth3 into $HWV_OUT/capture-NAME.pcap
cap_start() {
    command -v tcpdump >/dev/null || return 0
    capture_start "$HWV_OUT/tcpdump-$1.log" "$HWV_OUT/capture-$1.pcap" veth3 udp
}
cap_start udp

# run_dir NAME DEVICE PEER: one direction of the suite, a line per case
run_dir() {
    log=$HWV_OUT/udp-$1.txt
    "$TIMEOUT" 40 "$RCTB" conformance --backend udp --device "$2" --peer "$3" \
        >"$log" 2>"$HWV_OUT/udp-$1.err"
    rc=$?
    n=0
    while read -r st name why; do
        case "$st" in
            PASS) echo "PASS $1/$name"; n=$((n + 1)) ;;
            FAIL) echo "FAIL $1/$name $why"; n=$((n + 1)); fails=1 ;;
        esac
    done <"$log"
    if [ "$rc" = 124 ]; then
        echo "FAIL $1 timed out after 40s (ci/out/udp-$1.txt)"
        fails=1
    elif [ $n = 0 ]; then
        echo "FAIL $1 exit $rc, no case ran: $(tail -n 1 "$HWV_OUT/udp-$1.err" | cut -c1-200)"
        fails=1
    elif [ "$rc" != 0 ] && [ $fails = 0 ]; then
        echo "FAIL $1 exit $rc: $(tail -n 1 "$HWV_OUT/udp-$1.err" | cut -c1-200)"
        fails=1
    fi
    # the endpoint's counters: a bad ICRC from rxe would show here
    tail -n 1 "$HWV_OUT/udp-$1.err"
}

run_dir udp-to-rxe 10.10.2.2@udp rxe2
run_dir rxe-to-udp rxe2 10.10.2.2@udp
capture_stop

# The software FPGA on a UDP endpoint streaming into roce-rx on rxe2.
cap_start udp-roce
d=${TMPDIR:-/tmp}/udp-roce.$$
mkdir -p "$d"
RX=$HWV_OUT/udp-roce-rx.log
EMU=$HWV_OUT/udp-fpga-emu.log
"$TIMEOUT" 60 "$RCTB" roce-rx --device rxe2 --fpga-ip 10.10.2.2 --frames "$UDP_ROCE_FRAMES" --wait-done \
    --depth 256 --max-payload 4096 --host-params "$d/host" --fpga-params "$d/fpga" \
    --handoff-timeout 20s --idle-timeout 20s --interval 5s >"$RX" 2>&1 &
rx=$!
$IP netns exec udp "$TIMEOUT" 60 "$RCTB" fpga-emu --backend udp --device 10.10.2.2 --host-ip 10.10.2.1 \
    --frames "$UDP_ROCE_FRAMES" --channels 0,1,2,3 --size 64,1000,1024,3000 --window 32 \
    --host-params "$d/host" --fpga-params "$d/fpga" --handoff-timeout 20s --interval 5s >"$EMU" 2>&1
erc=$?
wait $rx
rrc=$?
capture_stop
echo "---- fpga-emu --backend udp (exit $erc)"
cat "$EMU"
echo "---- roce-rx on rxe2 (exit $rrc)"
cat "$RX"
if grep -q '^ready' "$d/host" 2>/dev/null && grep -q '^fpga ' "$d/fpga" 2>/dev/null; then
    echo "PASS roce/handoff $(head -n 1 "$d/fpga")"
else
    echo "FAIL roce/handoff host: $(head -c 200 "$d/host" 2>/dev/null | tr '\n' ' ')"
    fails=1
fi
if [ $erc = 0 ]; then
    echo "PASS roce/fpga-emu $(grep 'frames, .* bytes sent' "$EMU")"
else
    echo "FAIL roce/fpga-emu exit $erc: $(grep -v '^[[:space:]]*$' "$EMU" | tail -n 1 | cut -c1-200)"
    fails=1
fi
# 4 sizes cycled: UDP_ROCE_FRAMES/4 of each (a multiple of 4).
n4=$((UDP_ROCE_FRAMES / 4))
bytes=$((n4 * (64 + 1000 + 1024 + 3000)))
want="RESULT PASS frames=$UDP_ROCE_FRAMES bytes=$bytes lost=0 out_of_order=0 corrupt=0 rx_errors=0 fpga=$UDP_ROCE_FRAMES $bytes 0"
if [ $rrc = 0 ] && grep -qx "$want" "$RX"; then
    echo "PASS roce/roce-rx $want"
else
    echo "FAIL roce/roce-rx exit $rrc, expected '$want', got: $(grep RESULT "$RX" | cut -c1-200)"
    fails=1
fi
# The UDP endpoint's counters: every frame from rxe passed the ICRC check.
sum=$(grep '^fpga-emu: udp ' "$EMU")
if [ -n "$sum" ] && echo "$sum" | grep -q 'dropped 0 bad ICRC, 0 malformed, 0 unsupported$'; then
    echo "PASS roce/icrc $(echo "$sum" | sed 's/^fpga-emu: udp //' | cut -c1-200)"
else
    echo "FAIL roce/icrc ${sum:-no counters line from fpga-emu}"
    fails=1
fi
rm -rf "$d"
udp_ns_down
# A scenario between two UDP endpoints in two namespaces (rctb-a, rctb-b:
# lib.sh udp_pair_up) joined by a veth pair that loses 3% of the frames
# each way (tc netem): every stream of udp-pair.toml (every opcode both
# ways, 1 B to 256 KiB, and 1,000 FPGA frames) completes with every byte
# checked, through NAKs, go-back-N and ACK timeouts. Check `netem/run`
# (the report's result line), `netem/loss` (the engine retransmitted).
/usr/sbin/modprobe sch_netem 2>/dev/null
if why=$(udp_pair_up 3); then
    log=$HWV_OUT/udp-netem.txt
    "$TIMEOUT" 60 "$RCTB" run /hwv/udp-pair.toml --backend udp --node a=10.91.0.1@rctb-a \
        --node b=10.91.0.2@rctb-b >"$log" 2>"$HWV_OUT/udp-netem.err"
    rc=$?
    res=$(grep '^result: ' "$log")
    if [ $rc = 0 ] && [ "$res" = "result: PASS (37 checks)" ]; then
        echo "PASS netem/run $res under 3% loss each way"
    else
        echo "FAIL netem/run exit $rc: ${res:-$(last_line "$HWV_OUT/udp-netem.err")}"
        fails=1
    fi
    retx=$(awk '$1 == "retransmitted" { print $2 }' "$log")
    if [ "${retx:-0}" -gt 0 ]; then
        echo "PASS netem/loss $retx packets retransmitted, $(awk '$1 == "timeouts" { print $2 }' "$log") ACK timeouts"
    else
        echo "FAIL netem/loss nothing retransmitted: was anything lost? (ci/out/udp-netem.txt)"
        fails=1
    fi
else
    echo "FAIL netem/setup $why"
    fails=1
fi
udp_pair_down
exit $fails
