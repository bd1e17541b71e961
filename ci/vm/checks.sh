#!/bin/sh
# checks.sh DEV PEER: the hardware-validation checks between two RDMA devices
# of one machine: DEV is the device under test, PEER the other end.
#
# Run by the VM's /init (DEV=rxe1, PEER=rxe0) and by `ci/hw-validate --host`.
# POSIX sh (busybox sh in the VM). Every check records one line in
# $HWV_RESULTS: `PASS <name>` or `FAIL <name> <why>`. The host knows which
# checks to expect (ci/hw-validate: expected_checks), so keep the two in step.
#
# Environment: HWV_OUT (artifacts), HWV_RESULTS, HWV_MODE (vm|host),
# RCTB (the rctb binary; default: rctb on $PATH), HWV_T_CONFORMANCE and
# HWV_T_CHECK (timeouts in s), HWV_CHECKS_DIR (the hook scripts, default
# checks.d beside this file), HWV_CAPTURE (1: tcpdump the traffic).
set -u
DEV=$1
PEER=$2
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
HWV_LIB=$HERE/lib.sh # hooks: . "$HWV_LIB"
: "${HWV_T_CONFORMANCE:=150}" "${HWV_T_CHECK:=90}" "${HWV_CAPTURE:=1}"
: "${HWV_CHECKS_DIR:=$HERE/checks.d}"
: "${RCTB:=$(command -v rctb || true)}"
export RCTB DEV PEER HWV_OUT HWV_RESULTS HWV_MODE HWV_LIB

# ------------------------------------------------------------------ ports
# ports-active: both ports ACTIVE, and what the other checks need to know
# about them (exported for the hook scripts).
portfail=""
for d in "$DEV" "$PEER"; do
    if [ ! -d "/sys/class/infiniband/$d" ]; then
        portfail="$portfail; no device $d (have: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '))"
    elif ! wait_active "$d" 10; then
        portfail="$portfail; $d port 1 is $(cat "/sys/class/infiniband/$d/ports/1/state")"
    fi
done
DEV_GID=$(gid_index "$DEV")
PEER_GID=$(gid_index "$PEER")
DEV_IP="" PEER_IP="" DEV_NETDEV=""
if [ -n "$DEV_GID" ]; then
    DEV_IP=$(gid_ipv4 "$DEV" "$DEV_GID")
    DEV_NETDEV=$(gid_netdev "$DEV" "$DEV_GID")
fi
[ -n "$PEER_GID" ] && PEER_IP=$(gid_ipv4 "$PEER" "$PEER_GID")
export DEV_GID PEER_GID DEV_IP PEER_IP DEV_NETDEV
echo "DEV=$DEV gid=$DEV_GID ip=$DEV_IP netdev=$DEV_NETDEV  PEER=$PEER gid=$PEER_GID ip=$PEER_IP"
if [ -z "$portfail" ]; then
    result PASS ports-active "$DEV ($DEV_IP) and $PEER ($PEER_IP)"
else
    result FAIL ports-active "${portfail#; }"
fi

# ------------------------------------------------------------------ capture
# Everything from here to the end of the hook checks is captured on DEV's
# netdev; the host decodes it with tshark and checks every ICRC.
CAP=${TMPDIR:-/tmp}/hwv-capture.$$.pcap
CAPTURE_PID=""
if [ "$HWV_CAPTURE" = 1 ] && [ -n "$DEV_NETDEV" ] && command -v tcpdump >/dev/null; then
    capture_start "$HWV_OUT/tcpdump.log" "$CAP" "$DEV_NETDEV"
    say "capturing on $DEV_NETDEV"
fi

# gidarg GID: `-g GID` for the libibverbs examples, nothing without a GID
gidarg() { [ -n "$1" ] && echo "-g $1"; }

# ------------------------------------------------------------------ baseline
# verbs-pingpong: libibverbs' own RC example between the two devices, so a
# broken machine (rxe, provider library, GIDs) is told apart from a broken
# rctb. The TCP side channel goes over loopback.
say "verbs-pingpong $DEV -> $PEER"
# shellcheck disable=SC2046 # gidarg is empty or two words
$TIMEOUT 30 ibv_rc_pingpong -d "$PEER" $(gidarg "$PEER_GID") -n 100 -p 18515 \
    >"$HWV_OUT/pingpong-server.log" 2>&1 &
