"""ci/vm/bench_table.py: the one parser of raw bench lines (ci/plot-bench
imports it) and the tools' column order.

    python3 -m pytest ci/tests     (or: python3 ci/tests/test_bench_table.py)
"""
import importlib.util
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', 'vm', 'bench_table.py')
FIXTURE = os.path.join(HERE, 'plot-bench-fixture.txt')


def load():
    spec = importlib.util.spec_from_file_location('bench_table', SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def header(table_text, title_start):
    """The tool columns of the table whose title starts with title_start."""
    lines = table_text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    return [c.strip() for c in lines[i + 1].strip('|').split('|')][2:]


class BenchTable(unittest.TestCase):
    def setUp(self):
        self.bt = load()

    def test_parse_keeps_result_lines_only(self):
        runs, units, workloads, tools = self.bt.parse([
            'send_bw-64B rctb 0.30 MB/s',
            '# 1 2 3',  # a comment that happens to have four fields and a number
            'write_bw-4KiB perftest nan MB/s',
            'write_bw-4KiB perftest inf MB/s',
            'not a result line',
            'send_bw-64B perftest 0.40 MB/s',
            'send_bw-64B rctb 0.20 MB/s',
        ])
        self.assertEqual(runs, {('send_bw-64B', 'rctb'): [0.30, 0.20], ('send_bw-64B', 'perftest'): [0.40]})
        self.assertEqual(units, {'send_bw-64B': 'MB/s'})
        self.assertEqual(workloads, ['send_bw-64B'])
        self.assertEqual(tools, ['rctb', 'perftest'])

    def test_tool_order_yardsticks_rctb_variants_python_rest(self):
        seen = ['zz', 'nvmeof', 'rctb[qps=4]', 'rctb.nvmeof', 'rctb', 'rctb[poll=busy]', 'fio+spdk',
                'fio+kernel', 'perftest', 'aa', 'rctb-udp', 'rctb']
        self.assertEqual(self.bt.order_tools(seen),
                         ['perftest', 'fio+kernel', 'fio+spdk', 'rctb', 'rctb[qps=4]', 'rctb[poll=busy]',
                          'rctb-udp', 'rctb.nvmeof', 'nvmeof', 'zz', 'aa'])

    def test_tables_of_the_fixture(self):
        r = subprocess.run([sys.executable, SCRIPT, FIXTURE], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(header(r.stdout, 'NVMe-oF'), ['fio+kernel', 'rctb', 'rctb.nvmeof'])
        self.assertEqual(header(r.stdout, 'medians'), ['perftest', 'rctb', 'rctb[poll=adaptive]'])
        self.assertIn('| nvme-randread-4KiB-qd1  | IOPS | 601 (590-611, n=3) | 943  | -           |', r.stdout)
        self.assertNotIn('nan', r.stdout)
        self.assertNotIn('| # ', r.stdout)


if __name__ == '__main__':
    unittest.main()
