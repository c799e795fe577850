"""Run inside a fresh venv where only the evring wheel is installed:
checks every wrapper against the plugin library the wheel carries.

    python check_wheel.py REPO/include/evring.h

The plugin is also driven the way NCCL drives it (its ncclProfiler_v6
table: init, finalize), through the same loaded library, so the counters
`stats()` returns are shown to be those of the plugin NCCL would use.
"""

import ctypes
import os
import re
import subprocess
import sys

import evring

header = sys.argv[1]

# The package is installed (not imported from the source tree).
assert "site-packages" in evring.__file__, evring.__file__

# python -m evring path: an existing shared library, the one the module loads.
out = subprocess.run([sys.executable, "-m", "evring", "path"], check=True,
                     capture_output=True, text=True).stdout.strip()
assert out == evring.path(), (out, evring.path())
assert os.path.isfile(out) and out.endswith("libnccl-profiler-evring.so"), out
with open(out, "rb") as f:
    assert f.read(4) == b"\x7fELF"
assert subprocess.run([sys.executable, "-m", "evring", "nonsense"],
                      capture_output=True).returncode == 2

assert evring.version().startswith("evring "), evring.version()

# The counter names match the C header's struct, in order.
text = open(header).read()
body = text[text.index("struct evring_stats_v1 {"):]
body = body[:body.index("};")]
names = re.findall(r"uint64_t\s+(\w+);", body)
assert tuple(names) == evring.STATS_FIELDS, (names, evring.STATS_FIELDS)

# Before any init: settings are kept for the first init, counters are zero.
evring.set_mask(4095)
assert evring.get_mask() == 4095
evring.set_mask(70)
assert evring.get_mask() == 70
s = evring.stats()
assert s["version"] == 1 and s["size"] == 8 + 8 * len(evring.STATS_FIELDS), s
assert all(s[k] == 0 for k in evring.STATS_FIELDS), s
assert evring.flush() is True
assert evring.flush(timeout_ms=1000) is True
evring.set_output(False)
evring.set_output(True)

# NCCL's view: the v6 table of the same library; no trace files.
os.environ["NCCL_PROFILE_DUMP_FILE"] = ""
lib = ctypes.CDLL(evring.path())
Init = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                        ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int,
                        ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
Fin = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class Table(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", Init), ("start", ctypes.c_void_p),
                ("stop", ctypes.c_void_p), ("record", ctypes.c_void_p), ("finalize", Fin)]


table = Table.in_dll(lib, "ncclProfiler_v6")
assert table.name == b"evring", table.name
ctx = ctypes.c_void_p()
mask = ctypes.c_int(0)
assert table.init(ctypes.byref(ctx), 42, ctypes.byref(mask), b"wheel-test", 1, 1, 0, None) == 0
assert ctx.value, "a context"
assert mask.value == 70, ("the mask set before init is NCCL's", mask.value)
s = evring.stats()
assert s["inits"] == 1, s
evring.set_mask(6)
assert evring.get_mask() == 6 and mask.value == 6, "set_mask writes NCCL's mask"
assert table.finalize(ctx) == 0
assert evring.flush(timeout_ms=5000) is True
s = evring.stats()
assert s["finalizes"] == 1 and s["live"] == 0 and s["panics"] == 0, s
print("wheel ok:", evring.path(), evring.version(), "inits", s["inits"], "finalizes", s["finalizes"])
