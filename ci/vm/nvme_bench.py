#!/usr/bin/env python3
"""NVMe-oF/RDMA reads through a Python initiator with the `nvmeof` API
(ci/hw-validate --bench, bench.d/py-nvme.sh).

The same code drives both Python tools of the bench table, so the column
difference is the library, not the script:
  --lib nvmeof       the `nvmeof` package from PyPI (on its `ibverbs` wheel)
  --lib rctb.nvmeof  rctb's Python package, which has the same API

Queues are brought up by hand with the API's public pieces (RDMAQueue,
HostBuffer, the protocol module's capsule builders), as its users do when
they want more than one command in flight: an admin queue (Fabrics
Connect, CC.EN, CSTS.RDY, Identify), then one I/O queue whose depth is
the largest depth asked for plus one (an NVMe queue holds depth - 1). Reads
are submitted with RDMAQueue.submit and reaped with RDMAQueue.poll, which
never blocks: the loop busy-polls, as these libraries do.

For each depth D in --qds: random 4 KiB reads (uniform over the namespace,
a fixed seed), D in flight, for --seconds; then 1 MiB sequential reads,
--seq-qd in flight, for --seq-seconds. Each measurement prints one line
  BENCH nvme-randread-4KiB-qd<D> <tool> <IOPS> IOPS
  BENCH nvme-seqread-1MiB <tool> <MB/s> MB/s     (MB = 2^20 bytes, as perftest)
Time runs from the first submission to the last completion (in-flight reads
are drained, not dropped). Anything else goes to stderr. With --cost-file,
each measurement also appends the CPU its loop alone took (getrusage of the
process, every thread, around the loop: no interpreter start, import or
connect) in lib.sh cost_run's format, as tool `<tool>/loop`:
  <workload> <tool>/loop ops=<n> user_s=<x> sys_s=<y> vcsw=<n> ivcsw=<n>
"""
import argparse
import importlib
import random
import resource
import sys
import time
import uuid

KIB4 = 4096
MIB = 1 << 20


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def bring_up(lib, p, a, depth):
    """Admin queue, controller enabled, namespace identified, one I/O queue."""
    host_id = uuid.UUID("6c1d4b4e-2d9c-4c55-9f4e-0000000b3e11")
    host_nqn = "nqn.2014-08.org.nvmexpress:uuid:%s" % host_id
    admin = lib.RDMAQueue(a.addr, a.port, 0, p.ADMIN_QUEUE_DEPTH, source=a.source)
    with lib.HostBuffer(admin.pd, 1024) as data:
        data.write(p.connect_data(host_id, a.nqn, host_nqn, 0xFFFF))
        c = admin.execute(p.fabrics_connect(0, admin.depth, data), data_owner=data, timeout=a.timeout)
    cntlid = c.result & 0xFFFF
    cap = admin.execute(p.property_get(p.REG_CAP, 8), timeout=a.timeout).result
    mps = (cap >> 48) & 0xF
    admin.execute(
        p.property_set(p.REG_CC, p.CC_ENABLE | p.CC_IOSQES | p.CC_IOCQES | (mps << p.CC_MPS_SHIFT)),
        timeout=a.timeout,
    )
    deadline = time.monotonic() + a.timeout
    while not admin.execute(p.property_get(p.REG_CSTS, 4), timeout=a.timeout).result & p.CSTS_READY:
        if time.monotonic() > deadline:
            raise TimeoutError("CSTS.RDY did not come up in %.0f s" % a.timeout)
        time.sleep(0.01)
    with lib.HostBuffer(admin.pd, 4096) as ident:
        admin.execute(p.identify(ident, controller=True), data_owner=ident, timeout=a.timeout)
        info = p.ControllerInfo.from_bytes(ident.read(4096))
        admin.execute(p.identify(ident, nsid=a.nsid), data_owner=ident, timeout=a.timeout)
        ns = p.NamespaceInfo.from_bytes(a.nsid, ident.read(4096))
    max_transfer = (4096 << mps) << info.mdts if info.mdts else p.MAX_KEYED_SGL_LENGTH
    admin.execute(p.set_features(p.FEAT_NUMBER_OF_QUEUES, 0), timeout=a.timeout)
    mqes = (cap & 0xFFFF) + 1
    if depth > mqes:
        raise RuntimeError("depth %d asked for, the controller's queues hold %d (CAP.MQES)" % (depth, mqes))
    io = lib.RDMAQueue(a.addr, a.port, 1, depth, controller_id=cntlid, source=a.source)
    with lib.HostBuffer(io.pd, 1024) as data:
        data.write(p.connect_data(host_id, a.nqn, host_nqn, cntlid))
        io.execute(p.fabrics_connect(1, depth, data), data_owner=data, timeout=a.timeout)
    log("controller %d (%s), nsid %d: %d blocks of %d bytes, max transfer %d, I/O queue depth %d"
        % (cntlid, info.model, ns.nsid, ns.size_lbas, ns.lba_size, max_transfer, depth))
    return admin, io, ns, max_transfer


