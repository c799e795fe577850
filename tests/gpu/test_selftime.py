"""Offline test of selftime.py (the diagnostic build's report): no GPU needed.

    python3 -m unittest discover -s tests/gpu -p 'test_*.py'
"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import selftime  # noqa: E402

# Two processes; the first dumped twice (cumulative: only its last dump counts).
DUMP = """dump 10 2.1
10 70 0 1 5 5000
dump 10 2.1
10 70 0 1 10 9000
10 70 0 16 40 8000
10 70 0 8 10 4000
10 70 2 6 5 6000
10 70 2 16 2 1000
dump 11 2.1
11 70 1 1 20 10000
11 70 1 16 80 16000
11 4095 2 4 100 30000
"""


class Selftime(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp()
        with os.fdopen(fd, "w") as f:
            f.write(DUMP)

    def tearDown(self):
        os.unlink(self.path)

    def test_last_dump_per_process_and_per_coll_time(self):
        user, other = selftime.summary(selftime.load([self.path]))
        by = {(m, c): (colls, per_coll, per) for m, c, colls, per_coll, per in user}
        colls, per_coll, per = by[(70, 0)]
        self.assertEqual(colls, 10)  # the second dump of pid 10, not 5 + 10
        self.assertAlmostEqual(per_coll, (9000 + 8000 + 4000) / 10)
        self.assertAlmostEqual(per["stop"][0], 4.0)
        self.assertAlmostEqual(per["stop"][1], 200.0)
        self.assertAlmostEqual(per["GroupApi"][1], 400.0)
        colls, per_coll, _ = by[(70, 1)]
        self.assertEqual((colls, per_coll), (20, (10000 + 16000) / 20))
        self.assertEqual(other, {70: [7, 7000], 4095: [100, 30000]})
        # The proxy thread's calls by entry (KernelCh starts, stops).
        self.assertEqual(
            selftime.other_entries(selftime.load([self.path])),
            {70: {"KernelCh": (5, 1200.0), "stop": (2, 500.0)}, 4095: {"ProxyStep": (100, 300.0)}},
        )

    def test_report_with_host_share(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = selftime.main([self.path, "--host-us", "42"])
        self.assertEqual(rc, 0)
        self.assertIn("mask 70 <=64Ki elements: 10 Colls, user thread 2100 ns per Coll, 5.0% of 42.0 us", out.getvalue())
        self.assertIn("mask 70 other threads (proxy): 7 calls, mean 1000 ns\n    KernelCh            5 calls, mean   1200 ns", out.getvalue())

    def test_no_coll_is_an_error(self):
        with open(self.path, "w") as f:
            f.write("dump 1 2.0\n1 6 2 16 3 300\n")
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(selftime.main([self.path]), 1)


if __name__ == "__main__":
    unittest.main()
