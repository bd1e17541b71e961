#!/usr/bin/env bash
# Real programs from Debian's rdmacm-utils and perftest on rctb's
# librdmacm.so.1 and libibverbs.so.1, unmodified: two processes on
# loopback (127.0.0.11 and 127.0.0.12), no kernel RDMA, no root. Each
# connects through RDMA CM: clean, then under seeded faults, where the
# counts (RCTB_IBV_STATS) must show packets lost and sent again.
#
#   capi/rdmacm/tests/programs.sh      # builds both libraries if needed
#
# Without the programs it says "skip" and exits 0, unless RCTB_REQUIRE_TOOLS=1.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1

for p in rping ucmatose rdma_server rdma_client udaddy ib_send_bw ib_write_bw ib_read_bw ib_write_lat ibv_rc_pingpong; do
    if ! command -v "$p" >/dev/null; then
        echo "skip: $p is not installed (apt-get install rdmacm-utils perftest ibverbs-utils)"
        [ "${RCTB_REQUIRE_TOOLS:-}" = 1 ] && exit 1
        exit 0
    fi
done

target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
LIB_DIR=$target/release/rctb-verbs
cargo build --release -q -p rctb-ibverbs -p rctb-rdmacm || exit 1
export LD_LIBRARY_PATH=$LIB_DIR
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
passed=0
srv_ip=127.0.0.11
cli_ip=127.0.0.12
faults="seed=7,drop=0.03,dup=0.005,reorder=0.01"

ok() { passed=$((passed + 1)); echo "ok - $*"; }
not_ok() {
    failed=$((failed + 1))
    echo "not ok - $1"
    shift
    for f in "$@"; do [ -f "$f" ] && sed 's/^/    | /' "$f" | tail -n 20; done
}

# A JSON count summed over both processes' lines in a stats file.
count() { python3 -c 'import json,sys; print(sum(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1])))' "$1" "$2"; }

# pair NAME FAULTS "SERVER ARGS" "CLIENT ARGS": the server on $srv_ip, then
# the client on $cli_ip, both must exit 0. Output in $work/NAME.{srv,cli,stats}.
#
# A server is listening some time after its device binds UDP 4791, and
# nothing outside shows when. A client that came too early is refused
# with REJECTED status 8 ("invalid service ID": no listener), exactly as
# rdma_cm refuses it; the pair then starts again, up to 5 times. (perftest
# -R's own retry after such a refusal reuses ids it freed, and crashes,
# with rdma-core's library as with this one.) A library that never
# listens fails every attempt.
pair() {
    local name=$1 f=$2 sargs=$3 cargs=$4
    local srv=$work/$name.srv cli=$work/$name.cli stats=$work/$name.stats
    local attempt crc src spid
    for attempt in 1 2 3 4 5; do
        local settle
        # A busy machine is slow to reach rdma_listen: give each attempt longer.
        settle=$(echo "0.3 0.6 1 2 3" | cut -d' ' -f"$attempt")
        rm -f "$stats"
        # shellcheck disable=SC2086
        RCTB_IBV_ADDR=$srv_ip RCTB_IBV_FAULTS=$f RCTB_IBV_STATS=$stats timeout 120 $sargs >"$srv" 2>&1 &
        spid=$!
        for _ in $(seq 100); do
            ss -lunH "src $srv_ip:4791" 2>/dev/null | grep -q . && break
            sleep 0.1
        done
        sleep "$settle"
        # shellcheck disable=SC2086
        RCTB_IBV_ADDR=$cli_ip RCTB_IBV_FAULTS=$f RCTB_IBV_STATS=$stats timeout 120 $cargs >"$cli" 2>&1
        crc=$?
        if [ "$crc" -ne 0 ] && grep -qE 'REJECTED(;|,) error:? 8|Unexpected CM event bl blka 8|rdma_connect: Connection refused' "$cli"; then
            echo "# $name: the client came before the server listened (attempt $attempt): again"
            kill "$spid" 2>/dev/null
            wait "$spid" 2>/dev/null
            sleep 0.5
            continue
        fi
        wait "$spid"
        src=$?
        if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
            not_ok "$name: client exit $crc, server exit $src" "$cli" "$srv"
            return 1
        fi
        return 0
    done
    not_ok "$name: refused as not listening in 5 attempts" "$cli" "$srv"
    return 1
}