def run(p, io, buf, ns, qd, bs, seconds, next_lba):
    """Reads of `bs` bytes at `next_lba()`, `qd` in flight, for `seconds`;
    each in-flight read has its own slice of `buf`. Returns (reads, seconds)."""
    blocks = bs // ns.lba_size
    free = list(range(qd))
    slot_of = {}
    done = 0
    rw, read = p.rw_command, p.OPC_READ
    t0 = time.perf_counter()
    stop = t0 + seconds
    submitting = True
    while True:
        while submitting and free:
            slot = free.pop()
            cmd = rw(read, ns.nsid, next_lba(), blocks, buf, lba_size=ns.lba_size, buffer_offset=slot * bs)
            slot_of[io.submit(cmd, data_owner=buf).command_id] = slot
        for r in io.poll():
            r.response.raise_for_status()
            free.append(slot_of.pop(r.command_id))
            done += 1
        if submitting and time.perf_counter() >= stop:
            submitting = False
        if not submitting and not slot_of:
            return done, time.perf_counter() - t0


def measured(cost_file, workload, tool, fn):
    """fn() -> (reads, seconds), with the loop's rusage appended to cost_file."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    n, secs = fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if cost_file:
        with open(cost_file, "a") as f:
            f.write("%s %s/loop ops=%d user_s=%.2f sys_s=%.2f vcsw=%d ivcsw=%d\n" % (
                workload, tool, n, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime,
                r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw))
    return n, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, choices=["nvmeof", "rctb.nvmeof"])
    ap.add_argument("--tool", required=True, help="the tool name in the BENCH lines")
    ap.add_argument("--addr", required=True)
    ap.add_argument("--port", type=int, default=4420)
    ap.add_argument("--nqn", required=True)
    ap.add_argument("--source", help="the initiator's address (selects the RDMA device)")
    ap.add_argument("--nsid", type=int, default=2)
    ap.add_argument("--qds", default="1 32", help="depths for 4 KiB random reads, space-separated")
    ap.add_argument("--seconds", type=float, default=2.5, help="per depth")
    ap.add_argument("--seq-qd", type=int, default=4, help="depth of the 1 MiB sequential reads (0: none)")
    ap.add_argument("--seq-seconds", type=float, default=2.5)
    ap.add_argument("--timeout", type=float, default=10.0, help="per admin command")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cost-file", help="append each loop's CPU time here (lib.sh cost.txt format)")
    a = ap.parse_args()
    qds = [int(q) for q in a.qds.split()]
    if any(q < 1 or q > 255 for q in qds) or not 0 <= a.seq_qd <= 255:
        ap.error("depths must be 1 to 255")

    lib = importlib.import_module(a.lib)
    p = importlib.import_module(a.lib + ".protocol")
    log("%s %s, python %s" % (a.lib, getattr(lib, "__version__", "?"), sys.version.split()[0]))
    if not qds and not a.seq_qd:
        ap.error("nothing to do: no --qds and --seq-qd 0")
    depth = max(qds + [a.seq_qd]) + 1
    admin, io, ns, max_transfer = bring_up(lib, p, a, depth)
    try:
        if ns.lba_size > KIB4 or KIB4 % ns.lba_size:
            raise RuntimeError("block size %d does not divide 4 KiB" % ns.lba_size)
        if a.seq_qd and MIB > max_transfer:
            raise RuntimeError("1 MiB is more than the controller's transfer limit %d" % max_transfer)
        buf = lib.HostBuffer(io.pd, max(qds + [0]) * KIB4 + a.seq_qd * MIB)
        rng = random.Random(a.seed)
        slots = ns.size_lbas * ns.lba_size // KIB4
        per4k = KIB4 // ns.lba_size
        for qd in qds:
            w = "nvme-randread-4KiB-qd%d" % qd
            n, secs = measured(a.cost_file, w, a.tool,
                               lambda: run(p, io, buf, ns, qd, KIB4, a.seconds, lambda: rng.randrange(slots) * per4k))
            print("BENCH %s %s %.0f IOPS" % (w, a.tool, n / secs), flush=True)
            log("%d random 4 KiB reads at depth %d in %.2f s" % (n, qd, secs))
        if a.seq_qd:
            per1m = MIB // ns.lba_size
            span = ns.size_lbas // per1m * per1m
            if span == 0:
                sys.exit("nvme_bench: namespace %d holds %d blocks of %d bytes, less than the 1 MiB "
                         "that --seq-qd reads (use --seq-qd 0)" % (a.nsid, ns.size_lbas, ns.lba_size))
            pos = [0]

            def seq():
                lba = pos[0]
                pos[0] = (lba + per1m) % span
                return lba

            n, secs = measured(a.cost_file, "nvme-seqread-1MiB", a.tool,
                               lambda: run(p, io, buf, ns, a.seq_qd, MIB, a.seq_seconds, seq))
            print("BENCH nvme-seqread-1MiB %s %.1f MB/s" % (a.tool, n / secs), flush=True)
            log("%d sequential 1 MiB reads at depth %d in %.2f s" % (n, a.seq_qd, secs))
        buf.close()
    finally:
        io.close()
        admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
