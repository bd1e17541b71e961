"""rctb.nvmeof.protocol against the nvmeof package from PyPI (the seed's
own pure-Python implementation) on seeded random inputs: the same bytes,
the same fields, the same refusals (exception type and message)."""

import importlib.util
import os
import random
import struct
import sys
import uuid

import pytest

import rctb.nvmeof.protocol as ours

SEED = int(os.environ.get("RCTB_SEED", "1"))
CASES = 400


def _seed_protocol():
    """nvmeof.protocol without nvmeof/__init__ (which imports ibverbs)."""
    spec = importlib.util.find_spec("nvmeof")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the nvmeof package is not installed (pip install nvmeof)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "protocol.py")
    s = importlib.util.spec_from_file_location("_seed_nvmeof_protocol", path)
    mod = importlib.util.module_from_spec(s)
    sys.modules[s.name] = mod
    s.loader.exec_module(mod)
    return mod


theirs = _seed_protocol()


class Mr:
    def __init__(self, addr, length, rkey):
        self.addr, self.length, self.rkey = addr, length, rkey

    def __repr__(self):
        return "Mr(%#x, %d, %#x)" % (self.addr, self.length, self.rkey)


def outcome(fn, *args, **kwargs):
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # the refusal is the result being compared
        return ("raise", type(e).__name__ if type(e).__name__ != "NVMeStatusError" else "NVMeStatusError", str(e) if not isinstance(e, struct.error) else "")
    if hasattr(r, "__dataclass_fields__"):
        return ("ok", type(r).__name__, tuple(getattr(r, f) for f in r.__dataclass_fields__))
    return ("ok", r)


def edge(rng, bits):
    """Mostly in range, often at the edges, sometimes just outside."""
    top = (1 << bits) - 1
    return rng.choice([0, 1, top, top + 1, -1, rng.randrange(0, top + 1), rng.randrange(0, top + 1), rng.randrange(0, 64)])


def mr(rng):
    return Mr(edge(rng, 64) if rng.random() < 0.2 else rng.randrange(0, 1 << 48),
              rng.choice([0, 1, 511, 512, 4096, 1 << 20, (1 << 24) - 1, 1 << 24, 1 << 25, rng.randrange(1, 1 << 26)]),
              edge(rng, 32))


def nqn(rng):
    n = rng.choice([0, 10, 11, 12, 100, 223, 224, 300])
    s = "nqn.2024-01.io.rctb:" + "".join(rng.choice("abcdé\0") if rng.random() < 0.02 else rng.choice("xyz") for _ in range(n))
    return s[:n] if rng.random() < 0.5 else s


def same(name, fn_args):
    a = outcome(getattr(ours, name), *fn_args[0], **fn_args[1])
    b = outcome(getattr(theirs, name), *fn_args[0], **fn_args[1])
    assert a == b, "%s%r: rctb %r, nvmeof %r (seed %d: RCTB_SEED=%d)" % (name, fn_args, a, b, SEED, SEED)
    return a


def valid_rw(rng):
    blocks, lba = rng.randrange(1, 65), rng.choice([512, 4096])
    offset = rng.choice([0, 512, rng.randrange(0, 1 << 16)])
    buf = Mr(rng.randrange(0, 1 << 48), offset + blocks * lba + rng.choice([0, 1, 4096]), rng.getrandbits(32))
    return ((rng.choice([1, 2]), rng.getrandbits(32), rng.getrandbits(64), blocks, buf), dict(lba_size=lba, buffer_offset=offset))


