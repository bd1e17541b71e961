"""rctb.nvmeof.Controller and Namespace, unchanged seed-style code, on the
simulated NVMe-oF target: data, MDTS splitting, statuses, timeouts, the GIL
and replay from the seed."""

import os
import threading

import pytest

import rctb
import rctb.nvmeof as nvmeof
from conftest import NQN, SEED, TARGET_IP, build


def pattern(n, salt=0):
    return bytes(((i * 131) ^ (i >> 9) ^ salt) & 0xFF for i in range(n))


def test_identify_write_flush_read_back(sim):
    fabric, model = sim
    with rctb.use_backend(fabric):
        with nvmeof.Controller(TARGET_IP, NQN, queue_depth=16) as ctrl:
            assert ctrl.info.namespace_count == 2
            assert (ctrl.capabilities & 0xFFFF) + 1 == 128 and ctrl.controller_page_size == 4096
            assert ctrl.info.sgls & (1 << 2)
            assert isinstance(ctrl.info, nvmeof.ControllerInfo)
            ns = ctrl.namespace(2)
            assert (ns.nsid, ns.lba_size, ns.info.size_lbas) == (2, 4096, 1024)
            data = pattern(8 * 4096)
            with ctrl.allocate(len(data)) as buf:
                buf.write(data)
                ns.write(buf, 10)
                ns.flush()
            assert model.namespace_data(2)[10 * 4096 : 18 * 4096] == data
            with ctrl.allocate(4 * 4096) as back:
                ns.read(back, 12, 2, buffer_offset=4096)
                assert back.read(8192, 4096) == data[2 * 4096 : 4 * 4096]
                assert back.read(4096) == bytes(4096)
    stats = model.stats()
    assert stats["flushes"] == 1 and stats["errors"] == 0


def test_known_data_is_read_as_written_by_the_target(sim):
    fabric, model = sim
    model.write_namespace(1, 512 * 100, pattern(4096, 7))
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        ns = ctrl.identify_namespace(1)
        buf = ctrl.allocate(4096)
        ns.read(buf, 100)
        assert buf.read() == pattern(4096, 7)
        buf.close()
        assert buf.closed


def test_transfers_beyond_mdts_are_split():
    fabric, model = build(mdts=1)  # 8 KiB per command
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        assert ctrl.max_transfer_bytes == 8192
        ns = ctrl.namespace(1)
        data = pattern(64 * 1024, 3)
        with ctrl.allocate(len(data)) as buf:
            buf.write(data)
            ns.write(buf, 0)
            before = model.stats()["writes"]
            assert before == 8
            buf.write(bytes(len(data)))
            ns.read(buf, 0)
            assert buf.read() == data
    assert model.stats()["reads"] == 8


def test_status_errors_are_nvme_status_errors():
    fabric, model = build(namespaces=[(1, 512, 64), (3, 512, 64)])
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        assert ctrl.info.namespace_count == 3
        with pytest.raises(nvmeof.NVMeStatusError) as e:
            ctrl.namespace(2)
        assert isinstance(e.value, OSError)
        assert e.value.completion.status_code == 0x0B and e.value.completion.status_type == 0
        assert not e.value.completion.succeeded
        with pytest.raises(ValueError, match="outside the controller's range"):
            ctrl.namespace(4)


def test_argument_refusals_are_the_seeds(sim):
    fabric, _ = sim
    with pytest.raises(ValueError, match="queue_depth must be between 2 and 256"):
        nvmeof.Controller(TARGET_IP, NQN, queue_depth=1, backend=fabric)
    with pytest.raises(NotImplementedError, match="keep-alive"):
        nvmeof.Controller(TARGET_IP, NQN, keep_alive_ms=1000, backend=fabric)
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        ns = ctrl.namespace(2)
        with ctrl.allocate(4096 + 1) as odd:
            with pytest.raises(ValueError, match="not a whole number of LBAs"):
                ns.read(odd, 0)
        with ctrl.allocate(4096) as buf:
            with pytest.raises(ValueError, match="outside the namespace"):
                ns.read(buf, 1024)
            with pytest.raises(ValueError, match="outside the registered buffer"):
                ns.read(buf, 0, 2)


def test_a_lost_response_is_a_timeout_in_virtual_time(sim):
    fabric, model = sim
    with nvmeof.Controller(TARGET_IP, NQN, timeout=5.0, backend=fabric) as ctrl:
        ns = ctrl.namespace(1)
        model.drop_responses(1)
        start = fabric.now
        with pytest.raises(TimeoutError):
            ns.flush()
        assert fabric.now - start >= 5.0
    assert model.stats()["dropped_responses"] == 1


