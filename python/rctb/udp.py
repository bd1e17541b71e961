"""The ``udp`` backend: rctb's RC engine as a RoCEv2 peer on ordinary UDP
sockets (port 4791), no RDMA device anywhere, in real time.

``Network(seed)`` holds the endpoints; ``add_endpoint(name, ip)`` binds one
(device ``udp-NAME``), which a ``RoCEv2Server`` (``deviceName=NAME``) or a
``RoCEv2Engine`` (``node=NAME``) then takes. RDMA CM is not carried, so the
NVMe-oF classes refuse this backend.
"""

from ._rctb import UdpNetwork as Network

__all__ = ["Network"]
