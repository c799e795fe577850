"""The evring NCCL profiler plugin and a ctypes wrapper of its control
functions (include/evring.h in the repository).

`path()` is the library to give NCCL (NCCL_PROFILER_PLUGIN). The other
functions load that same library into this process; when NCCL loads it too
(same path, same process), they act on the plugin NCCL is using. Called
before NCCL's first init, settings are kept and applied at that init.
"""

import ctypes
import os

__all__ = ["path", "set_mask", "get_mask", "set_output", "stats", "flush", "version", "STATS_FIELDS"]

_LIB_NAME = "libnccl-profiler-evring.so"

# struct evring_stats_v1 after its two uint32 words (version, size): uint64
# counters in this order. tests check the list against include/evring.h.
STATS_FIELDS = (
    "live", "started", "completed", "start_calls", "drop_slab_full",
    "drop_unknown_type", "drop_null_context", "drop_after_finalize",
    "drop_null_descr", "drop_ring_full", "records_consumed", "records_written",
    "records_unwritten", "write_errors", "late_children", "foreign_parents",
    "foreign_contexts", "stale_handles", "unknown_handles", "null_handles",
    "double_stops", "record_after_stop", "unknown_states", "bad_strings",
    "forced_pressure", "forced_age", "forced_finalize", "children_incomplete",
    "inits", "finalizes", "bad_contexts", "context_full", "panics",
    "record_lines", "record_dropped", "record_over_limit",
    "late_context_events", "trace_rotations", "records_rotated_away",
    "symbols_full", "masked_starts", "log_lost",
)

_lib = None


def path():
    """Absolute path of the plugin library inside this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


def _load():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(path())
        lib.evring_stats.restype = ctypes.c_size_t
        lib.evring_stats.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.evring_set_mask.restype = None
        lib.evring_set_mask.argtypes = [ctypes.c_int]
        lib.evring_get_mask.restype = ctypes.c_int
        lib.evring_get_mask.argtypes = []
        lib.evring_set_output.restype = None
        lib.evring_set_output.argtypes = [ctypes.c_int]
        lib.evring_flush.restype = None
        lib.evring_flush.argtypes = []
        lib.evring_flush_wait.restype = ctypes.c_int
        lib.evring_flush_wait.argtypes = [ctypes.c_int]
        lib.evring_version.restype = ctypes.c_char_p
        lib.evring_version.argtypes = []
        _lib = lib
    return _lib


def set_mask(mask):
    """Sets NCCL's event mask (NCCL applies it to operations enqueued afterwards)."""
    _load().evring_set_mask(int(mask))


def get_mask():
    """The event mask in force (or the one the first init will use)."""
    return _load().evring_get_mask()


def set_output(enabled):
    """Turns trace writing on or off (records are still counted)."""
    _load().evring_set_output(1 if enabled else 0)


def stats():
    """Every counter of the plugin, as a dict (plus `version` and `size`)."""
    words = 1 + len(STATS_FIELDS) + 64  # room for counters a newer plugin adds
    buf = (ctypes.c_uint64 * words)()
    n = _load().evring_stats(ctypes.byref(buf), ctypes.sizeof(buf))
    head = buf[0]
    out = {"version": head & 0xFFFFFFFF, "size": head >> 32}
    known = max(0, (min(n, out["size"] or n) - 8) // 8)
    for i, name in enumerate(STATS_FIELDS[:known]):
        out[name] = buf[1 + i]
    return out


def flush(timeout_ms=None):
    """Writes every record completed so far and flushes every trace file.
    Without a timeout it waits while the writer makes progress; with one it
    waits at most that long. True if the flush finished."""
    lib = _load()
    if timeout_ms is None:
        lib.evring_flush()
        return True
    return bool(lib.evring_flush_wait(int(timeout_ms)))


def version():
    """The plugin's build version."""
    return _load().evring_version().decode()
