"""ci/plot-bench on a small fixture: the medians it computes and the PNGs it writes.

    python3 -m pytest ci/tests     (or: python3 ci/tests/test_plot_bench.py)

Needs matplotlib (Debian's python3-matplotlib, or pip install matplotlib).
"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', 'plot-bench')
FIXTURE = os.path.join(HERE, 'plot-bench-fixture.txt')


def load():
    loader = importlib.machinery.SourceFileLoader('plot_bench', SCRIPT)
    spec = importlib.util.spec_from_loader('plot_bench', loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class PlotBench(unittest.TestCase):
    def setUp(self):
        self.pb = load()
        with open(FIXTURE) as fh:
            self.runs, self.units = self.pb.parse(fh.read().splitlines())
        self.summary = self.pb.summarise(self.runs)

    def test_medians_min_max_and_counts(self):
        self.assertEqual(self.summary[('send_bw-64B', 'rctb')], (0.25, 0.20, 0.30, 3))
        self.assertEqual(self.summary[('send_bw-64B', 'perftest')], (0.45, 0.40, 0.50, 3))
        self.assertEqual(self.summary[('nvme-randread-4KiB-qd1', 'fio+kernel')], (601, 590, 611, 3))
        self.assertEqual(self.summary[('sim-sweep-10', 'rctb')], (10000, 9000, 11000, 3))
        self.assertEqual(self.units['nvme-randread-4KiB-qd1'], 'IOPS')

    def test_bad_lines_are_skipped(self):
        self.assertNotIn(('write_bw-4KiB', 'perftest'), self.runs)
        self.assertEqual(sum(len(v) for v in self.runs.values()), 25)

    def test_series_pick_their_workloads(self):
        nvme = self.pb.nvme_series(self.summary)
        self.assertEqual([p[0] for p in nvme['rctb']], [1, 2, 32])
        self.assertEqual(set(nvme), {'fio+kernel', 'rctb', 'rctb.nvmeof'})
        roce = self.pb.roce_series(self.summary)
        # the -t32 row and the NVMe 1 MiB row are not message sizes
        self.assertEqual([p[0] for p in roce['perftest']], [64, 4096, 1048576])
        self.assertEqual([p[0] for p in roce['rctb[poll=adaptive]']], [4096])
        self.assertEqual([p[:2] for p in self.pb.sim_series(self.summary)['rctb']], [(10, 10000), (1000, 150)])

    def test_one_parser_and_the_table_s_tool_order(self):
        # plot-bench reads lines with bench_table.py's parser ...
        with open(FIXTURE) as fh:
            lines = fh.read().splitlines()
        runs, units, _, tools = self.pb.bench_table.parse(lines)
        self.assertEqual((runs, units), (self.runs, self.units))
        # ... and its legends list the tools as the table's columns do.
        order = self.pb.bench_table.order_tools(tools)
        table = subprocess.run([sys.executable, os.path.join(HERE, '..', 'vm', 'bench_table.py'), FIXTURE],
                               capture_output=True, text=True).stdout
        nvme_cols = next(line for line in table.splitlines() if line.startswith('| workload  ') and 'fio' in line)
        nvme_cols = [c.strip() for c in nvme_cols.strip('|').split('|')][2:]
        self.assertEqual(self.pb.tool_order(self.pb.nvme_series(self.summary), order), nvme_cols)
        self.assertEqual(nvme_cols, ['fio+kernel', 'rctb', 'rctb.nvmeof'])
        roce = self.pb.roce_series(self.summary)
        self.assertEqual(self.pb.tool_order(roce, order), ['perftest', 'rctb', 'rctb[poll=adaptive]'])
        # without the input's order: the same ranks, by first appearance
        self.assertEqual(self.pb.tool_order(['nvmeof', 'rctb[b]', 'rctb', 'fio+kernel', 'rctb[a]']),
                         ['fio+kernel', 'rctb', 'rctb[b]', 'rctb[a]', 'nvmeof'])

    def test_script_writes_the_pngs(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, SCRIPT, '-o', d, FIXTURE], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            for name in ('bench-nvme-qd.png', 'bench-roce-size.png', 'bench-sim-sweep.png'):
                p = os.path.join(d, name)
                self.assertTrue(os.path.isfile(p), name)
                with open(p, 'rb') as fh:
                    self.assertEqual(fh.read(8), b'\x89PNG\r\n\x1a\n', name)

    def test_no_plottable_workload_fails(self):
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, 'bench.txt')
            with open(f, 'w') as fh:
                fh.write('write_bw-4KiB perftest 8.0 MB/s\n')
            r = subprocess.run([sys.executable, SCRIPT, '-o', d, f], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertEqual([n for n in os.listdir(d) if n.endswith('.png')], [])

    def test_cost_table(self):
        lines = ['send_bw-4KiB rctb/rx ops=2000 user_s=1.00 sys_s=0.20 vcsw=10 ivcsw=30',
                 'send_bw-4KiB rctb/rx ops=2000 user_s=3.00 sys_s=0.40 vcsw=10 ivcsw=10',
                 'send_bw-4KiB rctb/tx ops=2000 user_s=0.50 sys_s=1.00 vcsw=4 ivcsw=4',
                 'send_bw-4KiB rctb rxe rxe1:sent_pkts=+8000 rxe0:duplicate_request=+12 rxe1:completer_retry_err=+3',
                 'send_bw-4KiB rctb/rx syscalls=3000 ops=2000 per_op=1.50 top=ioctl:1000',
                 'garbage']
        per, rxe = self.pb.parse_cost(lines)
        self.assertEqual(per[('send_bw-4KiB', 'rctb/rx')]['user_us'], [500.0, 1500.0])
        self.assertEqual(per[('send_bw-4KiB', 'rctb/rx')]['sc'], [1.5])
        self.assertEqual(rxe[('send_bw-4KiB', 'rctb')]['duplicate_request'], 12)
        table = self.pb.cost_table(lines)
        self.assertIn('| send_bw-4KiB | rctb/rx | 2 | 1000 | 150 | 0.015 | 1.50 | '
                      'completer_retry_err 3, duplicate_request 12 |', table)


if __name__ == '__main__':
    unittest.main()
