#!/bin/sh
# nvme-udp: NVMe-oF/RDMA with the udp backend on one end, so that end has
# no RDMA device at all (lib.sh udp_ns_up: rxe2 on veth2 at 10.10.2.1, the
# network namespace "udp" on veth3 at 10.10.2.2, where port 4791 is free).
#
# 1. The kernel's own NVMe/RDMA host against `rctb nvme target --backend
#    udp` in the namespace: `nvme discover` and `nvme connect -t rdma`
#    through rxe2 (RDMA CM from the kernel's rdma_cm to rctb's CM on QP1),
#    1 MiB of random data written through the block device with O_DIRECT
#    and fsync, read back and compared, `nvme disconnect` (checks
#    host/discover, host/connect, host/io, host/disconnect). Then the same
#    under each of the target's faults, and what the kernel host did:
#    - host/slow: every response held back 200 ms: the I/O completes, slower;
#    - host/lost: one I/O response never comes (nvme_core io_timeout 5 s):
#      the host times the command out, resets the controller, reconnects,
#      retries; the data reads back intact;
#    - host/error: one I/O answered Internal Error (DNR): the write fails
#      with an I/O error, the next one is served;
#    - host/drop: every connection dropped at the 4th Write (target up):
#      the host reconnects and retries; the data reads back intact;
#    - host/crash: the target crashes at its 12th Write (the 4th of the
#      second MiB) and is back 2 s later: the first MiB (written and
#      flushed before) reads back intact after the host reconnected; what
#      became of the write in flight is reported.
#    Each fault's line counts the kernel's timeouts and reconnects (dmesg)
#    and shows `nvme list-subsys`; a fault whose effect the kernel did not
#    log (no reconnect after a drop or crash, no timeout for a lost
#    response, no I/O error for the error status, a slow run that was not
#    slow) fails, however intact the data.
# 2. rctb's initiator over udp (in the namespace) against the kernel nvmet
#    target, given a second port on 10.10.2.1 (rxe2): identify, write 1 MiB,
#    read it back (checks initiator/identify, initiator/io).
# tcpdump in the namespace keeps it all in capture-nvme-udp.pcap, which the
# host decodes with tshark and ICRC-checks.
# hwv-timeout: 420
set -u
IP=/usr/bin/ip
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
needs_vm_and_rctb "it adds rxe2, a network namespace and an nvmet port"
fails=0
W=$HWV_OUT/nvme-udp
mkdir -p "$W"
NQN=nqn.2026-01.io.rctb:target
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6c1d4b4e-2d9c-4c55-9f4e-00000000b0b1
TGT=10.10.2.2
pass() { echo "PASS $1"; }
fail() {
    echo "FAIL $1 $2"
    fails=1
}

if ! why=$(udp_ns_up); then
    echo "FAIL setup $why"
    udp_ns_down
    exit 1
fi
pass "setup rxe2 on veth2 (10.10.2.1), UDP endpoint in netns udp ($TGT)"
command -v tcpdump >/dev/null && capture_start "$W/tcpdump.log" "$HWV_OUT/capture-nvme-udp.pcap" veth3 udp
# A lost response must not stall the host for the default 30 s.
echo 5 >/sys/module/nvme_core/parameters/io_timeout 2>/dev/null

# target_up NAME ARGS...: rctb nvme target in the namespace, until it listens
target_up() {
    _n=$1
    shift
    $IP netns exec udp "$TIMEOUT" 150 "$RCTB" nvme target --backend udp --device "$TGT" --for 120 "$@" \
        >"$W/target-$_n.out" 2>"$W/target-$_n.err" &
    TPID=$!
    _i=0
    while [ $_i -lt 100 ] && ! grep -q '^LISTENING' "$W/target-$_n.out" 2>/dev/null; do
        sleep 0.1
        _i=$((_i + 1))
    done
    grep -q '^LISTENING' "$W/target-$_n.out"
}
target_down() {
    kill "$TPID" 2>/dev/null
    wait "$TPID" 2>/dev/null
}

# connect NAME: nvme connect, then the new namespace-2 block device in $BLK
connect() {
    _before=" $(ls /dev/nvme*n* 2>/dev/null | tr '\n' ' ') "
    "$TIMEOUT" 60 nvme connect -t rdma -a "$TGT" -s 4420 -w 10.10.2.1 -n "$NQN" --hostnqn=$HOSTNQN \
        --reconnect-delay=1 --ctrl-loss-tmo=60 >"$W/connect-$1.log" 2>&1 || return 1
    _i=0
    BLK=""
    while [ $_i -lt 100 ] && [ -z "$BLK" ]; do
        for _d in /dev/nvme*n2; do
            case "$_before" in
                *" $_d "*) ;;
                *) [ -b "$_d" ] && BLK=$_d ;;
            esac
        done
        [ -n "$BLK" ] || sleep 0.1
        _i=$((_i + 1))
    done
    [ -n "$BLK" ] || echo "no new /dev/nvme*n2 after connecting (before:$_before now: $(ls /dev/nvme* 2>/dev/null | tr '\n' ' '))" >>"$W/connect-$1.log"
    [ -n "$BLK" ]
}
disconnect() { "$TIMEOUT" 60 nvme disconnect -n "$NQN" >"$W/disconnect.log" 2>&1; }

