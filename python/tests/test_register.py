"""Controller.register(tensor): a caller's own buffer (numpy array,
bytearray, anything C-contiguous with the buffer protocol) used for
Namespace.read and write on the simulated target, and the refusals."""

import array

import numpy as np
import pytest

import rctb.nvmeof as nvmeof
from conftest import NQN, TARGET_IP


def test_a_numpy_array_is_written_from_and_read_into(sim):
    fabric, model = sim
    src = np.arange(4 * 4096 // 4, dtype=np.uint32)  # 4 LBAs of namespace 2
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        ns = ctrl.namespace(2)
        with ctrl.register(src) as mr:
            assert isinstance(mr, nvmeof.RegisteredMemory) and isinstance(mr, nvmeof.HostBuffer)
            assert mr.length == src.nbytes and mr.tensor is src
            ns.write(mr, 20)
        assert model.namespace_data(2)[20 * 4096 : 24 * 4096] == src.tobytes()
        dst = np.zeros((2, 4096), dtype=np.uint8)  # C-contiguous 2-D: two LBAs
        with ctrl.register(dst) as mr:
            ns.read(mr, 21)
        assert dst.tobytes() == src.tobytes()[4096 : 3 * 4096]
        # A read into part of the buffer leaves the rest as it was.
        back = bytearray(b"\xee" * 3 * 4096)
        with ctrl.register(back) as mr:
            ns.read(mr, 22, 1, buffer_offset=4096)
        assert back[:4096] == b"\xee" * 4096 and back[2 * 4096 :] == b"\xee" * 4096
        assert back[4096 : 2 * 4096] == src.tobytes()[2 * 4096 : 3 * 4096]


def test_a_read_only_buffer_can_be_written_but_not_read_into(sim):
    fabric, model = sim
    data = bytes(range(256)) * 16
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        ns = ctrl.namespace(2)
        with ctrl.register(data) as mr:
            ns.write(mr, 3)
            with pytest.raises(ValueError, match="read-only"):
                ns.read(mr, 3)
        assert model.namespace_data(2)[3 * 4096 : 4 * 4096] == data
        assert model.stats()["reads"] == 0, "a refused read must not reach the target"


def test_what_register_refuses(sim):
    fabric, _ = sim
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        with pytest.raises(ValueError, match="C-contiguous"):
            ctrl.register(np.zeros((64, 64), dtype=np.uint8)[:, ::2])
        with pytest.raises(ValueError, match="positive"):
            ctrl.register(bytearray())
        with pytest.raises(TypeError, match="buffer protocol"):
            ctrl.register(object())
        # A buffer that is too short for the request is the seed's refusal.
        with ctrl.register(array.array("B", bytes(4096))) as mr, pytest.raises(ValueError, match="registered buffer"):
            ctrl.namespace(2).read(mr, 0, 2)
        mr = ctrl.register(bytearray(4096))
        mr.close()
        assert mr.closed
        with pytest.raises(ValueError, match="closed"):
            ctrl.namespace(2).read(mr, 0)
    with pytest.raises(ValueError, match="closed"):
        ctrl.register(bytearray(4096))
