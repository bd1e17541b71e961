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
            raise ValueError("length must be positive")
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
        if offset < 0 or offset + len(data) > self.length:
            raise ValueError("data does not fit in the buffer at this offset")
        self._ctrl.buffer_write(self._key, data, offset)

    def read(self, length=None, offset: int = 0) -> bytes:
        """Copy ``length`` bytes (default: to the end) from ``offset``."""
        self._live()
        offset = int(offset)
        if offset < 0 or offset > self.length:
            raise ValueError("offset is outside the buffer")
        length = self.length - offset if length is None else int(length)
        if length < 0 or offset + length > self.length:
            raise ValueError("range is outside the buffer")
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
    """One NVMe/RDMA queue pair. Not yet available on rctb: the
    ``Controller`` runs rctb's own queues (see the report of issue 16)."""

    def __init__(self, host, port, qid, depth, controller_id=0, source=None, *, backend=None):
        raise NotImplementedError(
            "rctb.nvmeof.RDMAQueue is not implemented yet; use Controller/Namespace"
        )


__all__ = ["HostBuffer", "QueueFullError", "RDMAQueue", "Request"]
