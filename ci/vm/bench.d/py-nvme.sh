#!/bin/sh
# py-nvme: the two Python NVMe-oF/RDMA initiators with the `nvmeof` API,
# driven by one script (../nvme_bench.py), against the kernel target on the
# namespace fio and rctb read (HWV_NVME_NSID, 2: null_blk), in their rows:
# - tool rctb.nvmeof: rctb's Python package (the verbs wheel; RCTB_PYTHON);
# - tool nvmeof: the seed's own, the `nvmeof` package from PyPI with its
#   `ibverbs` wheel (unpacked on NVMEOF_PYTHONPATH by ci/hw-validate);
# - tool nvmeof-libs: the same seed package, unmodified, on rctb's
#   libibverbs.so.1 and librdmacm.so.1 (LD_LIBRARY_PATH) in network
#   namespace udp (10.10.2.2, device rctb0), against the same kernel target
#   and namespace on a second port, rxe2 at 10.10.2.1 (lib.sh udp_ns_up):
#   one veth and the target's rxe in both paths, the initiator's side
#   either rxe1 or the libraries (issue 37's comparison).
# 4 KiB random reads at each depth of HWV_QDS and 1 MiB sequential reads at
# HWV_SEQ_QD, each for HWV_NVME_SECONDS. Rep by rep, the two tools take
# turns; the depths of HWV_COST_QDS ("1 32") run in a process of their own
# each, through lib.sh cost_run (CPU time into cost.txt) with the rxe
# counter deltas, the other depths and the 1 MiB reads in one more process.
# That process line includes the interpreter's start, the imports and the
# connect (a second or more under TCG), so nvme_bench.py adds the loop's own
# CPU time as tool `<tool>/loop`.
# HWV_STRACE=1 adds a strace -c run at each of those depths.
# A tool that is not in the guest is skipped with a note on stderr, and the
# hook fails when neither ran.
# hwv-timeout: 900
set -u
# shellcheck source=../lib.sh
HWV_LIB=${HWV_LIB:-/hwv/lib.sh}
. "$HWV_LIB"
if [ -z "${NVMET_NQN:-}" ]; then
    echo "no NVMe target here" >&2
    exit 0
fi
: "${HWV_BENCH_REPS:=3}" "${HWV_QDS:=1 2 4 8 16 32 64}" "${HWV_SEQ_QD:=4}" "${HWV_NVME_NSID:=2}"
: "${HWV_NVME_SECONDS:=2.5}" "${HWV_COST_QDS:=1 32}"
SCRIPT=$(dirname "$HWV_LIB")/nvme_bench.py
PY=${RCTB_PYTHON:-${HWV_PYTHON:-}}
W=$HWV_OUT/bench-py-nvme
mkdir -p "$W"
rc=0

tools=""
if [ -n "${RCTB_PYTHON:-}" ]; then
    tools="rctb.nvmeof"
else
    echo "no RCTB_PYTHON (python3 with the rctb wheel): rctb.nvmeof skipped" >&2
fi
if [ -n "${NVMEOF_PYTHONPATH:-}" ] && [ -n "$PY" ]; then
    tools="$tools nvmeof"
else
    echo "no NVMEOF_PYTHONPATH (the nvmeof and ibverbs wheels) or no python3: nvmeof skipped" >&2
fi
SHIM=/usr/local/lib/rctb-verbs
libs_ns=""
if [ -n "${NVMEOF_PYTHONPATH:-}" ] && [ -n "$PY" ] && [ -e "$SHIM/libibverbs.so.1" ] &&
    [ -e "$SHIM/librdmacm.so.1" ]; then
    if ! why=$(udp_ns_up); then
        echo "nvmeof-libs skipped: network namespace udp: $why" >&2
        udp_ns_down
    elif ! nvmet_port_up 3 10.10.2.1; then
        echo "nvmeof-libs skipped: nvmet port 3 on 10.10.2.1 could not be made" >&2
        udp_ns_down
    else
        libs_ns=up
        tools="$tools nvmeof-libs"
    fi
else
    echo "no NVMEOF_PYTHONPATH, python3 or rctb's libraries in $SHIM: nvmeof-libs skipped" >&2
fi
[ -n "$tools" ] || exit 1

in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

