"""rctb from Python: the seeds' APIs on rctb's Rust.

- :mod:`rctb.nvmeof`: the ``nvmeof`` package's API (``Controller``,
  ``Namespace``, ``protocol``, ``rdma``), name for name.
- :mod:`rctb.sim`: a deterministic simulated fabric (seed, nodes, link
  faults, the NVMe-oF target model), with virtual time.
- :func:`run_scenario`, :func:`sweep`: the testbench's scenarios, reports as
  ``rctb run --json`` prints them.

Backends: ``verbs`` (the seeds' default; needs a wheel built with the cargo
feature ``verbs``), ``sim`` (a :class:`rctb.sim.Fabric`), ``udp`` (the RC
engine on a UDP socket; it carries no RDMA CM, so NVMe/RDMA cannot use it).
Pick one per call with ``backend=``, or for a block of unchanged seed code
with ``with rctb.use_backend(fabric): ...``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os

from . import _rctb

__version__ = _rctb.__version__
#: Whether this build has the verbs backend (cargo feature ``verbs``).
HAS_VERBS: bool = _rctb.HAS_VERBS

_BACKEND: contextvars.ContextVar = contextvars.ContextVar("rctb_backend", default="verbs")


def current_backend():
    """The backend seed-style calls use when they get no ``backend=``."""
    return _BACKEND.get()


@contextlib.contextmanager
def use_backend(backend):
    """Run a block with ``backend`` (a ``rctb.sim.Fabric``, ``"verbs"``) as
    the default of every ``Controller``/``RDMAQueue``/``RoCEv2Server``."""
    token = _BACKEND.set(_check_backend(backend))
    try:
        yield backend
    finally:
        _BACKEND.reset(token)


def _check_backend(backend):
    if isinstance(backend, (_rctb.Fabric, _rctb.UdpNetwork)) or backend in ("verbs", "udp"):
        return backend
    raise ValueError(
        "backend must be a rctb.sim.Fabric, a rctb.udp.Network, 'verbs' or 'udp' (got %r)" % (backend,)
    )


def run_scenario(path, seed=None) -> dict:
    """Run the scenario file at ``path`` on the simulator; the report as a
    dict, exactly as ``rctb run PATH --json`` prints it."""
    return json.loads(_rctb.run_scenario_json(os.fspath(path), seed))


def sweep(path, seeds, *, start=0, jobs=None) -> list:
    """Run seeds ``start .. start + seeds`` of a scenario; one dict per seed
    (``seed``, ``passed``, ``failures``, ``replay``)."""
    rows = _rctb.sweep_json(os.fspath(path), int(seeds), start=int(start), jobs=jobs)
    return [dict(seed=s, passed=p, failures=f, replay=r) for s, p, f, r in rows]


__all__ = ["HAS_VERBS", "current_backend", "run_scenario", "sweep", "use_backend"]
