#!/bin/sh
# python: the Python package on real verbs. Needs RCTB_PYTHON, a python3
# with the rctb wheel built with the cargo feature `verbs` installed (and
# the nvmeof package's protocol module not needed: this uses rctb only).
#
# py-nvmeof: rctb.nvmeof (seed-style code, backend verbs, source = DEV's
# address) against the kernel nvmet-rdma target on PEER: identify, read
# namespace 1 and compare it with its backing file (known data), write,
# flush, read back and compare, and check the backing file holds it.
# py-rocev2 (RoCEv2Server on rxe0 fed by `rctb fpga-emu` on rxe1) is not
# written: rctb.rocev2 runs on the simulator only so far.
#
# UNTESTED, and kept out of ci/vm/checks.d/ on purpose: ci/hw-validate does
# not yet put a Python and the verbs wheel into the guest, so as a hook it
# would fail every VM run. Move it to ci/vm/checks.d/python.sh once the
# guest has them (RCTB_PYTHON).
# hwv-timeout: 120
set -u
pass() { echo "PASS $1"; }
fail() {
    echo "FAIL $1 $2"
    fails=1
}
fails=0
: "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}" "${PY_ROCE_FRAMES:=2000}"
if [ -z "${RCTB_PYTHON:-}" ]; then
    fail py-setup "no RCTB_PYTHON (a python3 with the rctb verbs wheel) in the guest"
    exit 1
fi
if ! "$RCTB_PYTHON" -c 'import rctb, sys; sys.exit(0 if rctb.HAS_VERBS else 1)' 2>"$HWV_OUT/py-import.err"; then
    fail py-setup "rctb does not import with the verbs backend: $(tail -1 "$HWV_OUT/py-import.err")"
    exit 1
fi

if [ -n "${NVMET_NQN:-}" ]; then
    if NVMET_NQN=$NVMET_NQN NVMET_ADDR=$NVMET_ADDR NVMET_PORT=$NVMET_PORT NS1=$NVMET_NS1_FILE SRC=$DEV_IP \
        "$TIMEOUT" 90 "$RCTB_PYTHON" - >"$HWV_OUT/py-nvmeof.log" 2>&1 <<'PY'
import os
import rctb.nvmeof as nvmeof

nqn, addr, port = os.environ["NVMET_NQN"], os.environ["NVMET_ADDR"], int(os.environ["NVMET_PORT"])
with open(os.environ["NS1"], "rb") as f:
    known = f.read(1 << 20)
with nvmeof.Controller(addr, nqn, port=port, source=os.environ["SRC"], timeout=10.0) as ctrl:
    print("identify:", ctrl.info)
    ns = ctrl.namespace(1)
    print("namespace 1:", ns.info)
    with ctrl.allocate(1 << 20) as buf:
        ns.read(buf, 0)
        assert buf.read() == known, "namespace 1 does not read as its backing file"
        data = os.urandom(256 * 1024)
        buf.write(data)
        ns.write(buf, 4096, len(data) // ns.lba_size)
        ns.flush()
        buf.write(bytes(len(data)))
        ns.read(buf, 4096, len(data) // ns.lba_size)
        assert buf.read(len(data)) == data, "read back differs from what was written"
with open(os.environ["NS1"], "rb") as f:
    f.seek(4096 * ns.lba_size)
    assert f.read(len(data)) == data, "the backing file does not hold the write"
print("ok")
PY
    then
        pass py-nvmeof "identify, known data, write, flush, read back"
    else
        fail py-nvmeof "$(tail -1 "$HWV_OUT/py-nvmeof.log")"
    fi
else
    fail py-nvmeof "no kernel NVMe-oF target (NVMET_NQN unset)"
fi

exit $fails
