"""The ``nvmeof`` package's API on rctb: ``import rctb.nvmeof as nvmeof``
and code written for ``nvmeof`` runs unchanged (on verbs by default, or on
the backend of ``rctb.use_backend(...)`` / ``backend=``)."""

from .. import __version__
from . import protocol, rdma
from .controller import Controller, Namespace
from .protocol import NVME_RDMA_PORT, Completion, ControllerInfo, NamespaceInfo, NVMeStatusError
from .rdma import HostBuffer, QueueFullError, RDMAQueue, RegisteredMemory, Request

__all__ = [
    "__version__",
    "Completion",
    "Controller",
    "ControllerInfo",
    "HostBuffer",
    "Namespace",
    "NamespaceInfo",
    "NVMeStatusError",
    "NVME_RDMA_PORT",
    "QueueFullError",
    "RDMAQueue",
    "RegisteredMemory",
    "Request",
]
