"""Give the C heap's free memory back to the system after work that peaks and drops.

A cache repack reads every object of the repository through libgit2 (whose object cache
keeps up to its limit of them) and then drops the repository: the memory is free, but glibc
keeps it in its arenas, where later small allocations scatter over it. Resident memory then
creeps up a few kilobytes per mirrored change although nothing leaks. `trim` returns the
free pages (glibc's `malloc_trim`); elsewhere (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

_Trim = Callable[[int], int]


def _find_trim() -> _Trim | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        function = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: _Trim = function
    return trim


_TRIM = _find_trim()


def trim() -> bool:
    """Return free heap memory to the system; False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
