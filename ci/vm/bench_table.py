#!/usr/bin/env python3
"""Turn bench.txt into side-by-side tables (ci/hw-validate --bench).

bench.txt has one measurement per line: `<workload> <tool> <value> <unit>`.
Each table has one row per workload and one column per tool; each cell is
the median of that tool's runs with the range and the number of runs, so
our tools sit beside perftest and the kernel's NVMe host measured in the
same boot. The NVMe workloads (`nvme-*`) get a table of their own, the rest
another, each with only the tools that have a figure in it.

Columns: the yardsticks first (perftest, fio+kernel, then other fio+...
tools), then rctb, its knob variants `rctb[...]` and other `rctb-*` tools,
then the Python initiators rctb.nvmeof and nvmeof (the seed's own), then
anything else; within a rank, in the order they first appear.
Rows: in the order they first appear, except that the rows of one family
that differ only in a trailing number (`nvme-randread-4KiB-qd1` ...
`-qd64`) stay together, in numeric order.
Lines that are not `<workload> <tool> <finite number> <unit>`, or that start
with #, are skipped.

ci/plot-bench imports parse() and order_tools() from here, so its curves
read the lines and order the tools as these tables do.
Usage: bench_table.py bench.txt
"""
import math
import re
import statistics
import sys


def tool_rank(tool):
    """Where a tool's column goes (lower: further left)."""
    if tool == 'perftest':
        return 0
    if tool == 'fio+kernel':
        return 1
    if tool.startswith('fio+'):
        return 2
    if tool == 'rctb':
        return 3
    if tool.startswith('rctb['):
        return 4
    if tool.startswith('rctb-'):
        return 5
    if tool == 'rctb.nvmeof':
        return 6
    if tool == 'nvmeof':
        return 7
    return 8


_TRAILING_NUMBER = re.compile(r'^(.*?)(\d+)$')


def row_key(workload, first_seen):
    """Rows of one family (the name without its trailing number) together,
    at the family's first appearance, by that number."""
    m = _TRAILING_NUMBER.match(workload)
    family, n = (m.group(1), int(m.group(2))) if m else (workload, -1)
    return (first_seen[family], n, first_seen[workload])


def order_tools(tools):
    """The tools (a list in the order they first appear) as the columns go:
    by tool_rank, then by first appearance."""
    first = {}
    for i, t in enumerate(tools):
        first.setdefault(t, i)
    return sorted(first, key=lambda t: (tool_rank(t), first[t]))


def parse(lines):
    """From raw lines: (workload, tool) -> [values], workload -> unit (its
    first line's), and the workloads and the tools in the order they first
    appear."""
    runs = {}  # (workload, tool) -> [values]
    units = {}  # workload -> unit
    workloads, tools = [], []
    for line in lines:
        f = line.split()
        if len(f) != 4 or f[0].startswith('#'):
            continue
        w, t, v, u = f
        try:
            v = float(v)
        except ValueError:
            continue
        if not math.isfinite(v):
            continue
        if w not in workloads:
            workloads.append(w)
        if t not in tools:
            tools.append(t)
        runs.setdefault((w, t), []).append(v)
        units.setdefault(w, u)
    return runs, units, workloads, tools


def table(title, workloads, tools, runs, units):
    def cell(w, t):
        vs = runs.get((w, t))
        if not vs:
            return '-'
        fmt = '{:.0f}' if units[w] == 'IOPS' else '{:.1f}'
        s = fmt.format(statistics.median(vs))
        if len(vs) > 1:
            s += f' ({fmt.format(min(vs))}-{fmt.format(max(vs))}, n={len(vs)})'
        return s

    head = ['workload', 'unit'] + tools
    rows = [[w, units[w]] + [cell(w, t) for t in tools] for w in workloads]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    print(title)
    print('| ' + ' | '.join(h.ljust(widths[i]) for i, h in enumerate(head)) + ' |')
    print('|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    for r in rows:
        print('| ' + ' | '.join(c.ljust(widths[i]) for i, c in enumerate(r)) + ' |')


def main():
    try:
        lines = open(sys.argv[1]).read().splitlines()
    except OSError as e:
        print(f'no bench results: {e}')
        return 1
    runs, units, workloads, tools = parse(lines)
    if not workloads:
        print('no bench results')
        return 1
    first_seen = {}
    for i, w in enumerate(workloads):
        m = _TRAILING_NUMBER.match(w)
        for k in (w, m.group(1) if m else w):
            first_seen.setdefault(k, i)
    workloads.sort(key=lambda w: row_key(w, first_seen))
    tools = order_tools(tools)

    groups = [
        ('medians of the runs (min-max, n=runs), all in one boot:',
         [w for w in workloads if not w.startswith('nvme-')]),
        ('NVMe-oF/RDMA reads, medians of the runs (min-max, n=runs), all in one boot:',
         [w for w in workloads if w.startswith('nvme-')]),
    ]
    first = True
    for title, ws in groups:
        if not ws:
            continue
        ts = [t for t in tools if any((w, t) in runs for w in ws)]
        if not first:
            print()
        table(title, ws, ts, runs, units)
        first = False
    return 0


if __name__ == '__main__':
    sys.exit(main())
