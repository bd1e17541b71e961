"""pyrogue's ``RoCEv2Server`` surface (``pyrogue.protocols``) and the surf
engine's ``setupConnection`` on rctb: the receive server is
``rctb_core::roce::RoceServer``, the FPGA is ``rctb_sim``'s surf engine model.

The three-step bring-up a Root does::

    server = RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=fpga_ip, deviceName="host"), backend=fabric)
    engine = RoCEv2Engine(backend=fabric, node="fpga", hostIp=host_ip)
    tc = RoCEv2TransportCfg()
    fpga = engine.setupConnection(**server.getHostParams()._asdict(), pmtu=tc.pmtu,
                                  minRnrTimer=tc.minRnrTimer, rnrRetry=tc.rnrRetry, retryCount=tc.retryCount)
    server.completeConnection(fpga.fpgaQpn, pmtu=tc.pmtu, minRnrTimer=tc.minRnrTimer,
                              rnrRetry=tc.rnrRetry, retryCount=tc.retryCount, fpgaLkey=fpga.fpgaLkey)

Frames come from ``server.getChannel(n)`` (or ``server.stream``, every
channel); each is a handle on a receive slot, released explicitly with
``frame.release()`` (or a ``with`` block): until then its slot is not
re-posted, so a consumer that holds frames makes the host answer RNR NAKs.
On the simulator (``backend=`` a ``rctb.sim.Fabric``, ``deviceName`` a node
name) a wait's timeout is virtual time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, Optional

from . import _check_backend, _rctb, current_backend

#: The C++ server's default maximum payload (``maxPayload=None``).
DEFAULT_MAX_PAYLOAD = 9000
#: The C++ server's default receive queue depth (``rxQueueDepth=None``).
DEFAULT_RX_QUEUE_DEPTH = 256


class RoCEv2Mtu(enum.IntEnum):
    """Path MTU codes (libibverbs ``ibv_mtu``)."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5


class RoCEv2RnrTimer(enum.IntEnum):
    """Min RNR NAK timer codes (IBA Vol 1 table 45); names give the wait in ms."""

    MS_655_36 = 0
    MS_0_01 = 1
    MS_0_02 = 2
    MS_0_03 = 3
    MS_0_04 = 4
    MS_0_06 = 5
    MS_0_08 = 6
    MS_0_12 = 7
    MS_0_16 = 8
    MS_0_24 = 9
    MS_0_32 = 10
    MS_0_48 = 11
    MS_0_64 = 12
    MS_0_96 = 13
    MS_1_28 = 14
    MS_1_92 = 15
    MS_2_56 = 16
    MS_3_84 = 17
    MS_5_12 = 18
    MS_7_68 = 19
    MS_10_24 = 20
    MS_15_36 = 21
    MS_20_48 = 22
    MS_30_72 = 23
    MS_40_96 = 24
    MS_61_44 = 25
    MS_81_92 = 26
    MS_122_88 = 27
    MS_163_84 = 28
    MS_245_76 = 29
    MS_327_68 = 30
    MS_491_52 = 31


