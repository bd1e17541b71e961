#!/usr/bin/env python3
# Copied from shared/vm/icrc_check.py (the rxe VM recipe in the project's shared
# folder, by the engineers who wrote that recipe), unchanged but for this
# note: CI's copy of shared/ may be read-only or absent, and the harness
# must carry its own.
"""Verify the RoCEv2 ICRC of every IPv4/UDP:4791 frame in a pcap.

tshark 4.0 only *displays* the ICRC ("Invariant CRC") and never checks it,
so this is an independent check (IBTA Annex A17 masking rules, as in
linux drivers/infiniband/sw/rxe/rxe_icrc.c):
  8 x 0xff (masked LRH) | IPv4 hdr with TOS=0xff, TTL=0xff, csum=0xffff |
  UDP hdr with csum=0xffff | BTH with byte 4 (FECN/BECN/resv) = 0xff |
  rest of the packet up to (excluding) the 4-byte ICRC.
ICRC on the wire = CRC-32 (zlib) of that, little-endian.
Usage: icrc_check.py file.pcap   (exit 1 if any frame has a bad ICRC)
"""
import struct
import sys
import zlib


def frames(path):
    d = open(path, 'rb').read()
    magic = struct.unpack_from('<I', d, 0)[0]
    if magic not in (0xa1b2c3d4, 0xa1b23c4d):
        sys.exit('only little-endian classic pcap supported')
    linktype = struct.unpack_from('<I', d, 20)[0]
    off, n = 24, 0
    while off + 16 <= len(d):
        incl = struct.unpack_from('<I', d, off + 8)[0]
        n += 1
        yield n, linktype, d[off + 16: off + 16 + incl]
        off += 16 + incl


def check(pkt, linktype):
    if linktype == 1:            # Ethernet
        if pkt[12:14] != b'\x08\x00':
            return None
        ip = pkt[14:]
    elif linktype == 113:        # Linux cooked (SLL)
        if pkt[14:16] != b'\x08\x00':
            return None
        ip = pkt[16:]
    else:
        return None
    ihl = (ip[0] & 0xf) * 4
    if ip[9] != 17:
        return None
    tot = struct.unpack_from('>H', ip, 2)[0]
    ip = bytearray(ip[:tot])
    udp = ip[ihl:]
    if struct.unpack_from('>H', udp, 2)[0] != 4791:
        return None
    m = bytearray(b'\xff' * 8) + ip
    b = 8
    m[b + 1] = 0xff                       # TOS
    m[b + 8] = 0xff                       # TTL
    m[b + 10:b + 12] = b'\xff\xff'        # IP checksum
    m[b + ihl + 6:b + ihl + 8] = b'\xff\xff'  # UDP checksum
    m[b + ihl + 8 + 4] = 0xff             # BTH byte 4 (FECN/BECN/resv6a, resv8a)
    got = struct.unpack_from('<I', ip, len(ip) - 4)[0]
    want = zlib.crc32(bytes(m[:-4])) & 0xffffffff
    return got == want, got, want


def main():
    bad = good = 0
    for n, lt, pkt in frames(sys.argv[1]):
        r = check(pkt, lt)
        if r is None:
            continue
        ok, got, want = r
        if ok:
            good += 1
        else:
            bad += 1
            print(f'frame {n}: BAD ICRC on wire 0x{got:08x}, computed 0x{want:08x}')
    print(f'{sys.argv[1]}: {good} RoCEv2 frames with good ICRC, {bad} bad')
    sys.exit(1 if bad or not good else 0)


if __name__ == '__main__':
    main()
