#!/usr/bin/env bash
# The seed's own NVMe-oF initiator, PyPI `nvmeof` 2026.10.22 (through its
# `ibverbs` wheel, which dlopens libibverbs.so.1 and librdmacm.so.1),
# unmodified, on rctb's two libraries against `rctb nvme target --backend
# udp`: two processes on loopback, no kernel RDMA, no root. Connect
# (RDMA CM, synchronous `rdma_create_ep`), identify, three rounds of write
# and verified read; clean, under loss on the wire (RCTB_IBV_FAULTS), and
# under each of the target's faults, where what the initiator does is
# checked against what was measured (it has no reconnect).
#
#   PYTHON=/path/to/venv/bin/python capi/rdmacm/tests/nvmeof.sh
#   RCTB_VERBS_WHEEL=rctb-*.whl ...   # also rctb.nvmeof on its verbs backend
#
# PYTHON defaults to a fresh virtualenv; the pinned wheels are installed
# into it when missing. Without python3 or pip it says "skip" and exits 0,
# unless RCTB_REQUIRE_TOOLS=1.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
here=capi/rdmacm/tests/nvmeof

skip() {
    echo "skip: $*"
    [ "${RCTB_REQUIRE_TOOLS:-}" = 1 ] && exit 1
    exit 0
}
work=$(mktemp -d)
trap 'pkill -f "rctb nvme target --backend udp --device 127.0.0.21" 2>/dev/null; rm -rf "$work"' EXIT
if [ -z "${PYTHON:-}" ]; then
    command -v python3 >/dev/null || skip "python3 not found"
    python3 -m venv "$work/venv" >/dev/null 2>&1 || skip "python3 -m venv failed (apt-get install python3-venv)"
    PYTHON=$work/venv/bin/python
fi
if ! "$PYTHON" -c 'import nvmeof, ibverbs, sys; sys.exit(nvmeof.__version__ != "2026.10.22")' 2>/dev/null; then
    "$PYTHON" -m pip install --quiet nvmeof==2026.10.22 ibverbs==2026.10.22 || skip "pip could not install nvmeof==2026.10.22"
fi

target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
cargo build --release -q -p rctb -p rctb-ibverbs -p rctb-rdmacm || exit 1
export LD_LIBRARY_PATH=$target/release/rctb-verbs
nqn=nqn.2026-01.io.rctb:target
failed=0
passed=0

# case NAME EXPECT INITIATOR_FAULTS -- TARGET_FLAGS...: a fresh target, the
# initiator's run, and its JSON line checked by EXPECT (a Python expression
# over `r`, the parsed line).
case_() {
    local name=$1 expect=$2 faults=$3
    shift 4
    pkill -f "rctb nvme target --backend udp --device 127.0.0.21" 2>/dev/null
    timeout 120 "$target/release/rctb" nvme target --backend udp --device 127.0.0.21 --for 100 "$@" \
        >"$work/$name.tgt" 2>&1 &
    local tpid=$!
    for _ in $(seq 100); do grep -q '^LISTENING' "$work/$name.tgt" && break; sleep 0.1; done
    RCTB_IBV_ADDR=127.0.0.22 RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=$work/$name.stats timeout 60 \
        "$PYTHON" "$here/io.py" 127.0.0.21 "$nqn" 127.0.0.22 5 >"$work/$name.out" 2>"$work/$name.err"
    kill "$tpid" 2>/dev/null
    wait "$tpid" 2>/dev/null
    local line
    line=$(tail -n 1 "$work/$name.out")
    if "$PYTHON" -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' "$line" "$expect" 2>/dev/null; then
        passed=$((passed + 1))
        echo "ok - $name: $line"
    else
        failed=$((failed + 1))
        echo "not ok - $name: want $expect, got: ${line:-nothing}"
        sed 's/^/    | /' "$work/$name.err" "$work/$name.tgt" | tail -n 20
    fi
}

verified='r["connected"] and r["lba_size"] == 512 and r["rounds_verified"] == 3 and r["error"] is None'
case_ clean "$verified" "" --
# Loss on the initiator's own wire (both directions of its device): the
# faults must have acted (drops counted) and the data survived. Which
# packets meet a fault depends on the target's PSNs, so what is counted
# is the drops, not which side sent again.
loss="seed=7,drop=0.1,dup=0.01,reorder=0.02"
case_ wire-loss "$verified" "$loss" --
if [ "$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["dropped"])' "$work/wire-loss.stats" 2>/dev/null || echo 0)" -gt 0 ]; then
    passed=$((passed + 1))
    echo "ok - wire-loss: the initiator's device dropped packets and the data survived"
else
    failed=$((failed + 1))
    echo "not ok - wire-loss: no drop counted ($(cat "$work/wire-loss.stats" 2>/dev/null))"
fi
# What the seed's initiator does under each of the target's faults, as
# measured (docs/nvme-of.md lists it): it waits out a slow answer; a lost
# answer is its 5 s command timeout; an error status is raised as such; a
# dropped connection flushes its queue and it stops (no reconnect).
case_ slow "$verified and r[\"seconds\"] >= 0.6" "" -- --response-delay 200 --faults-after-writes 1
case_ lost-response 'r["connected"] and r["rounds_verified"] == 0 and r["error"] == "TimeoutError: NVMe command timed out"' "" -- \
    --drop-responses 1 --faults-after-writes 1
case_ error-status 'r["connected"] and r["rounds_verified"] == 0 and r["error"].startswith("NVMeStatusError") and "SC=0x06 DNR" in r["error"]' "" -- \
    --error-io 1 --faults-after-writes 1
case_ crash-restart 'r["connected"] and r["rounds_verified"] == 1 and "Work Request Flushed Error" in r["error"]' "" -- \
    --crash-after-writes 2 --restart-ms 500
case_ disconnect 'r["connected"] and r["rounds_verified"] == 1 and "Work Request Flushed Error" in r["error"]' "" -- \
    --disconnect-at-write 2

# Beside it, rctb's own Python initiator (rctb.nvmeof, the same API) on
# its verbs backend, which links libibverbs.so.1 and librdmacm.so.1: on
# rctb's libraries through LD_LIBRARY_PATH, when RCTB_VERBS_WHEEL names
# the wheel built with --features verbs.
if [ -n "${RCTB_VERBS_WHEEL:-}" ]; then
    if python3 -m venv "$work/rctb-venv" >/dev/null 2>&1 && "$work/rctb-venv/bin/pip" install --quiet "$RCTB_VERBS_WHEEL"; then
        PYTHON=$work/rctb-venv/bin/python
        export NVMEOF_MODULE=rctb.nvmeof
        case_ rctb.nvmeof-clean "$verified" "" --
        case_ rctb.nvmeof-wire-loss "$verified" "$loss" --
    else
        failed=$((failed + 1))
        echo "not ok - rctb.nvmeof: could not install $RCTB_VERBS_WHEEL"
    fi
fi

echo "# nvmeof (the seed's initiator) on rctb's libraries: $passed passed, $failed failed"
[ "$failed" = 0 ]
