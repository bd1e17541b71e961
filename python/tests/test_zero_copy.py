"""Views (``HostBuffer.view()``, ``RoCEv2Frame.view()``) on the simulator,
whose memory belongs to its engine thread: a frame's view is a read-only
copy (a held frame cannot change, so it reads as the zero-copy one would),
a buffer's view is refused with a clear NotImplementedError (a copy would
miss later writes) and changes nothing. The zero-copy views themselves run
on rxe in the VM (``ci/vm/checks.d/python.sh``)."""

import numpy

import pytest

import rctb
import rctb.nvmeof as nvmeof
from conftest import NQN, SEED, TARGET_IP
from test_rocev2_sim import bring_up


def test_host_buffer_view_needs_verbs(sim):
    fabric, _model = sim
    with rctb.use_backend(fabric):
        with nvmeof.Controller(TARGET_IP, NQN, queue_depth=16) as ctrl:
            with ctrl.allocate(4096) as buf:
                buf.write(b"\x5a" * 16)
                with pytest.raises(NotImplementedError, match="verbs backend"):
                    buf.view()
                # The refusal changed nothing.
                assert buf.read(16) == b"\x5a" * 16, "seed %d" % SEED
            with pytest.raises(ValueError, match="closed"):
                buf.view()


def test_frame_view_reads_as_the_frame_and_release_still_works():
    fabric, server, engine, _fpga = bring_up(depth=8)
    stream = server.stream
    engine.startStream([0], [64], 2, window=1)
    f = stream.get(timeout=1.0)
    assert f is not None, "seed %d" % SEED
    mv = memoryview(f.view())
    assert mv.readonly and bytes(mv) == f.getData() and len(mv) == 64, "seed %d" % SEED
    arr = numpy.frombuffer(f.view(), dtype=numpy.uint8)
    assert arr.tobytes() == f.getData() and not arr.flags.writeable
    assert f.prbsMismatch() is None
    # A copy has no views to wait for: release works with them alive.
    f.release()
    assert bytes(mv) == arr.tobytes()
    with pytest.raises(ValueError, match="released"):
        f.view()
    g = stream.get(timeout=1.0)
    assert g is not None, "the slot went back after the refused view (seed %d)" % SEED
    g.release()
    assert server.heldFrames == 0