# dmesg_since MARK: the kernel's lines after the one holding MARK
mark() { echo "rctb-nvme-udp: $1" >/dev/kmsg; }
dmesg_since() { dmesg | sed -n "/rctb-nvme-udp: $1/,\$p"; }
# what_host_did MARK: timeouts and reconnects the kernel logged since MARK
what_host_did() {
    _d=$(dmesg_since "$1")
    _to=$(echo "$_d" | grep -c 'timeout')
    _rc=$(echo "$_d" | grep -ci 'reconnect')
    _er=$(echo "$_d" | grep -ci 'I/O error')
    echo "kernel: $_to timeout lines, $_rc reconnect lines, $_er I/O error lines; subsys: $(nvme list-subsys 2>/dev/null | grep -c rdma) rdma path(s)"
}
# fault_missing NAME SECONDS: what the fault NAME should have made the
# kernel host do and it did not (empty: all of it). The data surviving is
# not enough: a fault that never happened leaves it intact too.
fault_missing() {
    _d=$(dmesg_since "$1")
    _to=$(echo "$_d" | grep -c 'timeout')
    _rc=$(echo "$_d" | grep -ci 'reconnect')
    _er=$(echo "$_d" | grep -ci 'I/O error')
    _m=""
    case $1 in
    slow)
        # 200 ms on every response after the first write: the writes, the
        # Flush and the reads each wait it out; no command times out.
        if awk -v s="$2" 'BEGIN { exit !(s < 0.4) }'; then _m="$_m; under 0.4 s: the delays did not happen"; fi
        if [ "$_to" -gt 0 ]; then _m="$_m; the kernel timed a command out"; fi
        ;;
    drop)
        if [ "$_rc" -eq 0 ]; then _m="$_m; the kernel logged no reconnect: no connection was dropped"; fi
        ;;
    lost)
        if [ "$_to" -eq 0 ]; then _m="$_m; the kernel logged no timeout: no response was lost"; fi
        if [ "$_rc" -eq 0 ]; then _m="$_m; the kernel logged no reconnect after the timeout"; fi
        ;;
    crash)
        if [ "$_rc" -eq 0 ]; then _m="$_m; the kernel logged no reconnect: the target did not go away"; fi
        ;;
    error)
        if [ "$_er" -eq 0 ]; then _m="$_m; the kernel logged no I/O error"; fi
        ;;
    esac
    echo "${_m#; }"
}

dd if=/dev/urandom of="$W/a.bin" bs=65536 count=16 2>/dev/null
dd if=/dev/urandom of="$W/b.bin" bs=65536 count=16 2>/dev/null
# io NAME FILE SEEK_MIB: write the 1 MiB FILE at SEEK_MIB MiB with O_DIRECT
# in one 1 MiB write (the host splits it into 8 commands of the target's
# 128 KiB MDTS) and fsync (a Flush), read it back, compare
io() {
    dd if="$2" of="$BLK" bs=1048576 count=1 seek="$3" oflag=direct conv=fsync >"$W/dd-$1.log" 2>&1 &&
        dd if="$BLK" of="$W/back-$1.bin" bs=1048576 count=1 skip="$3" iflag=direct >>"$W/dd-$1.log" 2>&1 &&
        cmp -s "$2" "$W/back-$1.bin"
}

# ---- 1. the kernel host against rctb's target
if target_up clean; then
    if "$TIMEOUT" 60 nvme discover -t rdma -a "$TGT" -s 4420 -w 10.10.2.1 >"$W/discover.out" 2>&1 &&
        grep -q "subnqn: *$NQN" "$W/discover.out"; then
        pass "host/discover $(grep -c subnqn "$W/discover.out") entries"
    else
        fail host/discover "$(last_line "$W/discover.out")"
    fi
    if connect clean; then
        pass "host/connect $BLK"
        if io clean "$W/a.bin" 0; then pass "host/io 1 MiB written (O_DIRECT, fsync) and read back through $BLK"; else fail host/io "$(last_line "$W/dd-clean.log")"; fi
        if disconnect; then pass host/disconnect; else fail host/disconnect "$(last_line "$W/disconnect.log")"; fi
    else
        fail host/connect "$(last_line "$W/connect-clean.log")"
        disconnect
    fi
    target_down
    echo "---- target (clean)"
    cat "$W/target-clean.out"
else
    fail host/target "did not listen: $(last_line "$W/target-clean.err")"
fi

