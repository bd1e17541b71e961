#!/usr/bin/env python3
"""Turn bench.txt into a side-by-side table (ci/hw-validate --bench).

bench.txt has one measurement per line: `<workload> <tool> <value> <unit>`.
The table has one row per workload, one column per tool (in the order they
first appear), and each cell is the median of that tool's runs, with the
range and the number of runs, so our tools sit beside perftest and the
kernel's NVMe host measured in the same boot.
Usage: bench_table.py bench.txt
"""
import statistics
import sys


def main():
    runs = {}  # (workload, tool) -> [values]
    units = {}  # workload -> unit
    workloads, tools = [], []
    try:
        lines = open(sys.argv[1]).read().splitlines()
    except OSError as e:
        print(f'no bench results: {e}')
        return 1
    for line in lines:
        f = line.split()
        if len(f) != 4:
            continue
        w, t, v, u = f
        try:
            v = float(v)
        except ValueError:
            continue
        if w not in workloads:
            workloads.append(w)
        if t not in tools:
            tools.append(t)
        runs.setdefault((w, t), []).append(v)
        units.setdefault(w, u)
    if not workloads:
        print('no bench results')
        return 1

    def cell(w, t):
        vs = runs.get((w, t))
        if not vs:
            return '-'
        med = statistics.median(vs)
        fmt = '{:.0f}' if units[w] == 'IOPS' else '{:.1f}'
        s = fmt.format(med)
        if len(vs) > 1:
            s += f' ({fmt.format(min(vs))}-{fmt.format(max(vs))}, n={len(vs)})'
        return s

    head = ['workload', 'unit'] + tools
    rows = [[w, units[w]] + [cell(w, t) for t in tools] for w in workloads]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    print('medians of the runs (min-max, n=runs), all in one boot:')
    print('| ' + ' | '.join(h.ljust(widths[i]) for i, h in enumerate(head)) + ' |')
    print('|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    for r in rows:
        print('| ' + ' | '.join(c.ljust(widths[i]) for i, c in enumerate(r)) + ' |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
