"""NVMe, NVMe-oF and NVMe/RDMA wire layouts, as the ``nvmeof`` package names
them (``nvmeof.protocol``), built by rctb's encoders.

Every builder returns ``bytes``. Arguments are checked with the rules and
messages the ``nvmeof`` package's users know (a keyed SGL "cannot exceed
2**24 - 1 bytes"); values a fixed-width field cannot hold raise
``struct.error`` as they do there. The bytes come from
``rctb_core::nvmeof::protocol`` (the same encoders rctb's initiator sends).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from .. import _rctb

#: IANA service port for NVMe over Fabrics/RDMA.
NVME_RDMA_PORT = 4420
#: Queue depth used for the controller's admin queue.
ADMIN_QUEUE_DEPTH = 32
#: Largest queue supported by the command-ID layout.
MAX_QUEUE_DEPTH = 256
#: Largest byte count of one keyed SGL descriptor.
MAX_KEYED_SGL_LENGTH = 2**24 - 1

OPC_FLUSH = 0
OPC_WRITE = 1
OPC_READ = 2
OPC_IDENTIFY = 6
OPC_SET_FEATURES = 9
OPC_FABRICS = 127

FCTYPE_PROPERTY_SET = 0
FCTYPE_CONNECT = 1
FCTYPE_PROPERTY_GET = 4

REG_CAP = 0
REG_VS = 8
REG_CC = 20
REG_CSTS = 28

CC_ENABLE = 1
CC_CSS_CSI = 96
CC_MPS_SHIFT = 7
CC_IOSQES = 393216
CC_IOCQES = 4194304
CSTS_READY = 1
CSTS_FATAL = 2

FEAT_NUMBER_OF_QUEUES = 7
PSDT_SGL = 64
KEYED_DATA_BLOCK = 64

_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_U64 = 2**64 - 1


def _fits(value: int, limit: int, fmt: str) -> int:
    """``value`` as ``struct`` would pack it into ``fmt``, or struct.error."""
    if not 0 <= value <= limit:
        raise struct.error("'%s' format requires 0 <= number <= %d" % (fmt, limit))
    return value


class NVMeStatusError(OSError):
    """An NVMe command completed with a non-zero status."""

    def __init__(self, completion: "Completion"):
        self.completion = completion
        dnr = " DNR" if completion.do_not_retry else ""
        super().__init__(
            5,
            "NVMe command %d failed: SCT=%d SC=0x%02x%s"
            % (completion.command_id, completion.status_type, completion.status_code, dnr),
        )


@dataclass(frozen=True)
class Completion:
    """Decoded 16-byte NVMe completion queue entry (``status_field`` keeps
    the phase bit as received)."""

    result: int
    sq_head: int
    sq_id: int
    command_id: int
    status_field: int

    @classmethod
    def from_bytes(cls, data: bytes) -> "Completion":
        return cls(*_rctb.decode_completion(bytes(data)))

    @property
    def status(self) -> int:
        return self.status_field >> 1

    @property
    def status_code(self) -> int:
        return self.status & 0xFF

    @property
    def status_type(self) -> int:
        return (self.status >> 8) & 0x7

    @property
    def do_not_retry(self) -> bool:
        return bool(self.status >> 14 & 1)

    @property
    def succeeded(self) -> bool:
        return self.status_code == 0 and self.status_type == 0

    def raise_for_status(self) -> None:
        if not self.succeeded:
            raise NVMeStatusError(self)


def _ascii(data: bytes, start: int, length: int) -> str:
    return bytes(data[start : start + length]).decode("ascii", "replace").strip()


@dataclass(frozen=True)
class ControllerInfo:
    """Identify Controller fields (docs/protocols.md §2.8 offsets)."""

    serial: str
    model: str
    firmware: str
    mdts: int
    controller_id: int
    version: int
    max_commands: int
    namespace_count: int
    sgls: int
    ioccsz: int
    iorcsz: int
    icdoff: int

    @classmethod
    def from_bytes(cls, data: bytes) -> "ControllerInfo":
        if len(data) < 4096:
            raise ValueError("Identify Controller data must be 4096 bytes")
        u16 = lambda at: int.from_bytes(data[at : at + 2], "little")  # noqa: E731
        u32 = lambda at: int.from_bytes(data[at : at + 4], "little")  # noqa: E731
        return cls(
            serial=_ascii(data, 4, 20),
            model=_ascii(data, 24, 40),
            firmware=_ascii(data, 64, 8),
            mdts=data[77],
            controller_id=u16(78),
            version=u32(80),
            max_commands=u16(514),
            namespace_count=u32(516),
            sgls=u32(536),
            ioccsz=u32(1792),
            iorcsz=u32(1796),
            icdoff=u16(1800),
        )


@dataclass(frozen=True)
class NamespaceInfo:
    """Namespace capacity and the LBA format in use."""

    nsid: int
    size_lbas: int
    capacity_lbas: int
    used_lbas: int
    lba_size: int
    metadata_size: int

    @classmethod
    def from_bytes(cls, nsid: int, data: bytes) -> "NamespaceInfo":
        if len(data) < 4096:
            raise ValueError("Identify Namespace data must be 4096 bytes")
        nlbaf, flbas = data[25], data[26]
        index = flbas & 0x0F
        if index > nlbaf:
            raise ValueError("Identify Namespace selected an invalid LBA format")
        entry = 128 + 4 * index
        lbads = data[entry + 2]
        if not 9 <= lbads <= 31:
            raise ValueError("unsupported namespace LBA data size")
        u64 = lambda at: int.from_bytes(data[at : at + 8], "little")  # noqa: E731
        return cls(
            nsid=int(nsid),
            size_lbas=u64(0),
            capacity_lbas=u64(8),
            used_lbas=u64(16),
            lba_size=1 << lbads,
            metadata_size=int.from_bytes(data[entry : entry + 2], "little"),
        )


def _keyed(buffer, length=None, offset=0):
    """The (addr, length, rkey) a keyed SGL over ``buffer`` carries."""
    offset = int(offset)
    total = int(buffer.length)
    if offset < 0 or offset > total:
        raise ValueError("data offset is outside the registered memory region")
    length = total - offset if length is None else int(length)
    if length <= 0 or length > total - offset:
        raise ValueError("data range is outside the registered memory region")
    if length > MAX_KEYED_SGL_LENGTH:
        raise ValueError("one NVMe/RDMA keyed SGL cannot exceed 2**24 - 1 bytes")
    addr = int(buffer.addr) + offset
    if not 0 <= addr <= _U64:
        raise ValueError("data address is outside the uint64 range")
    rkey = int(buffer.rkey)
    if not 0 <= rkey <= _U32:
        raise ValueError("rkey is outside the uint32 range")
    return addr, length, rkey


def set_keyed_sgl(command: bytearray, buffer, length=None, offset=0) -> None:
    """Point ``command`` at ``length`` bytes of ``buffer`` from ``offset``
    (one keyed data block; ``buffer`` exposes ``addr``, ``length``, ``rkey``)."""
    addr, length, rkey = _keyed(buffer, length, offset)
    sgl = _rctb.encode_command(0, 0, (addr, length, rkey), [0] * 6)[24:40]
    command[1] |= PSDT_SGL
    command[24:40] = sgl


def _build(opcode: int, nsid: int, sgl, cdw) -> bytes:
    return _rctb.encode_command(opcode, nsid, sgl, list(cdw) + [0] * (6 - len(cdw)))


def rdma_cm_request(qid: int, depth: int, controller_id: int = 0) -> bytes:
    """The 32-byte NVMe/RDMA CM request (controller id 0 on the admin queue)."""
    qid, depth = int(qid), int(depth)
    if not 0 <= qid <= _U16:
        raise ValueError("qid must fit in uint16")
    if not 2 <= depth <= MAX_QUEUE_DEPTH:
        raise ValueError("queue depth must be between 2 and 256")
    cntlid = int(controller_id) if qid else 0
    if not 0 <= cntlid <= _U16:
        raise ValueError("controller_id must fit in uint16")
    return _rctb.cm_request(qid, depth, cntlid)


def parse_rdma_cm_response(data: bytes) -> int:
    """Check NVMe/RDMA CM accept data; return its receive queue size."""
    data = bytes(data)
    if len(data) < 4:
        raise ValueError("NVMe/RDMA CM response is shorter than 4 bytes")
    recfmt = int.from_bytes(data[0:2], "little")
    if recfmt:
        raise ValueError("unsupported NVMe/RDMA CM record format %d" % recfmt)
    if int.from_bytes(data[2:4], "little") == 0:
        raise ValueError("NVMe/RDMA target returned a zero receive queue size")
    return _rctb.cm_accept(data)[1]


def connect_data(host_id, subsystem_nqn: str, host_nqn: str, controller_id: int) -> bytes:
    """The 1024-byte Fabrics Connect data (``host_id``: UUID or its text)."""
    host = host_id if isinstance(host_id, uuid.UUID) else uuid.UUID(str(host_id))
    cntlid = _fits(int(controller_id), _U16, "H")
    for value, name in ((subsystem_nqn, "subsystem NQN"), (host_nqn, "host NQN")):
        raw = value.encode("utf-8")
        if not 11 <= len(raw) <= 223 or b"\0" in raw:
            raise ValueError("%s must contain 11 to 223 non-NUL UTF-8 bytes" % name)
    return _rctb.connect_data(host.bytes, subsystem_nqn, host_nqn, cntlid)


def fabrics_connect(qid: int, depth: int, data_buffer, kato_ms: int = 0) -> bytes:
    """Fabrics Connect of queue ``qid`` (``depth`` entries), data in ``data_buffer``."""
    if kato_ms < 0 or kato_ms > _U32:
        raise ValueError("kato_ms must fit in uint32")
    sgl = _keyed(data_buffer, 1024)
    qid = _fits(int(qid), _U16, "H")
    sqsize = _fits(int(depth) - 1, _U16, "H")
    return _build(OPC_FABRICS, FCTYPE_CONNECT, sgl, [qid << 16, sqsize, kato_ms])


def _property_size(size: int) -> int:
    if size not in (4, 8):
        raise ValueError("property size must be 4 or 8 bytes")
    return 1 if size == 8 else 0


def property_get(offset: int, size: int) -> bytes:
    """Fabrics Property Get of a 4- or 8-byte register."""
    attrib = _property_size(size)
    return _build(OPC_FABRICS, FCTYPE_PROPERTY_GET, None, [attrib, _fits(int(offset), _U32, "I")])


def property_set(offset: int, value: int, size: int = 4) -> bytes:
    """Fabrics Property Set of a 4- or 8-byte register."""
    attrib = _property_size(size)
    offset = _fits(int(offset), _U32, "I")
    value = _fits(int(value), _U64, "Q")
    return _build(OPC_FABRICS, FCTYPE_PROPERTY_SET, None, [attrib, offset, value & _U32, value >> 32])


def identify(data_buffer, *, nsid: int = 0, controller: bool = False) -> bytes:
    """Identify Controller (``controller=True``) or Namespace ``nsid``."""
    nsid = _fits(int(nsid), _U32, "I")
    sgl = _keyed(data_buffer, 4096)
    return _build(OPC_IDENTIFY, nsid, sgl, [1 if controller else 0])


def set_features(feature_id: int, value: int) -> bytes:
    """Set Features ``feature_id`` with command dword 11 = ``value``."""
    fid = _fits(int(feature_id), _U32, "I")
    return _build(OPC_SET_FEATURES, 0, None, [fid, _fits(int(value), _U32, "I")])


def rw_command(opcode: int, nsid: int, slba: int, blocks: int, buffer, *, lba_size: int, buffer_offset: int = 0) -> bytes:
    """One NVM Read or Write of 1..65536 blocks with a keyed SGL."""
    if opcode not in (OPC_READ, OPC_WRITE):
        raise ValueError("opcode must be READ or WRITE")
    if slba < 0 or slba > _U64:
        raise ValueError("starting LBA is outside the uint64 range")
    if blocks <= 0 or blocks > 65536:
        raise ValueError("one NVMe command must contain 1 to 65536 blocks")
    lba_size = int(lba_size)
    if lba_size <= 0:
        raise ValueError("lba_size must be positive")
    nsid = _fits(int(nsid), _U32, "I")
    sgl = _keyed(buffer, int(blocks) * lba_size, buffer_offset)
    slba, blocks = int(slba), int(blocks)
    return _build(opcode, nsid, sgl, [slba & _U32, slba >> 32, blocks - 1])


def _flush(nsid: int) -> bytes:
    return _build(OPC_FLUSH, _fits(int(nsid), _U32, "I"), None, [])