# --- rdmacm-utils ---
for f in "" "$faults"; do
    tag=${f:+ under $f}
    name=rping${f:+-faults}
    if pair "$name" "$f" "rping -s -v -a $srv_ip -C 100" "rping -c -v -a $srv_ip -C 100"; then
        n=$(grep -c '^ping data: rdma-ping-' "$work/$name.cli")
        m=$(grep -c '^server ping data: rdma-ping-' "$work/$name.srv")
        if [ "$n" = 100 ] && [ "$m" = 100 ]; then
            if [ -z "$f" ]; then
                ok "rping -v -C 100: 100 pings verified on both sides"
            elif [ "$(count "$work/$name.stats" retransmitted)" -gt 0 ] && [ "$(count "$work/$name.stats" dropped)" -gt 0 ]; then
                ok "rping -v -C 100$tag: 100 pings, $(count "$work/$name.stats" dropped) dropped, $(count "$work/$name.stats" retransmitted) retransmitted"
            else
                not_ok "rping$tag: no loss or no retransmission counted" "$work/$name.stats"
            fi
        else
            not_ok "rping$tag: $n client and $m server pings of 100" "$work/$name.cli" "$work/$name.srv"
        fi
    fi
done

if pair ucmatose "" "ucmatose" "ucmatose -s $srv_ip" && grep -q 'return status 0' "$work/ucmatose.cli" &&
    grep -q 'return status 0' "$work/ucmatose.srv"; then
    ok "ucmatose: connect, data transfers, disconnect"
else
    not_ok "ucmatose" "$work/ucmatose.cli" "$work/ucmatose.srv"
fi

if pair rdma-server "" "rdma_server -s $srv_ip" "rdma_client -s $srv_ip" && grep -q 'rdma_client: end 0' "$work/rdma-server.cli" &&
    grep -q 'rdma_server: end 0' "$work/rdma-server.srv"; then
    ok "rdma_server / rdma_client: rdma_getaddrinfo, rdma_create_ep, rdma_get_request (synchronous ids)"
else
    not_ok "rdma_server / rdma_client" "$work/rdma-server.cli" "$work/rdma-server.srv"
fi

# udaddy is UD (RDMA_PS_UDP): this device is RC only. It must say so and
# stop, not hang or crash.
RCTB_IBV_ADDR=$srv_ip timeout 20 udaddy >"$work/udaddy" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] || [ "$rc" = 255 ]; then
    if grep -q 'Operation not supported' "$work/udaddy"; then
        ok "udaddy (UD) is refused with EOPNOTSUPP: the device is RC only (exit $rc)"
    else
        not_ok "udaddy: exit $rc without EOPNOTSUPP" "$work/udaddy"
    fi
else
    not_ok "udaddy: exit $rc" "$work/udaddy"
fi

# --- perftest through RDMA CM (-R) ---
for f in "" "$faults"; do
    for prog in "ib_send_bw -s 4096 -n 500" "ib_write_bw -s 65536 -n 200" "ib_read_bw -s 65536 -n 200" "ib_write_lat -s 64 -n 500"; do
        name=$(echo "$prog" | cut -d' ' -f1)${f:+-faults}
        if pair "$name" "$f" "$prog -R" "$prog -R $srv_ip"; then
            if [ -z "$f" ]; then
                ok "$prog -R"
            elif [ "$(count "$work/$name.stats" retransmitted)" -gt 0 ]; then
                ok "$prog -R under $f: $(count "$work/$name.stats" retransmitted) retransmitted"
            else
                not_ok "$prog -R under faults: nothing retransmitted" "$work/$name.stats"
            fi
        fi
    done
done

# --- a completion channel under loss (no RDMA CM): the program blocks in
# ibv_get_cq_event and makes no call while a lost packet waits for its
# timer; the library's thread must send it again. ---
# ibv_rc_pingpong's end race under loss (see capi/ibverbs/tests/programs.sh):
# one side may exit before the ACK of the other's last SEND arrives, and the
# other then sends it for ever; such a run is repeated, 3 runs at most.
port=18690
for attempt in 1 2 3; do
    port=$((port + 1))
    rm -f "$work/events.stats"
    RCTB_IBV_ADDR=$srv_ip RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=$work/events.stats timeout 60 \
        ibv_rc_pingpong -e -g 0 -n 200 -p $port >"$work/events.srv" 2>&1 &
    spid=$!
    for _ in $(seq 100); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
    RCTB_IBV_ADDR=$cli_ip RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=$work/events.stats timeout 60 \
        ibv_rc_pingpong -e -g 0 -n 200 -p $port $srv_ip >"$work/events.cli" 2>&1
    crc=$?
    wait $spid
    src=$?
    if { [ $crc = 0 ] && [ $src = 0 ]; } || ! grep -q '200 iters in' "$work/events.srv" "$work/events.cli"; then
        break
    fi
    echo "# ibv_rc_pingpong -e: attempt $attempt met the end race (one side done, the other still sending); again"
done
if [ $crc = 0 ] && [ $src = 0 ] && [ "$(count "$work/events.stats" timeouts)" -gt 0 ]; then
    ok "ibv_rc_pingpong -e (completion channel) under $faults: $(count "$work/events.stats" timeouts) timeouts recovered by the thread"
else
    not_ok "ibv_rc_pingpong -e under faults: client $crc, server $src" "$work/events.cli" "$work/events.srv" "$work/events.stats"
fi

echo "# rdmacm programs: $passed passed, $failed failed"
[ "$failed" = 0 ]
