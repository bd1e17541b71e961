#!/usr/bin/env bash
# rctb's own verbs backend (rctb-hw over rdma-sys, linked against the
# system's libibverbs and librdmacm) run on rctb's libibverbs.so.1 and
# librdmacm.so.1 instead: the RC conformance suite, the one that judges
# sim, udp and rxe, between two devices of one process (rctb1 requests,
# rctb0 responds). Every case must pass, the cm/ cases (connect through
# RDMA CM) included.
#
#   RCTB=target/debug/rctb capi/ibverbs/tests/conformance.sh   # rctb built with --features verbs
set -uo pipefail
cd "$(dirname "$0")/../../.."
RCTB=${RCTB:-target/release/rctb}
target=${CARGO_TARGET_DIR:-target}
LIB_DIR=${LIB_DIR:-$target/release/rctb-verbs}
if [ ! -e "$LIB_DIR/libibverbs.so.1" ] || [ ! -e "$LIB_DIR/librdmacm.so.1" ]; then
    cargo build --release -q -p rctb-ibverbs -p rctb-rdmacm || exit 1
fi
if ! "$RCTB" --help 2>&1 | grep -q conformance; then
    echo "conformance: $RCTB is not an rctb binary" >&2
    exit 1
fi
# LIB_DIR relative to the repository, or absolute (CARGO_TARGET_DIR may be)
case $LIB_DIR in /*) ;; *) LIB_DIR=$PWD/$LIB_DIR ;; esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
LD_LIBRARY_PATH=$LIB_DIR RCTB_IBV_ADDR=${RCTB_TEST_ADDRS:-127.0.0.3,127.0.0.4} \
    timeout 600 "$RCTB" conformance --backend verbs --device rctb1 --peer rctb0 >"$out" 2>&1
passed=$(grep -c '^PASS ' "$out")
cm=$(grep -c '^PASS cm/' "$out")
bad=$(grep -E '^FAIL ' "$out")
if [ -n "$bad" ] || [ "$passed" -lt 60 ] || [ "$cm" -lt 3 ]; then
    echo "conformance through rctb's libibverbs and librdmacm: $passed passed ($cm cm/); failures:"
    echo "${bad:-(none, but too few cases passed)}"
    tail -n 5 "$out"
    exit 1
fi
echo "conformance through rctb's libibverbs and librdmacm: $passed passed, every case, $cm of them through RDMA CM"
