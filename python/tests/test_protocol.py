"""rctb.nvmeof.protocol against bytes computed here from the NVMe and
NVMe/RDMA layouts (docs/protocols.md §2) with struct, never by rctb."""

import struct
import uuid

import pytest

import rctb.nvmeof.protocol as p


class Mr:
    def __init__(self, addr, length, rkey):
        self.addr, self.length, self.rkey = addr, length, rkey


def sqe(opcode, nsid=0, addr=0, length=0, key=0, cdw=b""):
    """A 64-byte command: opcode, PSDT=SGL, cid 0, nsid, keyed SGL @24."""
    head = struct.pack("<BBHI16x", opcode, 0x40, 0, nsid)
    sgl = struct.pack("<Q", addr) + length.to_bytes(3, "little") + struct.pack("<IB", key, 0x40)
    return head + sgl + cdw.ljust(24, b"\0")


def test_constants_are_the_spec_values():
    assert (p.NVME_RDMA_PORT, p.ADMIN_QUEUE_DEPTH, p.MAX_QUEUE_DEPTH) == (4420, 32, 256)
    assert p.MAX_KEYED_SGL_LENGTH == 0xFFFFFF
    assert (p.OPC_FLUSH, p.OPC_WRITE, p.OPC_READ, p.OPC_IDENTIFY, p.OPC_SET_FEATURES, p.OPC_FABRICS) == (0, 1, 2, 6, 9, 0x7F)
    assert (p.FCTYPE_PROPERTY_SET, p.FCTYPE_CONNECT, p.FCTYPE_PROPERTY_GET) == (0, 1, 4)
    assert (p.REG_CAP, p.REG_VS, p.REG_CC, p.REG_CSTS) == (0, 8, 0x14, 0x1C)
    assert (p.CC_ENABLE, p.CC_CSS_CSI, p.CC_MPS_SHIFT, p.CC_IOSQES, p.CC_IOCQES) == (1, 6 << 4, 7, 6 << 16, 4 << 20)
    assert (p.CSTS_READY, p.CSTS_FATAL, p.FEAT_NUMBER_OF_QUEUES, p.PSDT_SGL, p.KEYED_DATA_BLOCK) == (1, 2, 7, 0x40, 0x40)


def test_read_write_commands():
    mr = Mr(0x1000_0000_2000, 1 << 20, 0xABCD1234)
    got = p.rw_command(p.OPC_READ, 3, 0x1_2345_6789, 8, mr, lba_size=512, buffer_offset=4096)
    assert got == sqe(2, 3, mr.addr + 4096, 4096, mr.rkey, struct.pack("<QH", 0x1_2345_6789, 7))
    got = p.rw_command(p.OPC_WRITE, 1, 0, 1, mr, lba_size=4096)
    assert got == sqe(1, 1, mr.addr, 4096, mr.rkey, struct.pack("<QH", 0, 0))
    assert isinstance(got, bytes) and len(got) == 64


def test_fabrics_commands():
    mr = Mr(0x7000, 4096, 7)
    assert p.fabrics_connect(1, 128, mr, 15000) == struct.pack("<BBHB", 0x7F, 0x40, 0, 1) + sqe(0, 0, 0x7000, 1024, 7)[5:40] + struct.pack("<HHHBBI", 0, 1, 127, 0, 0, 15000) + bytes(12)
    assert p.property_get(p.REG_CAP, 8) == sqe(0x7F, 4, cdw=struct.pack("<B3xI", 1, 0))
    assert p.property_get(p.REG_CSTS, 4) == sqe(0x7F, 4, cdw=struct.pack("<B3xI", 0, 0x1C))
    assert p.property_set(p.REG_CC, 0x460001) == sqe(0x7F, 0, cdw=struct.pack("<B3xIQ", 0, 0x14, 0x460001))
    assert p.property_set(0, 2**64 - 1, 8) == sqe(0x7F, 0, cdw=struct.pack("<B3xIQ", 1, 0, 2**64 - 1))


def test_admin_commands():
    mr = Mr(0x9000, 8192, 0x55)
    assert p.identify(mr, controller=True) == sqe(6, 0, 0x9000, 4096, 0x55, b"\x01")
    assert p.identify(mr, nsid=2) == sqe(6, 2, 0x9000, 4096, 0x55, b"\x00")
    assert p.set_features(p.FEAT_NUMBER_OF_QUEUES, 0x00030003) == sqe(9, cdw=struct.pack("<II", 7, 0x00030003))


def test_set_keyed_sgl_patches_in_place():
    cmd = bytearray(64)
    p.set_keyed_sgl(cmd, Mr(0x10, 100, 9), 50, 10)
    assert cmd[1] == 0x40
    assert bytes(cmd[24:40]) == struct.pack("<Q", 0x1A) + (50).to_bytes(3, "little") + struct.pack("<IB", 9, 0x40)


