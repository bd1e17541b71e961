#!/bin/sh
# rcserver: librcserver.a (capi/rcserver), versitygw's rcserver C ABI, on
# the kernel's rxe through the system's libibverbs (found with dlopen).
#
# 1. abi: capi/rcserver/tests/c/abi_test.c, linked as versitygw links it
#    (-l:librcserver.a -lstdc++ -ldl -lpthread; ci/hw-validate builds it):
#    every size, offset and constant, each rule of the ABI (a failed READY's
#    data phase runs on rxe), and 8 threads at once; on the first device.
# 2. c-transfer: capi/rcserver/tests/c/transfer_test.c, a whole GET and PUT
#    of 1 B .. 4 MiB through the C ABI: the server on rxe2 (10.10.2.1),
#    rctb's hipobj client (examples/rc_client.rs, RcClient on a UDP
#    endpoint) in the network namespace udp (10.10.2.2) at rxe's MTU 1024;
#    every byte moves over RC.
# 3. transfer: capi/rcserver/tests/transfer.rs, the same from Rust through
#    the same entry points (1 B .. 1 MiB).
#
# Time: a few seconds each under TCG.
# hwv-timeout: 150
set -u
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
needs_vm_and_rctb "it adds rxe2 and a network namespace"
: "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
fails=0

log=$HWV_OUT/rcserver-abi.log
if command -v rcserver-abi-test >/dev/null; then
    "$TIMEOUT" 100 rcserver-abi-test >"$log" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q ' 0 failed$' "$log"; then
        echo "PASS abi $(tail -n 1 "$log"); $(grep '^load:' "$log")"
    else
        echo "FAIL abi exit $rc: $(grep -m1 '^FAIL' "$log" || tail -n 1 "$log")"
        fails=1
    fi
else
    echo "FAIL abi rcserver-abi-test not built (see the build check)"
    fails=1
fi

log=$HWV_OUT/rcserver-transfer.log
if ! command -v rcserver-transfer >/dev/null; then
    echo "FAIL transfer rcserver-transfer not built (see the build check)"
    fails=1
elif ! why=$(udp_ns_up); then
    echo "FAIL transfer setup: $why"
    fails=1
else
    clog=$HWV_OUT/rcserver-c-transfer.log
    if command -v rcserver-transfer-test >/dev/null && command -v rc_client >/dev/null; then
        "$TIMEOUT" 100 rcserver-transfer-test "$(command -v rc_client)" 10.10.2.2@udp/1024 10.10.2.1 >"$clog" 2>&1
        rc=$?
        if [ $rc = 0 ] && grep -q ' 0 failed$' "$clog"; then
            echo "PASS c-transfer $(tail -n 1 "$clog")"
        else
            echo "FAIL c-transfer exit $rc: $(grep -m1 '^FAIL' "$clog" || tail -n 1 "$clog")"
            fails=1
        fi
    else
        echo "FAIL c-transfer rcserver-transfer-test or rc_client not built (see the build check)"
        fails=1
    fi
    RCTB_RCSERVER_TRANSFER_CLIENT=10.10.2.2@udp/1024 RCTB_RCSERVER_GID_HINT=10.10.2.1 \
        "$TIMEOUT" 100 rcserver-transfer --exact get_and_put_move_the_bytes_over_rc --nocapture >"$log" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q '^8 sessions over RC' "$log"; then
        echo "PASS transfer $(grep '^8 sessions over RC' "$log")"
    else
        echo "FAIL transfer exit $rc: $(grep -m1 'panicked\|assert' "$log" || tail -n 1 "$log")"
        fails=1
    fi
fi
udp_ns_down
sed 's/^/  | /' "$HWV_OUT/rcserver-abi.log" 2>/dev/null | tail -n 5
exit $fails
