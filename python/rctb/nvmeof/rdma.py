"""NVMe/RDMA queue transport (``nvmeof.rdma``): ``RDMAQueue``, ``Request``,
``HostBuffer``, ``QueueFullError``, on rctb's initiator queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import _rctb
from .protocol import Completion

QueueFullError = _rctb.QueueFullError
QueueFullError.__module__ = "rctb.nvmeof.rdma"


@dataclass
class Request:
    """An asynchronously submitted command: done once both its capsule SEND
    and its response completed."""

    command_id: int
    data_owner: object = None
    send_complete: bool = False
    response: Optional[Completion] = None
    done: bool = False


class HostBuffer:
    """Host memory registered for NVMe/RDMA in a controller's protection
    domain. A context manager; close it before the controller."""

    def __init__(self, pd, length: int, access=None):
        length = int(length)
        if length <= 0:
            raise ValueError("buffer length must be positive")
        self._ctrl = pd._controller
        self.length = length
        self.access = access
        self._key, self.addr, self._lkey, self._rkey = self._ctrl.allocate(length)
        self._closed = False

    @property
    def rkey(self) -> int:
        return self._rkey

    @property
    def lkey(self) -> int:
        return self._lkey

    @property
    def closed(self) -> bool:
        return self._closed

    def _live(self):
        if self._closed:
            raise ValueError("the buffer is closed")

    def write(self, data: bytes, offset: int = 0) -> None:
        """Copy ``data`` into the buffer at byte ``offset``."""
        self._live()
        data = bytes(data)
        offset = int(offset)
        if offset < 0 or len(data) > self.length - offset:
            raise ValueError("write exceeds the host buffer")
        self._ctrl.buffer_write(self._key, data, offset)

    def read(self, length=None, offset: int = 0) -> bytes:
        """Copy ``length`` bytes (default: to the end) from ``offset``."""
        self._live()
        offset = int(offset)
        length = self.length - offset if length is None else int(length)
        if offset < 0 or length < 0 or length > self.length - offset:
            raise ValueError("read exceeds the host buffer")
        return self._ctrl.buffer_read(self._key, length, offset)

    def close(self) -> None:
        """Deregister the memory region (again: no effect)."""
        if not self._closed:
            self._closed = True
            self._ctrl.free_buffer(self._key)

    def __len__(self) -> int:
        return self.length

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _ProtectionDomain:
    """What ``HostBuffer(pd, ...)`` needs of a queue's protection domain."""

    def __init__(self, controller):
        self._controller = controller


class RDMAQueue:
    """One connected NVMe/RDMA queue pair (rctb's ``Queue``): CM connect
    with the NVMe/RDMA private data, capsules submitted and polled, at most
    ``depth - 1`` outstanding. ``backend=`` (an addition) picks the backend.
    A context manager."""

    def __init__(self, host: str, port: int, qid: int, depth: int, controller_id: int = 0, source=None, *, backend=None):
        from .. import _check_backend, current_backend
        from .protocol import rdma_cm_request

        self.host = host
        self.port = int(port)
        self.source = source
        self.qid = int(qid)
        self.depth = int(depth)
        rdma_cm_request(self.qid, self.depth, controller_id)
        self.backend = _check_backend(current_backend() if backend is None else backend)
        if self.backend == "udp" or isinstance(self.backend, _rctb.UdpNetwork):
            raise ValueError("backend 'udp' carries no RDMA CM, which NVMe/RDMA connects with; use a rctb.sim.Fabric or verbs")
        fabric = self.backend if isinstance(self.backend, _rctb.Fabric) else None
        self._closed = True
        self._q = _rctb.NvmeQueue(fabric, str(host), self.port, self.qid, self.depth,
                                  int(controller_id) if self.qid else 0, None if source is None else str(source))
        self._closed = False
        self.pd = _ProtectionDomain(self._q)
        self._pending = {}

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def submit(self, command: bytes, data_owner=None) -> Request:
        """Submit a 64-byte capsule without waiting; the queue assigns its ID."""
        if self._closed:
            raise RuntimeError("NVMe/RDMA queue is closed")
        command = bytes(command)
        if len(command) != 64:
            raise ValueError("an NVMe command capsule must be exactly 64 bytes")
        if len(self._pending) >= self.depth - 1:
            raise QueueFullError("NVMe submission queue is full")
        cid = self._q.submit(command)
        request = Request(cid, data_owner)
        self._pending[cid] = request
        return request

    def _finish(self, cid, cqe):
        request = self._pending.pop(cid, None)
        if request is None:
            return None
        request.send_complete = True
        request.response = None if cqe is None else Completion(*cqe)
        request.done = True
        return request

    def poll(self, max_entries=None):
        """Newly completed requests (capsule SEND and response both done); never blocks."""
        if self._closed:
            return []
        done = [self._finish(cid, cqe) for cid, cqe in self._q.poll()]
        done = [r for r in done if r is not None]
        return done if max_entries is None else done[: int(max_entries)]

    def execute(self, command: bytes, data_owner=None, timeout: float = 30.0):
        """Submit and wait; the Completion, NVMeStatusError, or TimeoutError."""
        request = self.submit(command, data_owner)
        cqe = self._q.wait(request.command_id, float(timeout))
        if cqe is None and request.command_id in self._pending:
            raise TimeoutError("NVMe command timed out")
        self._finish(request.command_id, cqe)
        if request.response is None:
            raise RuntimeError("NVMe request completed without a response")
        request.response.raise_for_status()
        return request.response

    def close(self) -> None:
        """Disconnect and free every resource of the queue (again: no effect)."""
        if not self._closed:
            self._closed = True
            self._q.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["HostBuffer", "QueueFullError", "RDMAQueue", "Request"]