def gen_cases(rng):
    yield "rw_command", valid_rw(rng)
    yield "rw_command", ((rng.choice([0, 1, 2, 3]), edge(rng, 32), edge(rng, 64), rng.choice([0, 1, 8, 65536, 65537, rng.randrange(1, 70000)]), mr(rng)),
                         dict(lba_size=rng.choice([0, -1, 512, 4096, 1 << 20]), buffer_offset=rng.choice([0, 512, -1, rng.randrange(0, 1 << 21)])))
    yield "rdma_cm_request", ((edge(rng, 16), rng.choice([0, 1, 2, 32, 256, 257, rng.randrange(0, 300)]), edge(rng, 16)), {})
    yield "parse_rdma_cm_response", ((bytes(rng.randrange(0, 3) for _ in range(rng.choice([0, 3, 4, 8, 32]))),), {})
    yield "connect_data", ((uuid.UUID(int=rng.getrandbits(128)), nqn(rng), nqn(rng), edge(rng, 16)), {})
    yield "fabrics_connect", ((edge(rng, 16), rng.choice([1, 2, 32, 128, 256, 65537]), mr(rng), edge(rng, 32)), {})
    yield "property_get", ((edge(rng, 32), rng.choice([4, 8, 2, 0])), {})
    yield "property_set", ((edge(rng, 32), edge(rng, 64), rng.choice([4, 8, 16])), {})
    yield "identify", ((mr(rng),), dict(nsid=edge(rng, 32), controller=rng.random() < 0.5))
    yield "set_features", ((edge(rng, 32), edge(rng, 32)), {})


@pytest.mark.parametrize("case", range(CASES))
def test_builders_match_the_seed(case):
    rng = random.Random(SEED * 1_000_003 + case)
    for name, args in gen_cases(rng):
        same(name, args)


@pytest.mark.parametrize("case", range(CASES // 4))
def test_set_keyed_sgl_matches_the_seed(case):
    rng = random.Random(SEED * 7919 + case)
    base = bytes(rng.getrandbits(8) for _ in range(64))
    m, length, offset = mr(rng), rng.choice([None, 0, 1, 4096, 1 << 24, rng.randrange(0, 1 << 25)]), rng.choice([0, -1, 1, rng.randrange(0, 1 << 25)])
    a, b = bytearray(base), bytearray(base)
    ra = outcome(ours.set_keyed_sgl, a, m, length, offset)
    rb = outcome(theirs.set_keyed_sgl, b, m, length, offset)
    assert (ra, a) == (rb, b), "set_keyed_sgl(%r, %r, %r) seed %d" % (m, length, offset, SEED)


@pytest.mark.parametrize("case", range(CASES // 2))
def test_parsers_match_the_seed(case):
    rng = random.Random(SEED * 104729 + case)
    raw = bytearray(rng.getrandbits(8) for _ in range(rng.choice([15, 16, 4095, 4096])))
    if len(raw) == 4096 and rng.random() < 0.7:
        raw[25] = rng.randrange(0, 4)
        raw[26] = rng.randrange(0, 5)
        for i in range(5):
            raw[128 + 4 * i + 2] = rng.choice([8, 9, 12, 31, 32])
    for name, args in [("Completion", (bytes(raw),)), ("ControllerInfo", (bytes(raw),)), ("NamespaceInfo", (rng.randrange(1, 10), bytes(raw)))]:
        a = outcome(getattr(ours, name).from_bytes, *args)
        b = outcome(getattr(theirs, name).from_bytes, *args)
        assert a == b, "%s.from_bytes seed %d case %d" % (name, SEED, case)
    c = getattr(ours, "Completion").from_bytes(bytes(raw[:16]).ljust(16, b"\0"))
    d = getattr(theirs, "Completion").from_bytes(bytes(raw[:16]).ljust(16, b"\0"))
    props = ("status", "status_code", "status_type", "do_not_retry", "succeeded")
    assert [getattr(c, k) for k in props] == [getattr(d, k) for k in props]
    assert outcome(c.raise_for_status)[:2] == outcome(d.raise_for_status)[:2]
    if not c.succeeded:
        with pytest.raises(ours.NVMeStatusError) as e1:
            c.raise_for_status()
        with pytest.raises(theirs.NVMeStatusError) as e2:
            d.raise_for_status()
        assert (str(e1.value), e1.value.errno) == (str(e2.value), e2.value.errno)


def test_constants_match_the_seed():
    names = [n for n in dir(theirs) if n.isupper()]
    assert names, "the seed module has constants"
    for n in names:
        assert getattr(ours, n) == getattr(theirs, n), n
