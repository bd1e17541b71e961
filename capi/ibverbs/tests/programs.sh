#!/usr/bin/env bash
# Real programs from Debian's packages (ibverbs-utils, perftest) on rctb's
# libibverbs.so.1, unmodified: two processes on loopback, one on 127.0.0.1
# and one on 127.0.0.2, no kernel RDMA, no root needed. Each pair runs
# clean, then the bandwidth tests again under seeded faults, where the
# counts (RCTB_IBV_STATS) must show that packets were lost and sent again.
#
#   capi/ibverbs/tests/programs.sh            # builds the library if needed
#   LIB_DIR=target/release/rctb-verbs capi/ibverbs/tests/programs.sh
#
# Without the programs it says "skip" and exits 0, unless RCTB_REQUIRE_TOOLS=1.
set -uo pipefail
cd "$(dirname "$0")/../../.."

need() {
    for p in "$@"; do
        if ! command -v "$p" >/dev/null; then
            echo "skip: $p is not installed (apt-get install ibverbs-utils perftest)"
            [ "${RCTB_REQUIRE_TOOLS:-}" = 1 ] && exit 1
            exit 0
        fi
    done
}
need ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw ib_send_bw ib_read_bw ib_atomic_bw \
    ib_send_lat ib_write_lat ib_read_lat

target=${CARGO_TARGET_DIR:-target}
LIB_DIR=${LIB_DIR:-$target/release/rctb-verbs}
if [ ! -e "$LIB_DIR/libibverbs.so.1" ]; then
    cargo build --release -q -p rctb-ibverbs || exit 1
