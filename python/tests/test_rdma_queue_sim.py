"""rctb.nvmeof.rdma.RDMAQueue with seed-style code (the protocol builders,
HostBuffer on the queue's PD) against the simulated target: bring-up by
hand, QueueFullError, statuses and timeouts from execute()."""

import uuid

import pytest

import rctb.nvmeof as nvmeof
import rctb.nvmeof.protocol as p
from conftest import NQN, TARGET_IP

HOST_ID = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")
HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:%s" % HOST_ID


def admin_connect(q):
    with nvmeof.HostBuffer(q.pd, 1024) as data:
        data.write(p.connect_data(HOST_ID, NQN, HOST_NQN, 0xFFFF))
        return q.execute(p.fabrics_connect(0, q.depth, data), data_owner=data, timeout=5.0)


def enable(q, fabric):
    cap = q.execute(p.property_get(p.REG_CAP, 8)).result
    q.execute(p.property_set(p.REG_CC, p.CC_ENABLE | p.CC_IOSQES | p.CC_IOCQES | ((cap >> 48) & 0xF) << p.CC_MPS_SHIFT))
    polls = 0
    while not q.execute(p.property_get(p.REG_CSTS, 4)).result & p.CSTS_READY:
        fabric.run_until(fabric.now + 0.01)  # virtual time: the model's ready delay
        polls += 1
        assert polls < 100, "CSTS.RDY never came up"
    return cap


def test_admin_bring_up_by_hand(sim):
    fabric, _ = sim
    with nvmeof.RDMAQueue(TARGET_IP, p.NVME_RDMA_PORT, 0, p.ADMIN_QUEUE_DEPTH, backend=fabric) as q:
        c = admin_connect(q)
        assert isinstance(c, nvmeof.Completion) and c.succeeded and c.result & 0xFFFF
        cap = enable(q, fabric)
        assert (cap & 0xFFFF) + 1 == 128  # MQES of the model
        with nvmeof.HostBuffer(q.pd, 4096) as ident:
            q.execute(p.identify(ident, controller=True), data_owner=ident)
            info = p.ControllerInfo.from_bytes(ident.read())
        assert info.controller_id == c.result & 0xFFFF and info.sgls & 4
        assert q.outstanding == 0
    assert q.closed


def test_queue_full_and_poll(sim):
    fabric, _ = sim
    q = nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 2, backend=fabric)
    data = nvmeof.HostBuffer(q.pd, 1024)
    data.write(p.connect_data(HOST_ID, NQN, HOST_NQN, 0xFFFF))
    first = q.submit(p.fabrics_connect(0, 2, data), data_owner=data)
    assert q.outstanding == 1 and not first.done
    with pytest.raises(nvmeof.QueueFullError, match="full") as e:
        q.submit(p.property_get(p.REG_CAP, 8))
    assert isinstance(e.value, RuntimeError)
    assert nvmeof.rdma.QueueFullError is nvmeof.QueueFullError
    fabric.run_until(fabric.now + 0.01)
    done = q.poll()
    assert done == [first] and first.done and first.send_complete and first.response.succeeded
    assert q.outstanding == 0
    data.close()
    q.close()


def test_execute_raises_status_and_timeout(sim):
    fabric, model = sim
    with nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 32, backend=fabric) as q:
        admin_connect(q)
        enable(q, fabric)
        with nvmeof.HostBuffer(q.pd, 4096) as ident:
            with pytest.raises(nvmeof.NVMeStatusError) as e:
                q.execute(p.identify(ident, nsid=77), data_owner=ident)
            assert e.value.completion.status_code == 0x0B
            model.drop_responses(1)
            with pytest.raises(TimeoutError, match="timed out"):
                q.execute(p.property_get(p.REG_CSTS, 4), timeout=1.0)


def test_queue_refusals_are_the_seeds(sim):
    fabric, _ = sim
    with pytest.raises(ValueError, match="between 2 and 256"):
        nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 1, backend=fabric)
    with nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 4, backend=fabric) as q:
        with pytest.raises(ValueError, match="exactly 64 bytes"):
            q.submit(b"\0" * 63)
        with pytest.raises(ValueError, match="buffer length must be positive"):
            nvmeof.HostBuffer(q.pd, 0)
        with nvmeof.HostBuffer(q.pd, 16) as b:
            with pytest.raises(ValueError, match="write exceeds the host buffer"):
                b.write(b"x" * 17)
            with pytest.raises(ValueError, match="read exceeds the host buffer"):
                b.read(4, 13)
    with pytest.raises(RuntimeError, match="closed"):
        q.submit(bytes(64))


def test_poll_max_entries_keeps_the_rest_for_the_next_poll(sim):
    fabric, _ = sim
    with nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 8, backend=fabric) as q:
        admin_connect(q)
        requests = [q.submit(p.property_get(p.REG_CAP, 8)) for _ in range(3)]
        fabric.run_until(fabric.now + 0.01)
        first = q.poll(max_entries=1)
        assert len(first) == 1 and q.outstanding == 2, "max_entries bounds what one call returns"
        rest = q.poll()
        assert sorted(r.command_id for r in first + rest) == sorted(r.command_id for r in requests)
        assert all(r.done and r.response.succeeded for r in requests)
        assert q.poll() == [] and q.poll(max_entries=0) == [] and q.outstanding == 0


def test_a_capsule_is_posted_as_built(sim):
    """The seed posts the caller's bytes: an opcode rctb has no type for
    still goes out, and the target answers it (Invalid Command Opcode)."""
    fabric, _ = sim
    with nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 8, backend=fabric) as q:
        admin_connect(q)
        with nvmeof.HostBuffer(q.pd, 4096) as data:
            capsule = bytearray(p.identify(data, controller=True))  # a keyed SGL the target accepts
            capsule[0] = 0xC0  # a vendor-specific admin opcode
            capsule[2:4] = (0xBEEF).to_bytes(2, "little")  # the queue sets its own command id
            with pytest.raises(nvmeof.NVMeStatusError) as e:
                q.execute(bytes(capsule), data_owner=data, timeout=5.0)
        assert e.value.completion.status_code == 0x01 and e.value.completion.status_type == 0
        assert e.value.completion.command_id != 0xBEEF


def test_closing_the_owner_marks_its_buffers_closed(sim):
    fabric, _ = sim
    q = nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 8, backend=fabric)
    buf = nvmeof.HostBuffer(q.pd, 4096)
    q.close()
    assert buf.closed
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        kept = ctrl.allocate(4096)
        assert not kept.closed
    assert kept.closed, "Controller.close frees its buffers"
    kept.close()  # no effect, no error
