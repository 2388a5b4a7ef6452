"""Process-level settings that make small-model CPU training faster.

PyTorch on the CPU allocates its activations with ``malloc``. glibc serves blocks above
its mmap threshold with fresh ``mmap`` pages and returns them on ``free``, so every
training step pays page faults to zero the same few megabytes again (thousands of minor
faults per iteration for the paper's Token Reversal batch). Raising the mmap and trim
thresholds keeps those blocks in the heap for reuse. It is a whole-process setting, so
the library never applies it on import: our own entry points (the sweep workers, the
benchmarks) call :func:`keep_freed_memory`, and users may call it at the top of a script.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def keep_freed_memory(threshold_bytes: int = 256 * 1024 * 1024) -> bool:
    """Keep freed blocks below ``threshold_bytes`` in the heap (glibc ``mallopt``).

    :return: True when applied; False on platforms without glibc (nothing changes).
    """
    if threshold_bytes < 1:
        raise ValueError(f"threshold_bytes must be a positive byte count; got {threshold_bytes!r}")
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    threshold = min(int(threshold_bytes), 2**31 - 1)
    ok_mmap = mallopt(M_MMAP_THRESHOLD, threshold)
    ok_trim = mallopt(M_TRIM_THRESHOLD, min(2 * threshold, 2**31 - 1))
    return bool(ok_mmap and ok_trim)