# fault NAME CHECK-TEXT TARGET-ARGS...: one faulted run of connect, io, disconnect
fault() {
    _n=$1
    shift
    mark "$_n"
    if ! target_up "$_n" "$@"; then
        fail "host/$_n" "target did not listen: $(last_line "$W/target-$_n.err")"
        return
    fi
    _t0=$(cut -d' ' -f1 /proc/uptime)
    if ! connect "$_n"; then
        fail "host/$_n" "connect: $(last_line "$W/connect-$_n.log"); $(what_host_did "$_n")"
        disconnect
        target_down
        return
    fi
    if [ "$_n" = crash ]; then
        # A flushed before the crash; the crash comes with B's 4th write.
        io crash-a "$W/a.bin" 0
        _ra=$?
        io crash-b "$W/b.bin" 2
        _rb=$?
        # After the host reconnected, A must still be there.
        dd if="$BLK" of="$W/back-crash-a2.bin" bs=1048576 count=1 iflag=direct >>"$W/dd-crash.log" 2>&1
        if [ $_ra = 0 ] && cmp -s "$W/a.bin" "$W/back-crash-a2.bin"; then
            if [ $_rb = 0 ]; then
                _b="the MiB in flight at the crash came back intact"
            elif grep -q 'records out' "$W/dd-crash-b.log" && [ -s "$W/back-crash-b.bin" ]; then
                # Written and flushed after the reconnect, yet different: the
                # writes answered before the crash were in the volatile cache.
                _b="the MiB in flight at the crash reads back different (answered, unflushed writes lost: VWC)"
            else
                _b="the MiB in flight at the crash failed: $(last_line "$W/dd-crash-b.log")"
            fi
            _miss=$(fault_missing crash 0)
            if [ -z "$_miss" ]; then
                pass "host/crash flushed data intact after the crash and reconnect; $_b; $(what_host_did "$_n")"
            else
                fail "host/crash" "flushed data intact, but $_miss; $(what_host_did "$_n")"
            fi
        else
            fail "host/crash" "flushed data lost or unreadable (A: $_ra); $(what_host_did "$_n")"
        fi
    elif [ "$_n" = error ]; then
        # One I/O answered Internal Error with DNR: the host must pass it up
        # (no retry), and serve the next one.
        if io error-1 "$W/a.bin" 0; then
            fail host/error "the write succeeded: the error status never reached the application"
        elif io error-2 "$W/a.bin" 0; then
            _miss=$(fault_missing error 0)
            if [ -z "$_miss" ]; then
                pass "host/error the I/O failed ($(last_line "$W/dd-error-1.log")), the next one intact; $(what_host_did "$_n")"
            else
                fail host/error "the I/O failed and the next one is intact, but $_miss; $(what_host_did "$_n")"
            fi
        else
            fail host/error "the I/O after the error failed too: $(last_line "$W/dd-error-2.log"); $(what_host_did "$_n")"
        fi
    elif io "$_n" "$W/a.bin" 0; then
        _t1=$(cut -d' ' -f1 /proc/uptime)
        _secs=$(echo "$_t0 $_t1" | awk '{ printf "%.1f", $2 - $1 }')
        _miss=$(fault_missing "$_n" "$_secs")
        if [ -z "$_miss" ]; then
            pass "host/$_n 1 MiB intact in $_secs s; $(what_host_did "$_n")"
        else
            fail "host/$_n" "1 MiB intact in $_secs s, but $_miss; $(what_host_did "$_n")"
        fi
    else
        fail "host/$_n" "$(last_line "$W/dd-$_n.log"); $(what_host_did "$_n")"
    fi
    disconnect
    target_down
    echo "---- target ($_n)"
    cat "$W/target-$_n.out"
    dmesg_since "$_n" | tail -n 20
}
fault slow --response-delay 200 --faults-after-writes 1
fault error --error-io 1 --faults-after-writes 1
fault drop --disconnect-at-write 4
fault lost --drop-responses 1 --faults-after-writes 1
fault crash --crash-after-writes 12 --restart-ms 2000

# ---- 2. rctb's initiator over udp against nvmet, on a port at rxe2's address
if nvmet_port_up 2 10.10.2.1; then
    nv() {
        $IP netns exec udp "$TIMEOUT" 60 "$RCTB" nvme "$@" --backend udp --device "$TGT" -a 10.10.2.1 -n "$NVMET_NQN"
    }
    if nv identify >"$W/init-identify.out" 2>&1 && grep -q "subnqn  : $NVMET_NQN" "$W/init-identify.out"; then
        pass initiator/identify
    else
        fail initiator/identify "$(last_line "$W/init-identify.out")"
    fi
    if nv write --nsid 1 --slba 2048 -d "$W/b.bin" --flush >"$W/init-io.out" 2>&1 &&
        nv read --nsid 1 --slba 2048 --length 1048576 -o "$W/init-back.bin" >>"$W/init-io.out" 2>&1 &&
        cmp -s "$W/b.bin" "$W/init-back.bin"; then
        pass "initiator/io 1 MiB written to nvmet over udp and read back: $(grep '^read' "$W/init-io.out" | cut -c1-100)"
    else
        fail initiator/io "$(last_line "$W/init-io.out")"
    fi
    nvmet_port_down 2
else
    fail initiator/setup "no nvmet port on 10.10.2.1 (NVMET_NQN=${NVMET_NQN:-unset})"
fi

capture_stop
udp_ns_down
exit $fails
