"""Offline tests of benches/callgrind.py's parser (no valgrind needed)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind  # noqa: E402

# Two objects; the plugin's name is first given on a `cob=` line; a call's
# inclusive cost line moves the address but is not self cost; relative and
# repeated (`*`) addresses.
SAMPLE = """\
# callgrind format
version: 1
positions: instr line
events: Ir
summary: 1000

ob=(1) /bin/host
fl=(1) ???
fn=(1) run
0x1000 0 10
+4 0 10
cob=(2) /lib/plugin.so
cfi=(2) ???
cfn=(2) start
calls=10 0x5000 0
+3 0 900
+5 0 10

ob=(2)
fl=(2)
fn=(2)
0x5000 0 10
+40 0 10
+30 0 10
* 0 10
+60 0 3
"""


class Parse(unittest.TestCase):
    def setUp(self):
        self.total, self.per_ob = callgrind.parse(SAMPLE.splitlines(True))

    def test_total_and_objects_named_from_cob(self):
        self.assertEqual(self.total, 1000)
        self.assertEqual(set(self.per_ob), {"/bin/host", "/lib/plugin.so"})

    def test_call_cost_line_is_not_self_cost(self):
        host = self.per_ob["/bin/host"]
        self.assertNotIn(0x1007, host)
        self.assertEqual(host[0x100C], 10)  # relative to the call line's address

    def test_lines_every_iteration(self):
        plugin = self.per_ob["/lib/plugin.so"]
        self.assertEqual(plugin[0x5046], 20)  # '*' repeats the address
        # 0x5000, 0x5028 (line 0x140) and 0x5046 (line 0x141): two lines at
        # 10 iterations; 0x5082 ran 3 times, below half.
        self.assertEqual(callgrind.lines_every_iteration(plugin, 10), 2)
        self.assertEqual(callgrind.lines_every_iteration(plugin, 6), 3)


if __name__ == "__main__":
    unittest.main()
