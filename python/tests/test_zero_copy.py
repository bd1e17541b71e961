"""Zero-copy views (``HostBuffer.view()``, ``RoCEv2Frame.view()``) on the
backends that cannot give them: the simulator's memory belongs to its
engine thread, so a view is refused with a clear NotImplementedError and
nothing changes; ``read()`` and ``getData()`` keep working. The views
themselves run on rxe in the VM (``ci/vm/checks.d/python.sh``)."""

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


def test_frame_view_needs_verbs_and_release_still_works():
    fabric, server, engine, _fpga = bring_up(depth=8)
    stream = server.stream
    engine.startStream([0], [64], 2, window=1)
    f = stream.get(timeout=1.0)
    assert f is not None, "seed %d" % SEED
    with pytest.raises(NotImplementedError, match="verbs backend"):
        f.view()
    assert f.prbsMismatch() is None and len(f.getData()) == 64
    f.release()
    with pytest.raises(ValueError, match="released"):
        f.view()
    g = stream.get(timeout=1.0)
    assert g is not None, "the slot went back after the refused view (seed %d)" % SEED
    g.release()
    assert server.heldFrames == 0
