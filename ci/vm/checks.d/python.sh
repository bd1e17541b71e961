#!/bin/sh
# python: the Python package (the rctb wheel, built with the cargo feature
# `verbs`; RCTB_PYTHON is the guest's python3 with it installed) on real
# verbs, written the way the seeds' users write it.
#
# py-nvmeof: rctb.nvmeof (seed-style code, backend verbs, source = DEV's
# address) against the kernel nvmet-rdma target on PEER: identify, read
# namespace 1 and compare it with its backing file (known data), write,
# flush, read back and compare, and check the backing file holds it.
# py-rdma-queue: rctb.nvmeof.rdma.RDMAQueue on verbs: an admin queue, the
# Fabrics Connect capsule built with rctb.nvmeof.protocol, its completion.
# py-rocev2: rctb.rocev2.RoCEv2Server on PEER (rxe0) fed by `rctb fpga-emu`
# on DEV (rxe1): the hand-off through two files (as checks.d/roce.sh), then
# PY_ROCE_FRAMES frames on four channels read through getChannel(n), each
# PRBS-checked and released; counts exact per channel and against the
# FPGA's `done` totals.
#
# Python under TCG is slow (each frame is three calls into the engine
# thread), hence the small frame count and the budget:
# hwv-timeout: 170
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
pass py-setup "$("$RCTB_PYTHON" -c 'import sys, rctb; print("python", sys.version.split()[0], "rctb", rctb.__version__)' 2>&1)"

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
        # A view taken before the read sees what the target writes: the
        # registered memory itself, no copy.
        view = memoryview(buf.view())
        assert len(view) == 1 << 20 and not view.readonly
        ns.read(buf, 0)
        assert bytes(view) == known, "the zero-copy view does not show what the target wrote"
        assert buf.read() == known, "namespace 1 does not read as its backing file"
        data = os.urandom(256 * 1024)
        buf.write(data)
        ns.write(buf, 4096, len(data) // ns.lba_size)
        ns.flush()
        buf.write(bytes(len(data)))
        ns.read(buf, 4096, len(data) // ns.lba_size)
        assert buf.read(len(data)) == data, "read back differs from what was written"
        # Writing through the view is what the target then reads.
        view[:4096] = b"\xa5" * 4096
        tail = ns.info.size_lbas - 4096 // ns.lba_size  # the last 4 KiB
        ns.write(buf, tail, 4096 // ns.lba_size)
        ns.flush()
        view.release()
        zero_copy = "view: target writes seen in place, writes through it reach the target"
with open(os.environ["NS1"], "rb") as f:
    f.seek(4096 * ns.lba_size)
    assert f.read(len(data)) == data, "the backing file does not hold the write"
    f.seek(tail * ns.lba_size)
    assert f.read(4096) == b"\xa5" * 4096, "the backing file does not hold what was written through the view"
print(zero_copy)
print("ok")
PY
    then
        pass py-nvmeof "identify, known data, write, flush, read back; zero-copy view both ways"
    else
        fail py-nvmeof "$(tail -1 "$HWV_OUT/py-nvmeof.log")"
    fi
else
    fail py-nvmeof "no kernel NVMe-oF target (NVMET_NQN unset)"
fi

# RDMAQueue by hand, as the seed's users bring up an admin queue
if [ -n "${NVMET_NQN:-}" ]; then
    if NVMET_NQN=$NVMET_NQN NVMET_ADDR=$NVMET_ADDR NVMET_PORT=$NVMET_PORT SRC=$DEV_IP \
        "$TIMEOUT" 60 "$RCTB_PYTHON" - >"$HWV_OUT/py-rdma-queue.log" 2>&1 <<'PY'
import os, time, uuid
import rctb.nvmeof as nvmeof
import rctb.nvmeof.protocol as p

nqn, addr, port = os.environ["NVMET_NQN"], os.environ["NVMET_ADDR"], int(os.environ["NVMET_PORT"])
host_id = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")
host_nqn = "nqn.2014-08.org.nvmexpress:uuid:%s" % host_id
with nvmeof.RDMAQueue(addr, port, 0, p.ADMIN_QUEUE_DEPTH, source=os.environ["SRC"]) as q:
    with nvmeof.HostBuffer(q.pd, 1024) as data:
        data.write(p.connect_data(host_id, nqn, host_nqn, 0xFFFF))
        c = q.execute(p.fabrics_connect(0, q.depth, data), data_owner=data, timeout=10.0)
    cntlid = c.result & 0xFFFF
    print("connected, controller", cntlid)
    cap = q.execute(p.property_get(p.REG_CAP, 8)).result
    q.execute(p.property_set(p.REG_CC, p.CC_ENABLE | p.CC_IOSQES | p.CC_IOCQES | ((cap >> 48) & 0xF) << p.CC_MPS_SHIFT))
    deadline = time.monotonic() + 10
    while not q.execute(p.property_get(p.REG_CSTS, 4)).result & p.CSTS_READY:
        assert time.monotonic() < deadline, "CSTS.RDY did not come up in 10 s"
        time.sleep(0.01)
    with nvmeof.HostBuffer(q.pd, 4096) as ident:
        q.execute(p.identify(ident, controller=True), data_owner=ident, timeout=10.0)
        info = p.ControllerInfo.from_bytes(ident.read())
    print("identify:", info)
    assert info.controller_id == cntlid, "identify's controller id is not the one Connect gave"
    assert info.model.strip(), "empty model number"
    assert q.outstanding == 0
assert q.closed
print("ok")
PY
    then
        pass py-rdma-queue "admin queue by hand: connect, CC.EN, CSTS.RDY, identify"
    else
        fail py-rdma-queue "$(tail -1 "$HWV_OUT/py-rdma-queue.log")"
    fi
else
    fail py-rdma-queue "no kernel NVMe-oF target (NVMET_NQN unset)"
fi

# RoCEv2Server on PEER, fed by the software FPGA on DEV
if [ -z "${RCTB:-}" ]; then
    fail py-rocev2 "no rctb binary for fpga-emu"
else
    dir=${TMPDIR:-/tmp}/py-roce.$$
    mkdir -p "$dir"
    PEER=$PEER PEER_IP=$PEER_IP DEV_IP=$DEV_IP H=$dir/host.params F=$dir/fpga.params N=$PY_ROCE_FRAMES \
        "$TIMEOUT" 150 "$RCTB_PYTHON" - >"$HWV_OUT/py-rocev2.log" 2>&1 <<'PY' &
import os, time
from rctb.rocev2 import RoCEv2Mtu, RoCEv2Server, RoCEv2ServerCfg, RoCEv2TransportCfg

n = int(os.environ["N"])
channels = (0, 1, 2, 3)
tc = RoCEv2TransportCfg(pmtu=RoCEv2Mtu.MTU_1024)


def follow(path, kind, timeout=60.0):
    """The first line of `path` starting with `kind` (the file may not exist yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    if line.split(" ", 1)[0].strip() == kind:
                        return dict(kv.split("=", 1) for kv in line.split()[1:])
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise TimeoutError("no %s message in %s within %d s" % (kind, path, timeout))


cfg = RoCEv2ServerCfg(ip=os.environ["DEV_IP"], deviceName=os.environ["PEER"], rxQueueDepth=256)
with RoCEv2Server(rocev2Cfg=cfg, backend="verbs") as server:
    hp = server.getHostParams()
    st = server.status()
    with open(os.environ["H"], "w") as h:
        h.write("host qpn=%#x rq_psn=%#x sq_psn=%#x mr_addr=%#x mr_len=%d rkey=%#x gid=%s pmtu=1024 max_payload=%d\n"
                % (hp.hostQpn, hp.hostRqPsn, hp.hostSqPsn, hp.mrAddr, hp.mrLen, st["MrRkey"], st["HostGid"], st["MaxPayload"]))
    fpga = follow(os.environ["F"], "fpga")
    server.completeConnection(int(fpga["qpn"], 0), pmtu=tc.pmtu, minRnrTimer=tc.minRnrTimer, rnrRetry=tc.rnrRetry,
                              retryCount=tc.retryCount, fpgaLkey=int(fpga["lkey"], 0))
    with open(os.environ["H"], "a") as h:
        h.write("ready\n")
    views = {c: server.getChannel(c) for c in channels}
    got = {c: 0 for c in channels}
    nbytes = 0
    deadline = time.monotonic() + 120
    while sum(got.values()) < n:
        assert time.monotonic() < deadline, "only %d of %d frames in 120 s: %s" % (sum(got.values()), n, got)
        for c, view in views.items():
            frame = view.get(timeout=0.05)
            if frame is None:
                continue
            with frame:
                assert frame.channel == c, "channel %d's view gave a frame of channel %d" % (c, frame.channel)
                bad = frame.prbsMismatch()
                assert bad is None, "channel %d frame %d: PRBS differs at byte %d" % (c, got[c], bad)
                data = frame.getData()
                assert len(data) == frame.size == 256
                # The slot itself, read-only, no copy; release waits for it.
                mv = memoryview(frame.view())
                assert mv.readonly and bytes(mv) == data, "the frame's zero-copy view differs from getData()"
                try:
                    frame.release()
                except BufferError:
                    pass
                else:
                    raise AssertionError("release() with a memoryview of the frame alive")
                mv.release()
                nbytes += frame.size
            got[c] += 1
    done = follow(os.environ["F"], "done")
    counters = server.counters()
    status = server.status()
    # frame i goes to channel i mod 4
    want = {c: (n - i + len(channels) - 1) // len(channels) for i, c in enumerate(channels)}
    assert got == want, "per channel: got %s, want %s" % (got, want)
    assert int(done["frames"]) == n and int(done["bytes"]) == nbytes == n * 256, "fpga done %s, received %d bytes" % (done, nbytes)
    assert int(done["errors"]) == 0, "the FPGA reports errors: %s" % done
    assert status["RxFrameCount"] == n and status["RxByteCount"] == nbytes, status
    assert server.heldFrames == 0
    print("counters:", counters)
    print("%d frames, %d bytes on channels %s, PRBS checked, zero-copy views, counts exact" % (n, nbytes, dict(got)))
PY
    py=$!
    "$TIMEOUT" 150 "$RCTB" fpga-emu --device "$DEV" --host-ip "$PEER_IP" --frames "$PY_ROCE_FRAMES" \
        --channels 0,1,2,3 --size 256 --window 32 --pmtu 1024 \
        --host-params "$dir/host.params" --fpga-params "$dir/fpga.params" --handoff-timeout 60s \
        --interval 0s >"$HWV_OUT/py-rocev2-emu.log" 2>&1
    erc=$?
    wait $py
    prc=$?
    echo "---- fpga-emu (exit $erc)"
    cat "$HWV_OUT/py-rocev2-emu.log"
    echo "---- python (exit $prc)"
    cat "$HWV_OUT/py-rocev2.log"
    if [ $erc = 0 ] && [ $prc = 0 ]; then
        pass py-rocev2 "$(tail -1 "$HWV_OUT/py-rocev2.log")"
    elif [ $prc != 0 ]; then
        fail py-rocev2 "python exit $prc: $(grep -v '^[[:space:]]*$' "$HWV_OUT/py-rocev2.log" | tail -n 1 | cut -c1-200)"
    else
        fail py-rocev2 "fpga-emu exit $erc: $(grep -v '^[[:space:]]*$' "$HWV_OUT/py-rocev2-emu.log" | tail -n 1 | cut -c1-200)"
    fi
    rm -rf "$dir"
fi

exit $fails
