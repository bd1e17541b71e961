"""Bad arguments to every entry point raise typed exceptions (never a Rust
panic), and resources are freed on error paths and on garbage collection."""

import gc
import random

import pytest

import rctb
import rctb.nvmeof as nvmeof
import rctb.sim
from rctb import _rctb
from rctb.rocev2 import RoCEv2Server, RoCEv2ServerCfg
from conftest import NQN, SEED, TARGET_IP, build

PanicException = type("never", (BaseException,), {})
try:
    from pyo3_runtime import PanicException  # noqa: F811 (present once a panic crossed)
except ImportError:
    pass

# AttributeError: the seed's own refusal of a buffer without addr/length/rkey.
EXPECTED = (AttributeError, TypeError, ValueError, OverflowError, OSError, RuntimeError, NotImplementedError)
BAD = [None, -1, -(2**63), 2**64, 2**200, 0, 1.5, float("nan"), float("inf"), "", "x" * 5000, "10.0.0.999",
       b"\xff" * 3, [], [1] * 7, (1, 2, 3), {}, object()]


def call_each(fn, arity, rng, rounds=60):
    """Calls fn with random bad arguments; only typed exceptions may escape."""
    for _ in range(rounds):
        args = [rng.choice(BAD) for _ in range(arity)]
        try:
            fn(*args)
        except EXPECTED:
            pass
        except BaseException as e:  # a panic is a BaseException, not an Exception
            assert not isinstance(e, PanicException) and type(e).__name__ != "PanicException", (fn, args, e)
            raise


def test_no_panic_from_bad_arguments():
    rng = random.Random(SEED)
    fabric, model = build()
    fabric.add_node("fpga", "10.0.0.3")
    ctrl = nvmeof.Controller(TARGET_IP, NQN, backend=fabric)
    inner = ctrl._ctrl
    buf_key = inner.allocate(4096)[0]
    queue = _rctb.NvmeQueue(fabric, TARGET_IP, 4420, 0, 4, 0)
    server = _rctb.RoceServer(fabric, "host", "10.0.0.3", 1, -1, 4096, 8)
    engine = _rctb.FpgaEngine(fabric, "fpga", "10.0.0.1")
    entry_points = [
        (_rctb.Fabric, 1), (fabric.add_node, 2), (fabric.add_nvme_target, 2), (fabric.set_link, 2),
        (fabric.partition, 2), (fabric.heal, 2), (fabric.run_until, 1),
        (model.namespace_data, 1), (model.write_namespace, 3), (model.drop_responses, 1), (model.set_response_delay, 1),
        (lambda *a: _rctb.NvmeController(*a[:3], port=a[3], host_id=a[4], host_nqn=a[5], queue_depth=a[6], timeout=a[7]), 8),
        (inner.identify_namespace, 1), (inner.allocate, 1), (inner.free_buffer, 1), (inner.buffer_write, 3),
        (inner.buffer_read, 3), (inner.read, 5), (inner.write, 5), (inner.flush, 1),
        (_rctb.NvmeQueue, 6), (queue.submit, 1), (queue.wait, 2), (queue.allocate, 1), (queue.buffer_read, 3),
        (queue.buffer_write, 3), (queue.free_buffer, 1),
        (_rctb.RoceServer, 7), (server.complete_connection, 6), (server.open_view, 1), (server.next_frame, 2),
        (server.frame_data, 1), (server.release, 1), (server.close_view, 1),
        (_rctb.FpgaEngine, 3), (engine.setup_connection, 9), (engine.start_stream, 3),
        (_rctb.encode_command, 4), (_rctb.cm_request, 3), (_rctb.cm_accept, 1), (_rctb.connect_data, 4),
        (_rctb.decode_completion, 1), (_rctb.detect_gid_index, 3), (_rctb.run_scenario_json, 2), (_rctb.sweep_json, 2),
        (nvmeof.protocol.rw_command, 5), (nvmeof.protocol.connect_data, 4), (nvmeof.protocol.identify, 1),
        (ctrl.namespace, 1), (ctrl.allocate, 1), (lambda *a: nvmeof.Controller(*a[:2], backend=fabric, queue_depth=a[2]), 3),
        (lambda *a: RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(*a), backend=fabric), 6),
    ]
    for fn, arity in entry_points:
        call_each(fn, arity, rng)
    # Everything still works after the abuse.
    ns = ctrl.namespace(1)
    with ctrl.allocate(512) as b:
        ns.read(b, 0)
    inner.free_buffer(buf_key)
    ctrl.close()


def settled(fabric):
    """Live objects once the target has seen every disconnect."""
    fabric.run_until(fabric.now + 0.1)
    return fabric.live_resources()


def test_resources_freed_on_close_error_and_gc():
    fabric, _ = build()
    baseline = settled(fabric)
    with pytest.raises(nvmeof.NVMeStatusError) as e:  # Connect: invalid parameters (the NQN)
        nvmeof.Controller(TARGET_IP, "nqn.2024-01.io.rctb:nosuch", backend=fabric, timeout=1.0)
    assert (e.value.completion.status_type, e.value.completion.status_code) == (1, 0x82)
    assert settled(fabric) == baseline, "a refused connect leaked"
    ctrl = nvmeof.Controller(TARGET_IP, NQN, backend=fabric)
    bufs = [ctrl.allocate(4096) for _ in range(3)]
    with_bufs = settled(fabric)["mrs"]
    del bufs
    gc.collect()
    assert settled(fabric)["mrs"] == with_bufs - 3, "collected HostBuffers kept their MRs"
    assert settled(fabric)["mrs"] > baseline["mrs"]
    del ctrl
    gc.collect()
    assert settled(fabric) == baseline, "a collected controller leaked"
    q = nvmeof.RDMAQueue(TARGET_IP, 4420, 0, 8, backend=fabric)
    nvmeof.HostBuffer(q.pd, 64)
    q.close()
    assert settled(fabric) == baseline, "a closed queue leaked"
    server = RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip="10.0.0.2", deviceName="host"), backend=fabric)
    assert settled(fabric) != baseline
    del server
    gc.collect()
    assert settled(fabric) == baseline, "a collected RoCEv2Server leaked"