def _check_transport(pmtu, minRnrTimer, rnrRetry, retryCount):
    for name, value, lo, hi in (
        ("pmtu", pmtu, 1, 5),
        ("minRnrTimer", minRnrTimer, 0, 31),
        ("rnrRetry", rnrRetry, 0, 7),
        ("retryCount", retryCount, 0, 7),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("%s must be an int, got %r" % (name, value))
        if not lo <= value <= hi:
            raise ValueError("%s must be %d..%d, got %d" % (name, lo, hi, value))


@dataclass
class RoCEv2ServerCfg:
    """Host-NIC bring-up configuration of a ``RoCEv2Server``."""

    ip: str
    deviceName: str
    ibPort: int = 1
    gidIndex: int = -1
    maxPayload: Optional[int] = 4096
    rxQueueDepth: Optional[int] = None


@dataclass
class RoCEv2TransportCfg:
    """The transport knobs shared by ``setupConnection`` and
    ``completeConnection``; checked at construction."""

    pmtu: int = RoCEv2Mtu.MTU_4096
    minRnrTimer: int = 12
    rnrRetry: int = 7
    retryCount: int = 3

    def __post_init__(self):
        _check_transport(self.pmtu, self.minRnrTimer, self.rnrRetry, self.retryCount)


class RoCEv2HostParams(NamedTuple):
    """What the FPGA engine's ``setupConnection`` needs from the host."""

    hostQpn: int
    hostRqPsn: int
    hostSqPsn: int
    mrAddr: int
    mrLen: int


class RoCEv2FpgaParams(NamedTuple):
    """What the engine's ``setupConnection`` returns."""

    fpgaQpn: int
    fpgaLkey: int
    pdHandler: int
    fpgaRkey: int


class _FrameCopy(bytes):
    """A frame's bytes where no zero-copy view exists (the simulator, udp):
    ``bytes`` with the buffer protocol, and no views to wait for."""

    exports = 0
    readonly = True

    def tobytes(self) -> bytes:
        return bytes(self)


class RoCEv2Frame:
    """One received frame: a receive slot held until ``release()``."""

    def __init__(self, server, fid, channel, ring, size):
        self._server, self._id = server, fid
        self.channel, self.ringPosition, self.size = channel, ring, size
        self._released = False
        self._mrview = None

    def view(self):
        """The payload in its receive slot, without a copy: an object with
        the (read-only) buffer protocol, for ``memoryview(frame.view())`` or
        ``numpy.frombuffer(frame.view(), ...)``. ``release()`` refuses
        (``BufferError``) while a memoryview or array of it is alive, since
        the slot would then be filled again under it. On the simulator and
        udp, whose memory belongs to the engine thread, it is a read-only
        copy made once: a held frame cannot change, so code written against
        ``view()`` reads the same there and runs unchanged."""
        if self._released:
            raise ValueError("the frame was released")
        if self._mrview is None:
            if self._server._h.zero_copy:
                self._mrview = self._server._h.frame_view(self._id)
            else:
                self._mrview = _FrameCopy(self.getData())
        return self._mrview

    def getData(self) -> bytes:
        """The frame's payload (a copy)."""
        if self._released:
            raise ValueError("the frame was released")
        return self._server._h.frame_data(self._id)

    @property
    def data(self) -> bytes:
        return self.getData()

    def prbsMismatch(self) -> Optional[int]:
        """``None`` if the payload is the FPGA model's PRBS for this channel
        and ring position, else the first wrong byte offset."""
        if self._released:
            raise ValueError("the frame was released")
        return self._server._h.frame_prbs_mismatch(self._id)

    def release(self) -> None:
        """Give the slot back to the receive queue (again: no effect)."""
        if not self._released:
            if self._mrview is not None and self._mrview.exports:
                raise BufferError("the frame still has %d buffer view(s) (memoryview, numpy array): "
                                  "drop them before release()" % self._mrview.exports)
            self._released = True
            self._mrview = None
            self._server._h.release(self._id)

    def __len__(self):
        return self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class RoCEv2Channel:
    """The frames of one channel id (or of every channel, ``server.stream``)."""

    def __init__(self, server, channel):
        self._server = server
        self.channel = channel
        self._view = server._h.open_view(channel)

    def get(self, timeout: float = 1.0) -> Optional[RoCEv2Frame]:
        """The next frame, waiting up to ``timeout`` seconds; ``None`` if none came."""
        got = self._server._h.next_frame(self._view, float(timeout))
        return None if got is None else RoCEv2Frame(self._server, *got)

    def close(self) -> None:
        if self._view is not None:
            view, self._view = self._view, None
            self._server._h.close_view(view)


_STATUS_FIELDS = (
    "FpgaIp", "FpgaGid", "HostQpn", "HostGid", "HostIp", "MrAddr", "MrRkey", "RxFrameCount",
    "RxByteCount", "MaxPayload", "RxQueueDepth", "HostRqPsn", "HostSqPsn", "FpgaQpn", "FpgaLkey",
)


class RoCEv2Server:
    """RoCEv2 RC receive server (pyrogue's ``RoCEv2Server``) on rctb."""

    def __init__(self, *, rocev2Cfg: RoCEv2ServerCfg, backend=None, **kwargs):
        if not isinstance(rocev2Cfg, RoCEv2ServerCfg):
            raise TypeError("rocev2Cfg must be a RoCEv2ServerCfg")
        self.name = kwargs.get("name", "RoCEv2Server")
        self.cfg = rocev2Cfg
        self.backend = _check_backend(current_backend() if backend is None else backend)
        if self.backend == "udp":
            raise ValueError("backend 'udp': pass a rctb.udp.Network holding the endpoint deviceName names")
        c = rocev2Cfg
        payload = DEFAULT_MAX_PAYLOAD if c.maxPayload is None else int(c.maxPayload)
        depth = DEFAULT_RX_QUEUE_DEPTH if c.rxQueueDepth is None else int(c.rxQueueDepth)
        self._h = _rctb.RoceServer(self.backend, str(c.deviceName), str(c.ip), int(c.ibPort), int(c.gidIndex), payload, depth)
        self._connected = False
        self._stream = None

    @staticmethod
    def detectGidIndex(device: str, ip: str, ibPort: int = 1) -> Optional[int]:
        """The host's RoCE v2 IPv4 GID index on the /24 of ``ip`` (sysfs), or ``None``."""
        return _rctb.detect_gid_index(device, ip, ibPort)

    @property
    def stream(self) -> RoCEv2Channel:
        """Every channel's frames."""
        if self._stream is None:
            self._stream = RoCEv2Channel(self, None)
        return self._stream

    def getChannel(self, channel: int) -> RoCEv2Channel:
        """The frames of channel id ``channel`` (immediate bits 7:0): 0..255."""
        if isinstance(channel, bool) or not isinstance(channel, int) or not 0 <= channel <= 255:
            raise ValueError("RoCEv2Server.getChannel: channel must be an int in 0..255, got %r" % (channel,))
        return RoCEv2Channel(self, channel)

    def getHostParams(self) -> RoCEv2HostParams:
        return RoCEv2HostParams(*self._h.host_params())

    def completeConnection(self, fpgaQpn, *, pmtu, minRnrTimer, rnrRetry, retryCount, fpgaLkey=0) -> None:
        """Finish the host QP with the FPGA's QPN and lkey (once)."""
        _check_transport(pmtu, minRnrTimer, rnrRetry, retryCount)
        if self._connected:
            raise RuntimeError("completeConnection was already called")
        self._connected = True
        self._h.complete_connection(int(fpgaQpn), int(pmtu), int(minRnrTimer), int(rnrRetry), int(retryCount), int(fpgaLkey))

    def printConnInfo(self) -> None:
        print(self._h.conn_info(), end="")

    def status(self) -> dict:
        """The 15 status fields by name."""
        return dict(self._h.status())

    def counters(self) -> dict:
        return dict(self._h.counters())

    @property
    def heldFrames(self) -> int:
        return self._h.held_frames

    def stop(self) -> None:
        self._h.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def _status_property(name):
    return property(lambda self: self._h.status()[name], doc="Status field %s." % name)


for _name in _STATUS_FIELDS:
    setattr(RoCEv2Server, _name, _status_property(_name))


class RoCEv2Engine:
    """surf's ``RoCEv2Engine`` (the FPGA side) over rctb's engine model on a
    fabric node; streams PRBS frames once set up (``startStream``)."""

    def __init__(self, *, backend=None, node: str = "fpga", hostIp: str, mrLen: int = 1 << 20):
        self.backend = _check_backend(current_backend() if backend is None else backend)
        if not isinstance(self.backend, (_rctb.Fabric, _rctb.UdpNetwork)):
            raise NotImplementedError("the FPGA engine model runs on a rctb.sim.Fabric or a rctb.udp.Network")
        self._h = _rctb.FpgaEngine(self.backend, node, hostIp, mr_len=int(mrLen))

    def setupConnection(self, *, hostQpn, hostRqPsn, hostSqPsn, mrAddr, mrLen, pmtu=RoCEv2Mtu.MTU_4096,
                        minRnrTimer=12, rnrRetry=7, retryCount=3) -> RoCEv2FpgaParams:
        """Soft reset, PD, MR, QP to RTS over the metadata bus; rolled back on failure."""
        _check_transport(pmtu, minRnrTimer, rnrRetry, retryCount)
        return RoCEv2FpgaParams(*self._h.setup_connection(int(hostQpn), int(hostRqPsn), int(hostSqPsn), int(mrAddr),
                                                          int(mrLen), int(pmtu), int(minRnrTimer), int(rnrRetry), int(retryCount)))

    def startStream(self, channels, sizes, count, *, gap=0.0, window=16) -> None:
        self._h.start_stream(list(channels), list(sizes), int(count), gap=float(gap), window=int(window))

    def streamStats(self) -> dict:
        posted, completed, nbytes, errors = self._h.stream_stats()
        return dict(posted=posted, completed=completed, bytes=nbytes, errors=errors)

    def teardown(self) -> None:
        self._h.teardown()


__all__ = [
    "RoCEv2Channel", "RoCEv2Engine", "RoCEv2FpgaParams", "RoCEv2Frame", "RoCEv2HostParams", "RoCEv2Mtu",
    "RoCEv2RnrTimer", "RoCEv2Server", "RoCEv2ServerCfg", "RoCEv2TransportCfg",
]
