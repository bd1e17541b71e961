"""``Controller`` and ``Namespace`` as the ``nvmeof`` package has them, on
rctb's initiator (``rctb_core::nvmeof::Controller``) and any backend.

Argument checks and their messages are the ``nvmeof`` package's; the
bring-up, MDTS splitting and transfers are rctb's. ``backend=`` (an
addition) picks the backend; without it the one of
``rctb.use_backend(...)`` is used, by default verbs as in the seed.
"""

from __future__ import annotations

import functools
import uuid
import weakref

from .. import _rctb, current_backend, _check_backend
from . import protocol as p
from .rdma import HostBuffer, RegisteredMemory, _ipv4, _ProtectionDomain


def _translate(fn):
    """NVMe statuses from rctb as ``NVMeStatusError(Completion)``."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _rctb.StatusFailure as e:
            result, status_field, _text = e.args
            raise p.NVMeStatusError(p.Completion(result, 0, 0, 0, status_field)) from e

    return call


class _Queue:
    """The seed's ``controller.admin`` / ``controller.io``: its ``pd``."""

    def __init__(self, controller, qid, depth, buffers):
        self.pd = _ProtectionDomain(controller, buffers)
        self.qid = qid
        self.depth = depth


class Controller:
    """A connected NVMe-oF/RDMA controller: admin queue, bring-up, Identify,
    one I/O queue. A context manager; close it after its buffers."""

    @_translate
    def __init__(self, host: str, subsystem_nqn: str, *, port=p.NVME_RDMA_PORT, host_id=None, host_nqn=None,
                 queue_depth=128, keep_alive_ms=0, timeout=30.0, source=None, backend=None):
        self.host = host
        self.port = int(port)
        self.source = source
        self.subsystem_nqn = subsystem_nqn
        self.host_id = uuid.UUID(str(host_id)) if host_id else uuid.uuid4()
        self.host_nqn = host_nqn or "nqn.2014-08.org.nvmexpress:uuid:%s" % self.host_id
        self.keep_alive_ms = int(keep_alive_ms)
        if self.keep_alive_ms != 0:
            raise NotImplementedError("non-zero keep-alive requires a background command worker")
        self.timeout = float(timeout)
        self.backend = _check_backend(current_backend() if backend is None else backend)
        self._ctrl = None
        self.controller_id = self.capabilities = self.info = self.max_transfer_bytes = None
        self.admin = None
        self.io = None
        depth = int(queue_depth)
        if depth < 2 or depth > p.MAX_QUEUE_DEPTH:
            raise ValueError("queue_depth must be between 2 and 256")
        if self.backend == "udp" or isinstance(self.backend, _rctb.UdpNetwork):
            raise ValueError(
                "backend 'udp' carries no RDMA CM, which NVMe/RDMA connects with; use a rctb.sim.Fabric or verbs"
            )
        fabric = self.backend if isinstance(self.backend, _rctb.Fabric) else None
        self._ctrl = _rctb.NvmeController(
            fabric, _ipv4(host, fabric is None), str(subsystem_nqn), port=self.port, host_id=self.host_id.bytes,
            host_nqn=str(self.host_nqn), queue_depth=depth, timeout=self.timeout,
            source=None if source is None else str(source),
        )
        self.controller_id = self._ctrl.cntlid
        self.capabilities = self._ctrl.capabilities
        self.info = p.ControllerInfo(**self._ctrl.info())
        self.controller_page_size = self._ctrl.page_size
        self.max_transfer_bytes = self._ctrl.max_transfer
        buffers = weakref.WeakSet()  # both queues' buffers: one PD in rctb
        self.admin = _Queue(self._ctrl, 0, p.ADMIN_QUEUE_DEPTH, buffers)
        self.io = _Queue(self._ctrl, 1, self._ctrl.queue_depth, buffers)

    @classmethod
    def connect(cls, host: str, subsystem_nqn: str, **kwargs) -> "Controller":
        """Connect to ``subsystem_nqn`` at ``host``."""
        return cls(host, subsystem_nqn, **kwargs)

    @_translate
    def identify_namespace(self, nsid: int) -> "Namespace":
        """Identify ``nsid``; namespaces with separate metadata are refused."""
        nsid = int(nsid)
        if nsid <= 0 or nsid > self.info.namespace_count:
            raise ValueError("namespace ID is outside the controller's range")
        self._live()
        try:
            size, cap, used, lba_size, metadata = self._ctrl.identify_namespace(nsid)
        except RuntimeError as e:
            if "separate metadata" in str(e):
                raise NotImplementedError("namespaces with separate metadata are unsupported") from e
            raise
        if metadata:
            # The seed transfers data blocks only: any metadata (separate or
            # extended LBA) is refused, as it refuses it.
            raise NotImplementedError("namespaces with separate metadata are unsupported")
        info = p.NamespaceInfo(nsid, size, cap, used, lba_size, metadata)
        return Namespace(self, info)

    namespace = identify_namespace

    def allocate(self, length: int) -> HostBuffer:
        """Register ``length`` bytes of host memory for direct I/O."""
        self._live()
        return HostBuffer(self.io.pd, length)

    def register(self, tensor) -> RegisteredMemory:
        """Register a caller's host buffer (any C-contiguous buffer-protocol
        object, or a CPU tensor with ``numpy()``) for ``Namespace.read`` and
        ``write``. The returned MR retains it; close it before the
        controller. rctb mirrors it in a region of its own: see
        ``RegisteredMemory``."""
        self._live()
        return RegisteredMemory(self.io.pd, tensor)

    def register_gpu(self, tensor):
        raise NotImplementedError("GPU memory is not available from rctb's Python package")

    def _live(self):
        if self._ctrl is None:
            raise ValueError("the controller is closed")

    def close(self) -> None:
        """Close the queues and free their RDMA resources (again: no effect)."""
        if self._ctrl is not None:
            ctrl, self._ctrl = self._ctrl, None
            pd = self.io.pd
            self.io = self.admin = None
            ctrl.close()
            pd._owner_closed()  # rctb freed the buffers with the controller

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Namespace:
    """An identified namespace on its controller's I/O queue."""

    def __init__(self, controller: Controller, info: p.NamespaceInfo):
        self.controller = controller
        self.info = info
        self.nsid = info.nsid
        self.lba_size = info.lba_size

    @_translate
    def _transfer(self, write: bool, buffer, slba, blocks, buffer_offset) -> None:
        slba = int(slba)
        buffer_offset = int(buffer_offset)
        available = int(buffer.length) - buffer_offset
        if blocks is None:
            if available % self.lba_size:
                raise ValueError("buffer length is not a whole number of LBAs")
            blocks = available // self.lba_size
        blocks = int(blocks)
        if blocks <= 0 or slba < 0 or slba + blocks > self.info.size_lbas:
            raise ValueError("I/O range is outside the namespace")
        total = blocks * self.lba_size
        if buffer_offset < 0 or total > available:
            raise ValueError("I/O range is outside the registered buffer")
        if not isinstance(buffer, HostBuffer) or buffer._ctrl is not self.controller._ctrl:
            raise ValueError("buffer must be a HostBuffer of this controller (Controller.allocate)")
        if buffer.closed:
            raise ValueError("the buffer is closed")
        if self.controller.max_transfer_bytes // self.lba_size == 0:
            raise RuntimeError("namespace LBA size exceeds the controller transfer limit")
        self.controller._live()
        mirrored = isinstance(buffer, RegisteredMemory)
        if mirrored and not write and buffer._view.readonly:
            raise ValueError("tensor: read-only, so it cannot take a read")
        if mirrored and write:
            buffer._push(buffer_offset, total)
        op = self.controller._ctrl.write if write else self.controller._ctrl.read
        op(self.nsid, slba, buffer._key, buffer_offset, total)
        if mirrored and not write:
            buffer._pull(buffer_offset, total)

    def read(self, buffer, slba: int, blocks=None, *, buffer_offset: int = 0) -> None:
        """Read LBAs into a registered buffer (split at MDTS)."""
        self._transfer(False, buffer, slba, blocks, buffer_offset)

    def write(self, buffer, slba: int, blocks=None, *, buffer_offset: int = 0) -> None:
        """Write LBAs from a registered buffer (split at MDTS)."""
        self._transfer(True, buffer, slba, blocks, buffer_offset)

    @_translate
    def flush(self) -> None:
        """Commit volatile writes of this namespace."""
        self.controller._live()
        self.controller._ctrl.flush(self.nsid)