def test_a_target_crash_at_a_virtual_time_fails_io(sim):
    fabric, model = sim
    with nvmeof.Controller(TARGET_IP, NQN, timeout=2.0, backend=fabric) as ctrl:
        ns = ctrl.namespace(1)
        model.crash(at=fabric.now + 0.001)
        fabric.run_until(fabric.now + 0.01)
        with ctrl.allocate(512) as buf, pytest.raises(OSError):
            ns.read(buf, 0)
    assert model.stats()["crashes"] == 1


def test_an_unreachable_target_is_a_connection_error():
    fabric, _ = build()
    with pytest.raises(ConnectionError):
        nvmeof.Controller("10.0.0.9", NQN, timeout=1.0, backend=fabric)


def test_the_gil_is_released_during_a_blocking_read(sim):
    """The engine is held; a read in another thread waits for it. If the
    read held the GIL, this thread could not run to see it wait and
    release the engine, and the read would never finish."""
    fabric, _ = sim
    ctrl = nvmeof.Controller(TARGET_IP, NQN, backend=fabric)
    ns = ctrl.namespace(1)
    buf = ctrl.allocate(4096)
    done = threading.Event()
    errors = []

    def reader():
        try:
            ns.read(buf, 0)
        except Exception as e:  # reported below
            errors.append(e)
        done.set()

    gate = fabric.pause()
    t = threading.Thread(target=reader)
    t.start()
    spins = 0
    while fabric.pending_calls == 0:  # runs only while the reader waits without the GIL
        spins += 1
    gate.release()
    t.join(60)
    assert done.is_set() and not errors
    assert fabric.pending_calls == 0
    buf.close()
    ctrl.close()


def run_once(seed):
    fabric, model = build(seed)
    fabric.set_link("host", "target", latency=2e-6, drop=0.02, reorder=0.02, reorder_window=5e-6)
    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric, host_id="12345678-1234-5678-1234-567812345678") as ctrl:
        ns = ctrl.namespace(1)
        with ctrl.allocate(32 * 1024) as buf:
            for i in range(4):
                buf.write(pattern(32 * 1024, i))
                ns.write(buf, 64 * i)
            ns.read(buf, 64)
            data = buf.read()
    return fabric.now_ns, model.stats(), fabric.stats(), data


def test_a_seed_replays_the_same_run():
    a, b = run_once(SEED), run_once(SEED)
    assert a == b, "seed %d did not replay: RCTB_SEED=%d" % (SEED, SEED)
    assert a[3] == pattern(32 * 1024, 1)


def test_udp_and_missing_verbs_are_clear_errors():
    with pytest.raises(ValueError, match="udp"):
        nvmeof.Controller(TARGET_IP, NQN, backend="udp")
    with pytest.raises(ValueError, match="udp"):
        nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 32, backend="udp")
    if not rctb.HAS_VERBS:
        with pytest.raises(RuntimeError, match="lacks the verbs backend"):
            nvmeof.Controller(TARGET_IP, NQN)
        with pytest.raises(RuntimeError, match="lacks the verbs backend"):
            nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 32)
    elif not (os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband")):
        # a verbs build on a machine without RDMA devices (the build hosts)
        with pytest.raises(OSError, match="no RDMA device"):
            nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 32)


def test_any_metadata_is_refused_as_the_seed_refuses_it(sim):
    """The seed moves data blocks only: a namespace with metadata (separate
    or extended LBA) is NotImplementedError. The model has no metadata
    formats, so Identify's answer is stood in for at the binding."""
    fabric, _ = sim

    class ExtendedLba:
        def __init__(self, real):
            self.real = real

        def identify_namespace(self, nsid):
            return (1024, 1024, 1024, 4096, 8)  # size, capacity, used, LBA size, 8 bytes of metadata

        def __getattr__(self, name):
            return getattr(self.real, name)

    with nvmeof.Controller(TARGET_IP, NQN, backend=fabric) as ctrl:
        real = ctrl._ctrl
        ctrl._ctrl = ExtendedLba(real)
        try:
            with pytest.raises(NotImplementedError, match="separate metadata"):
                ctrl.namespace(1)
        finally:
            ctrl._ctrl = real
        assert ctrl.namespace(1).info.metadata_size == 0