fi
# LIB_DIR relative to the repository, or absolute (CARGO_TARGET_DIR may be)
case $LIB_DIR in /*) ;; *) LIB_DIR=$PWD/$LIB_DIR ;; esac
export LD_LIBRARY_PATH=$LIB_DIR
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
passed=0
port=18600

ok() { passed=$((passed + 1)); echo "ok - $*"; }
not_ok() {
    failed=$((failed + 1))
    echo "not ok - $1"
    shift
    for f in "$@"; do [ -f "$f" ] && sed 's/^/    | /' "$f" | tail -n 25; done
}

# Waits until a TCP port listens on loopback (perftest's and rc_pingpong's
# out-of-band exchange), at most 10 s, by polling the socket table.
wait_listen() {
    for _ in $(seq 100); do
        if ss -ltnH "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.1
    done
    return 1
}

# pair NAME FAULTS -- SERVER_AND_CLIENT_ARGS...: runs the program as a server
# on 127.0.0.1 and as a client on 127.0.0.2 with the same arguments; both
# must exit 0. Leaves their output and counts in $work/NAME.{srv,cli,stats}.
pair() {
    local name=$1 faults=$2
    shift 3
    port=$((port + 1))
    local srv=$work/$name.srv cli=$work/$name.cli stats=$work/$name.stats
    rm -f "$stats"
    RCTB_IBV_ADDR=127.0.0.1 RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=$stats \
        timeout "${PAIR_TIMEOUT:-120}" "$@" -p "$port" >"$srv" 2>&1 &
    local spid=$!
    if ! wait_listen "$port"; then
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        not_ok "$name: the server never listened on $port" "$srv"
        return 1
    fi
    RCTB_IBV_ADDR=127.0.0.2 RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=$stats \
        timeout "${PAIR_TIMEOUT:-120}" "$@" -p "$port" 127.0.0.1 >"$cli" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
        not_ok "$name: client exit $crc, server exit $src" "$cli" "$srv"
        return 1
    fi
    return 0
}

# A JSON count summed over both processes' lines in a stats file.
count() { python3 -c 'import json,sys; print(sum(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1])))' "$1" "$2"; }

# --- ibverbs-utils ---
if ibv_devices >"$work/devices" 2>&1 && grep -qE '^\s+rctb0\s+[0-9a-f]{16}$' "$work/devices"; then
    ok "ibv_devices lists rctb0 with its GUID"
else
    not_ok "ibv_devices lists rctb0" "$work/devices"
fi
if ibv_devinfo -v >"$work/devinfo" 2>&1 && grep -q 'hca_id:\s*rctb0' "$work/devinfo" &&
    grep -q 'state:\s*PORT_ACTIVE' "$work/devinfo" && grep -q 'link_layer:\s*Ethernet' "$work/devinfo" &&
    grep -qE 'GID\[\s*0\]:\s*::ffff:127.0.0.1, RoCE v2' "$work/devinfo"; then
    ok "ibv_devinfo -v: rctb0, port ACTIVE, Ethernet, GID 0 ::ffff:127.0.0.1 RoCE v2"
else
    not_ok "ibv_devinfo -v" "$work/devinfo"
fi
for mode in "" "-e"; do
    for size in 1 4096 1000000; do
        label="ibv_rc_pingpong -c ${mode:+$mode }-s $size"
        if pair "pingpong$mode$size" "" -- ibv_rc_pingpong -d rctb0 -g 0 -c $mode -s "$size" -n 200 &&
            grep -q '200 iters in' "$work/pingpong$mode$size.cli"; then
            ok "$label (buffers checked)"
        fi
    done
done

# --- perftest: clean, at sizes from 2 B to 1 MiB ---
bw() { # NAME SIZE ITERS FAULTS [ARGS...]
    local prog=$1 size=$2 iters=$3 faults=$4
    shift 4
    pair "$prog-$size${faults:+-faults}" "$faults" -- "$prog" -d rctb0 -s "$size" -n "$iters" "$@" || return 1
    # The client's report line: "#bytes #iterations ...".
    grep -qE "^ +$size +$iters " "$work/$prog-$size${faults:+-faults}.cli"
}
for size in 2 64 4096 65536 1048576; do
    iters=$([ "$size" -ge 65536 ] && echo 200 || echo 2000)
    for prog in ib_send_bw ib_write_bw ib_read_bw; do
        if bw "$prog" "$size" "$iters" ""; then ok "$prog -s $size -n $iters"; else not_ok "$prog -s $size: no report" "$work/$prog-$size.cli"; fi
    done
done
if bw ib_atomic_bw 8 2000 ""; then ok "ib_atomic_bw -n 2000"; else not_ok "ib_atomic_bw: no report" "$work/ib_atomic_bw-8.cli"; fi
for prog in ib_send_lat ib_write_lat ib_read_lat; do
    for size in 2 64 4096; do
        if pair "$prog-$size" "" -- "$prog" -d rctb0 -s "$size" -n 1000 &&
            grep -qE "^ +$size +1000 " "$work/$prog-$size.cli"; then
            ok "$prog -s $size -n 1000"
        else
            not_ok "$prog -s $size: no report" "$work/$prog-$size.cli"
        fi
    done
done
# Both sides spin on their CQ for every round trip. An empty poll reads
# the fine clock only when a timer may be due (where that clock traps, a
# reading per poll cost more than the poll): the two processes' readings
# stay a few per round trip however fast they spin (250 per round trip on
# the client before, on this host).
reads=$(count "$work/ib_send_lat-64.stats" clock_reads 2>/dev/null)
if [ -n "$reads" ] && [ "$reads" -lt $((2 * 1000 * 20)) ]; then
    ok "ib_send_lat -s 64: $reads fine clock readings in 1000 round trips, both sides"
else
    not_ok "ib_send_lat -s 64: $reads fine clock readings in 1000 round trips (want < 40000)" "$work/ib_send_lat-64.stats"
fi

# --- perftest under seeded faults: it finishes, and the losses were repaired ---
faults="seed=7,drop=0.01,dup=0.005,reorder=0.01"
for case in "ib_write_bw 65536 200" "ib_send_bw 4096 2000" "ib_read_bw 65536 200" "ib_atomic_bw 8 2000"; do
    set -- $case
    if bw "$1" "$2" "$3" "$faults"; then
        stats=$work/$1-$2-faults.stats
        dropped=$(count "$stats" dropped) retx=$(count "$stats" retransmitted)
        dup=$(count "$stats" duplicated)
        if [ "$dropped" -gt 0 ] && [ "$retx" -gt 0 ] && [ "$dup" -gt 0 ]; then
            ok "$1 -s $2 under $faults: dropped $dropped, duplicated $dup, retransmitted $retx"
        else
            not_ok "$1 under faults: dropped $dropped, duplicated $dup, retransmitted $retx (expected all > 0)" "$stats"
        fi
    else
        not_ok "$1 -s $2 under $faults: no report" "$work/$1-$2-faults.cli" "$work/$1-$2-faults.srv"
    fi
done
# ibv_rc_pingpong has an end race under loss: each side exits once its own
# last SEND is acknowledged, and when the ACK of the other's last SEND is
# lost after that, the other sends it again to a QP that is gone, for ever
# (retry_cnt 7 is never spent, as on rxe). A run that ends so (one side
# done, the other still sending) is run again, up to 3 times in all.
for attempt in 1 2 3; do
    PAIR_TIMEOUT=60 pair "pingpong-faults" "$faults" -- ibv_rc_pingpong -d rctb0 -g 0 -c -s 4096 -n 500 && break
    grep -q '500 iters in' "$work/pingpong-faults.srv" "$work/pingpong-faults.cli" || break
    echo "# pingpong-faults: attempt $attempt met the end race (one side done, the other still sending); again"
    failed=$((failed - 1))
done
if grep -q '500 iters in' "$work/pingpong-faults.cli" && [ "$(count "$work/pingpong-faults.stats" retransmitted)" -gt 0 ]; then
    ok "ibv_rc_pingpong -c under $faults: buffers checked, $(count "$work/pingpong-faults.stats" retransmitted) retransmitted"
else
    not_ok "ibv_rc_pingpong -c under faults" "$work/pingpong-faults.cli" "$work/pingpong-faults.stats"
fi

# --- under valgrind: a program a user debugs with memcheck must run ---
# The library once read the vDSO's ELF headers itself (rustix's raw
# backend), where valgrind's replacement vDSO has none: every program
# crashed in ibv_open_device. Memcheck over ibv_devinfo and over an
# ib_send_lat client (its server plain) must finish with no error.
if command -v valgrind >/dev/null; then
    vg() { valgrind -q --error-exitcode=99 "$@"; }
    if RCTB_IBV_ADDR=127.0.0.1 vg ibv_devinfo >"$work/valgrind-devinfo" 2>&1 &&
        grep -q 'hca_id:\s*rctb0' "$work/valgrind-devinfo"; then
        ok "ibv_devinfo under valgrind memcheck: no error"
    else
        not_ok "ibv_devinfo under valgrind memcheck" "$work/valgrind-devinfo"
    fi
    port=$((port + 1))
    RCTB_IBV_ADDR=127.0.0.1 timeout 120 ib_send_lat -d rctb0 -s 64 -n 200 -p "$port" >"$work/valgrind-lat.srv" 2>&1 &
    spid=$!
    if wait_listen "$port" &&
        RCTB_IBV_ADDR=127.0.0.2 timeout 300 valgrind -q --error-exitcode=99 ib_send_lat -d rctb0 -s 64 -n 200 \
            -p "$port" 127.0.0.1 >"$work/valgrind-lat.cli" 2>&1 && wait "$spid" &&
        grep -qE "^ +64 +200 " "$work/valgrind-lat.cli"; then
        ok "ib_send_lat client under valgrind memcheck: 200 round trips, no error"
    else
        kill "$spid" 2>/dev/null
        not_ok "ib_send_lat client under valgrind memcheck" "$work/valgrind-lat.cli" "$work/valgrind-lat.srv"
    fi
elif [ "${RCTB_REQUIRE_TOOLS:-}" = 1 ]; then
    not_ok "valgrind is not installed (RCTB_REQUIRE_TOOLS=1)"
else
    echo "# skip: valgrind is not installed"
fi

echo "programs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
