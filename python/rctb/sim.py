"""A deterministic simulated fabric for Python tests.

``Fabric(seed)`` builds an empty fabric; add hosts with ``add_node`` and peer
models with ``add_nvme_target``; links and their faults with ``set_link``,
``partition`` and ``heal`` (now or at a virtual time ``at=``). Time is
virtual (``fabric.now``, seconds) and advances only while something waits:
a 30 s timeout costs nothing. The same seed and the same calls replay the
same run exactly.
"""

from ._rctb import Fabric, NvmeTargetModel

__all__ = ["Fabric", "NvmeTargetModel"]