srv=$!
sleep 1
# shellcheck disable=SC2046
$TIMEOUT 30 ibv_rc_pingpong -d "$DEV" $(gidarg "$DEV_GID") -n 100 -p 18515 127.0.0.1 \
    >"$HWV_OUT/pingpong-client.log" 2>&1
rc=$?
wait $srv
src=$?
if [ $rc = 0 ] && [ $src = 0 ]; then
    result PASS verbs-pingpong "$(grep -m1 'Mbit/sec' "$HWV_OUT/pingpong-client.log")"
else
    result FAIL verbs-pingpong "client exit $rc, server exit $src: $(last_line "$HWV_OUT/pingpong-client.log")"
fi

# ------------------------------------------------------------------ suites
# run_suite NAME TIMEOUT COMMAND...: run a command that prints
# `PASS <check>` / `FAIL <check> <why>` lines; record each as NAME/<check>,
# then NAME itself: PASS when it exited 0 with at least one PASS and no FAIL.
run_suite() {
    _n=$1 _t=$2
    shift 2
    say "$_n"
    _s=$(uptime_s)
    $TIMEOUT "$_t" "$@" >"$HWV_OUT/$_n.out" 2>"$HWV_OUT/$_n.err" </dev/null
    _rc=$?
    _e=$(uptime_s)
    _np=0 _nf=0
    while read -r _st _c _why; do
        case "$_st" in
            PASS)
                result PASS "$_n/$_c"
                _np=$((_np + 1))
                ;;
            FAIL)
                result FAIL "$_n/$_c" "${_why:-(no reason given)}"
                _nf=$((_nf + 1))
                ;;
        esac
    done <"$HWV_OUT/$_n.out"
    _took=$(awk -v s="$_s" -v e="$_e" 'BEGIN { printf "%.1f", e - s }')
    if [ $_rc = 124 ]; then
        result FAIL "$_n" "timed out after ${_t}s ($_np passed, $_nf failed so far)"
    elif [ $_rc != 0 ]; then
        if grep -q '[^[:space:]]' "$HWV_OUT/$_n.err"; then
            _why=$(last_line "$HWV_OUT/$_n.err")
        else
            _why=$(last_line "$HWV_OUT/$_n.out")
        fi
        result FAIL "$_n" "exit $_rc ($_np passed, $_nf failed): $_why"
    elif [ $_nf != 0 ]; then
        result FAIL "$_n" "exit 0 but $_nf of $((_np + _nf)) checks failed"
    elif [ $_np = 0 ]; then
        result FAIL "$_n" "printed no PASS/FAIL line: $(last_line "$HWV_OUT/$_n.err")"
    else
        result PASS "$_n" "$_np checks in ${_took}s"
    fi
}

# devices: `rctb devices` lists both devices
if [ -z "$RCTB" ] || [ ! -x "$RCTB" ]; then
    result FAIL devices "no rctb binary (see the build check)"
    result FAIL conformance "no rctb binary (see the build check)"
else
    $TIMEOUT 30 "$RCTB" devices >"$HWV_OUT/devices.out" 2>&1 </dev/null
    rc=$?
    missing=""
    for d in "$DEV" "$PEER"; do
        grep -qw "$d" "$HWV_OUT/devices.out" || missing="$missing $d"
    done
    if [ $rc != 0 ]; then
        result FAIL devices "exit $rc: $(last_line "$HWV_OUT/devices.out")"
    elif [ -n "$missing" ]; then
        result FAIL devices "does not list$missing"
    else
        result PASS devices "lists $DEV and $PEER"
    fi
    run_suite conformance "$HWV_T_CONFORMANCE" \
        "$RCTB" conformance --backend verbs --device "$DEV" --peer "$PEER"
fi

# hook checks: every checks.d/NAME.sh is a suite named NAME (later issues add
# theirs there; see checks.d/README.md)
for f in "$HWV_CHECKS_DIR"/*.sh; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .sh)
    case " ${HWV_HOOKS:-$n} " in *" $n "*) ;; *) continue ;; esac
    run_suite "$n" "$(hook_timeout "$f")" /bin/sh "$f"
done

# ------------------------------------------------------------------ end capture
if [ -n "$CAPTURE_PID" ]; then
    capture_stop
    cp "$CAP" "$HWV_OUT/capture.pcap"
    rm -f "$CAP"
fi
say "checks done"