def test_cm_and_connect_data():
    assert p.rdma_cm_request(0, 32, 7) == struct.pack("<HHHHH22x", 0, 0, 32, 31, 0)
    assert p.rdma_cm_request(1, 128, 7) == struct.pack("<HHHHH22x", 0, 1, 128, 127, 7)
    assert p.parse_rdma_cm_response(struct.pack("<HH28x", 0, 64)) == 64
    hid = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    sub, host = "nqn.2024-01.io.rctb:sub", "nqn.2014-08.org.nvmexpress:uuid:" + str(hid)
    want = bytearray(1024)
    want[0:16] = hid.bytes
    want[16:18] = struct.pack("<H", 0xFFFF)
    want[256 : 256 + len(sub)] = sub.encode()
    want[512 : 512 + len(host)] = host.encode()
    assert p.connect_data(hid, sub, host, 0xFFFF) == bytes(want)
    assert p.connect_data(str(hid), sub, host, 0xFFFF) == bytes(want)


def test_parsers():
    raw = struct.pack("<QHHHH", 0x1_0000_0002, 5, 1, 9, (1 << 15) | (0x1 << 9) | (0x80 << 1) | 1)
    c = p.Completion.from_bytes(raw + b"extra")
    assert (c.result, c.sq_head, c.sq_id, c.command_id) == (0x1_0000_0002, 5, 1, 9)
    assert (c.status_code, c.status_type, c.do_not_retry, c.succeeded) == (0x80, 1, True, False)
    with pytest.raises(p.NVMeStatusError) as e:
        c.raise_for_status()
    assert isinstance(e.value, OSError) and e.value.completion == c
    assert "SC=0x80" in str(e.value) and "DNR" in str(e.value)
    ok = p.Completion.from_bytes(struct.pack("<QHHHH", 0, 0, 0, 0, 1))
    assert ok.succeeded and ok.raise_for_status() is None

    ident = bytearray(4096)
    ident[4:24] = b"SERIAL-1".ljust(20)
    ident[24:64] = b"a model".ljust(40)
    ident[64:72] = b"fw 1.0".ljust(8)
    ident[77] = 5
    struct.pack_into("<HI", ident, 78, 3, 0x00010300)
    struct.pack_into("<HI", ident, 514, 128, 4)
    struct.pack_into("<I", ident, 536, 0x100005)
    struct.pack_into("<IIH", ident, 1792, 260, 1, 0)
    info = p.ControllerInfo.from_bytes(bytes(ident))
    assert info == p.ControllerInfo("SERIAL-1", "a model", "fw 1.0", 5, 3, 0x00010300, 128, 4, 0x100005, 260, 1, 0)

    ns = bytearray(4096)
    struct.pack_into("<QQQ", ns, 0, 1000, 900, 800)
    ns[25], ns[26] = 1, 1
    struct.pack_into("<HB", ns, 128 + 4, 0, 12)
    assert p.NamespaceInfo.from_bytes(5, bytes(ns)) == p.NamespaceInfo(5, 1000, 900, 800, 4096, 0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: p.rw_command(p.OPC_READ, 1, 0, 1, Mr(0, 2**25, 1), lba_size=2**24), "cannot exceed 2**24 - 1 bytes"),
        (lambda: p.rw_command(p.OPC_FLUSH, 1, 0, 1, Mr(0, 512, 1), lba_size=512), "opcode must be READ or WRITE"),
        (lambda: p.rw_command(p.OPC_READ, 1, 0, 65537, Mr(0, 2**30, 1), lba_size=1), "1 to 65536 blocks"),
        (lambda: p.rw_command(p.OPC_READ, 1, -1, 1, Mr(0, 512, 1), lba_size=512), "uint64"),
        (lambda: p.rw_command(p.OPC_READ, 1, 0, 2, Mr(0, 512, 1), lba_size=512), "outside the registered memory region"),
        (lambda: p.rdma_cm_request(0, 1), "between 2 and 256"),
        (lambda: p.rdma_cm_request(1, 257), "between 2 and 256"),
        (lambda: p.rdma_cm_request(70000, 32), "qid must fit in uint16"),
        (lambda: p.parse_rdma_cm_response(b"\0\0"), "shorter than 4 bytes"),
        (lambda: p.parse_rdma_cm_response(struct.pack("<HH", 1, 4)), "record format 1"),
        (lambda: p.parse_rdma_cm_response(struct.pack("<HH", 0, 0)), "zero receive queue size"),
        (lambda: p.connect_data(uuid.uuid4(), "short", "nqn.2024-01.io.rctb:h", 1), "subsystem NQN must contain 11 to 223"),
        (lambda: p.connect_data(uuid.uuid4(), "nqn.2024-01.io.rctb:s", "x" * 224, 1), "host NQN must contain 11 to 223"),
        (lambda: p.property_get(0, 2), "4 or 8 bytes"),
        (lambda: p.fabrics_connect(0, 32, Mr(0, 4096, 1), -1), "kato_ms must fit in uint32"),
        (lambda: p.Completion.from_bytes(b"\0" * 15), "at least 16 bytes"),
        (lambda: p.ControllerInfo.from_bytes(bytes(4095)), "4096 bytes"),
    ],
)
def test_refusals_name_the_field_and_the_limit(call, message):
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace("(", r"\(")):
        call()


def test_values_a_field_cannot_hold_are_struct_errors():
    with pytest.raises(struct.error):
        p.property_get(2**32, 4)
    with pytest.raises(struct.error):
        p.set_features(7, -1)
    with pytest.raises(struct.error):
        p.connect_data(uuid.uuid4(), "nqn.2024-01.io.rctb:s", "nqn.2024-01.io.rctb:h", 0x10000)