# py TOOL REP COST-WORKLOAD SCRIPT-ARGS...: one process of nvme_bench.py for
# TOOL; its BENCH lines go to stdout. COST-WORKLOAD: run through cost_run
# (the read count from the BENCH line), "strace:W" the strace -c run whose
# figures are dropped, "" neither.
py() {
    _tool=$1 _rep=$2 _cw=$3
    shift 3
    _f=$W/$_tool-r$_rep-$(echo "$*" | tr -c 'A-Za-z0-9\n' _ | cut -c1-40)
    _lib=$_tool _addr=$NVMET_ADDR _src=$DEV_IP _devs="$DEV $PEER"
    case $_tool in
        nvmeof) _pp=$NVMEOF_PYTHONPATH ;;
        nvmeof-libs) _pp=$NVMEOF_PYTHONPATH _lib=nvmeof _addr=10.10.2.1 _src=10.10.2.2 _devs=rxe2 ;;
        *) _pp=${PYTHONPATH:-} ;;
    esac
    set -- env PYTHONPATH="$_pp" "$TIMEOUT" 150 "$PY" "$SCRIPT" --lib "$_lib" --tool "$_tool" \
        --addr "$_addr" --port "$NVMET_PORT" --nqn "$NVMET_NQN" --source "$_src" \
        --nsid "$HWV_NVME_NSID" --seconds "$HWV_NVME_SECONDS" --seq-seconds "$HWV_NVME_SECONDS" "$@"
    if [ "$_tool" = nvmeof-libs ]; then
        set -- /usr/bin/ip netns exec udp env LD_LIBRARY_PATH="$SHIM" RCTB_IBV_ADDR=10.10.2.2 \
            RCTB_IBV_STATS="$HWV_OUT/bench-py-nvme-libs.stats" "$@"
    fi
    case $_cw in
        "")
            "$@" >"$_f.out" 2>"$_f.err"
            _rc=$?
            ;;
        strace:*)
            COST_STRACE=1
            cost_run "${_cw#strace:}" "$_tool" "?" -- "$@" >"$_f.out" 2>"$_f.err"
            COST_STRACE=0
            return 0
            ;;
        *)
            COST_STRACE=0
            # shellcheck disable=SC2086 # a list of devices
            _c0=$(rxe_snap $_devs)
            cost_run "$_cw" "$_tool" "?" -- "$@" --cost-file "$HWV_OUT/cost.txt" >"$_f.out" 2>"$_f.err"
            _rc=$?
            # shellcheck disable=SC2086
            rxe_delta "$_cw" "$_tool" "$_c0" "$(rxe_snap $_devs)" >/dev/null
            # the read count: IOPS x seconds is what nvme_bench.py logs as "<n> random ..."
            _n=$(sed -n 's/^\([0-9][0-9]*\) random 4 KiB reads.*/\1/p' "$_f.err" | tail -n 1)
            cost_set_ops "$_cw" "$_tool" "${_n:-?}"
            ;;
    esac
    grep '^BENCH ' "$_f.out"
    if [ "$_rc" != 0 ] || ! grep -q '^BENCH ' "$_f.out"; then
        echo "$_tool r$_rep ($*): exit $_rc: $(last_line "$_f.err")" >&2
        rc=1
    fi
}

rest=""
for qd in $HWV_QDS; do in_list "$qd" "$HWV_COST_QDS" || rest="$rest $qd"; done
for r in $(seq 1 "$HWV_BENCH_REPS"); do
    for t in $tools; do
        for qd in $HWV_QDS; do
            in_list "$qd" "$HWV_COST_QDS" || continue
            py "$t" "$r" "nvme-randread-4KiB-qd$qd" --qds "$qd" --seq-qd 0
        done
        if [ -n "$rest" ] || [ "$HWV_SEQ_QD" -gt 0 ]; then
            py "$t" "$r" "" --qds "${rest# }" --seq-qd "$HWV_SEQ_QD"
        fi
    done
done
if strace_wanted; then
    for t in $tools; do
        for qd in $HWV_COST_QDS; do
            in_list "$qd" "$HWV_QDS" || continue
            py "$t" strace "strace:nvme-randread-4KiB-qd$qd" --qds "$qd" --seq-qd 0
        done
    done
fi
if [ -n "$libs_ns" ]; then
    nvmet_port_down 3
    udp_ns_down
fi
exit $rc
