"""NVMe/RDMA queue transport (``nvmeof.rdma``): ``RDMAQueue``, ``Request``,
``HostBuffer``, ``QueueFullError``, on rctb's initiator queue.
"""

from __future__ import annotations

import ipaddress
import socket
import weakref
from dataclasses import dataclass
from typing import Optional

from .. import _rctb
from .protocol import Completion

QueueFullError = _rctb.QueueFullError
QueueFullError.__module__ = "rctb.nvmeof.rdma"


def _ipv4(host, resolve: bool) -> str:
    """``host`` for rctb, which connects over IPv4: with ``resolve`` (verbs:
    the seed takes "hostname or IP address") a name is resolved to its first
    IPv4 address; a simulated fabric knows addresses only, so it gets
    ``host`` as given (a name is then its error)."""
    host = str(host)
    if not resolve:
        return host
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError, UnicodeError) as e:
        raise ValueError("host %r: not an IPv4 address, and it does not resolve to one (%s)" % (host, e)) from None


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
        # Closing the owner frees the region: it marks the buffer closed.
        pd._buffers.add(self)

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

    def view(self):
        """The registered memory itself, without a copy: an object with the
        buffer protocol, for ``memoryview(buf.view())`` or
        ``numpy.frombuffer(buf.view(), ...)``. What the target writes into
        the buffer is seen through it at once. After ``close()`` the memory
        stays alive while a view of it does, but receives nothing more.
        Needs the verbs backend (elsewhere ``NotImplementedError``: use
        ``read()``, which copies)."""
        self._live()
        return self._ctrl.buffer_view(self._key)

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


def _byte_view(tensor) -> memoryview:
    """A flat byte view of ``tensor``: any C-contiguous buffer-protocol
    object (numpy array, bytearray, mmap, array.array), or an object with
    ``numpy()`` (a CPU torch tensor)."""
    try:
        view = memoryview(tensor)
    except TypeError:
        to_numpy = getattr(tensor, "numpy", None)
        if to_numpy is None:
            raise TypeError("tensor: %s does not support the buffer protocol (nor has numpy())"
                            % type(tensor).__name__) from None
        view = memoryview(to_numpy())
    if not view.c_contiguous:
        raise ValueError("tensor: must be C-contiguous (copy it with numpy.ascontiguousarray first)")
    if view.nbytes == 0:
        raise ValueError("tensor: buffer length must be positive")
    return view.cast("B")


class RegisteredMemory(HostBuffer):
    """A caller's buffer registered for I/O (``Controller.register``): it
    holds the buffer (the "MR retains the allocation") and mirrors it in a
    region rctb registered, of the same length. ``Namespace.write`` copies
    the caller's bytes into the region first, ``Namespace.read`` copies the
    region back into the caller's buffer when the read is done, so after
    either call the buffer holds what the device has. Close it before the
    controller."""

    def __init__(self, pd, tensor):
        view = _byte_view(tensor)
        super().__init__(pd, view.nbytes)
        self.tensor = tensor
        self._view = view

    def _push(self, offset: int, length: int) -> None:
        self._ctrl.buffer_write(self._key, bytes(self._view[offset:offset + length]), offset)

    def _pull(self, offset: int, length: int) -> None:
        if self._view.readonly:
            raise ValueError("tensor: read-only, so it cannot take a read")
        self._view[offset:offset + length] = self._ctrl.buffer_read(self._key, length, offset)

    def close(self) -> None:
        """Deregister the region and let go of the caller's buffer (again: no effect)."""
        super().close()
        view, self._view = getattr(self, "_view", None), None
        if view is not None:
            view.release()


class _ProtectionDomain:
    """What ``HostBuffer(pd, ...)`` needs of a queue's protection domain."""

    def __init__(self, controller, buffers=None):
        self._controller = controller
        self._buffers = weakref.WeakSet() if buffers is None else buffers

    def _owner_closed(self) -> None:
        """The owner freed every region: its buffers read as closed."""
        for buffer in list(self._buffers):
            buffer._closed = True


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
        self._q = _rctb.NvmeQueue(fabric, _ipv4(host, fabric is None), self.port, self.qid, self.depth,
                                  int(controller_id) if self.qid else 0, None if source is None else str(source))
        self._closed = False
        self.pd = _ProtectionDomain(self._q)
        self._pending = {}
        # Finished requests not yet returned by poll (max_entries bounds a call).
        self._finished = []
        capacity = self._q.capacity
        if capacity < self.depth - 1:
            self.close()
            raise RuntimeError("target receive depth %d is smaller than host send depth %d" % (capacity, self.depth - 1))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def outstanding(self) -> int:
        """Commands submitted and not yet returned by ``poll`` or ``execute``
        (a finished one that ``poll``'s ``max_entries`` held back counts, as
        an unprocessed completion does in the seed)."""
        return len(self._pending) + len(self._finished)

    def submit(self, command: bytes, data_owner=None) -> Request:
        """Submit a 64-byte capsule without waiting; the queue assigns its ID."""
        if self._closed:
            raise RuntimeError("NVMe/RDMA queue is closed")
        command = bytes(command)
        if len(command) != 64:
            raise ValueError("an NVMe command capsule must be exactly 64 bytes")
        if self.outstanding >= self.depth - 1:
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
        done = (self._finish(cid, cqe) for cid, cqe in self._q.poll())
        self._finished.extend(r for r in done if r is not None)
        n = len(self._finished) if max_entries is None else max(0, int(max_entries))
        out, self._finished = self._finished[:n], self._finished[n:]
        return out

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
            self.pd._owner_closed()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["HostBuffer", "QueueFullError", "RDMAQueue", "RegisteredMemory", "Request"]
