"""Where the harness goes past Unicorn's public Python API (unicorn 2.1),
each for a reason the public API cannot meet; every other use of Unicorn
is through its public API. The only module that reaches the binding's
internals (`uclib`, `Uc._uch`, `Uc._callbacks`).

- The compiled tracer (harness/verify/csrc/trace.c) drives the engine
  through Unicorn's C API itself: it needs the engine's handle and the
  addresses of the C functions it calls, which the binding does not give
  (`engine_handle`, `ENGINE_FUNCTIONS`).
- Reads on the Python hook's path (`BatchReader`, `read_memory`): the
  public reads allocate on every call, and Uc.mem_read leaves a reference
  cycle for each size it reads, which piles up while the cycle collector
  is paused over a run (harness.gc_pause).
- A hook removed (`delete_hook`): the binding keeps the hook's callback as
  a ctypes.cast, whose `_objects` hold the callback itself, and through
  its closure the engine: a cycle that keeps the engine alive until the
  cycle collector runs, unless it is cleared as the hook goes.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from unicorn import Uc, UcError
from unicorn.unicorn_py3.unicorn import uclib  # the C library as the binding loaded it (no public name)

# The addresses of the functions the compiled tracer calls (abi.Engine's), cast once a process.
ENGINE_FUNCTIONS = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (
    uclib.uc_reg_read_batch, uclib.uc_mem_read, uclib.uc_emu_start, uclib.uc_emu_stop, uclib.uc_hook_add,
    uclib.uc_hook_del, uclib.uc_ctl))


def engine_handle(uc: Uc) -> int:
    """The uc_engine pointer of `uc`, for the compiled tracer."""
    return uc._uch.value  # the binding has no public accessor for it


def delete_hook(uc: Uc, handle: int) -> None:
    """Uc.hook_del, and the cycle its callback is in cleared, so that the
    engine goes as soon as nothing else holds it."""
    callback = getattr(uc, "_callbacks", {}).get(handle)  # the binding's own record of it: no public way there
    uc.hook_del(handle)
    if isinstance(getattr(callback, "_objects", None), dict):
        callback._objects.clear()


def read_memory(uc: Uc, address: int, size: int) -> bytes:
    """`size` bytes at `address` (UcError where not all mapped), read into
    a bytearray: Uc.mem_read's buffer is of a new ctypes array type of that
    size, a reference cycle for the cycle collector."""
    if size <= 0:
        return b""
    buffer = bytearray(size)
    status = uclib.uc_mem_read(uc._uch, address, ctypes.byref(ctypes.c_char.from_buffer(buffer)), size)
    if status:
        raise UcError(status)
    return bytes(buffer)


class BatchReader:
    """uc_reg_read_batch into buffers made once: the Python hook's reader
    of a stop's registers (Uc.reg_read_batch builds its buffers and picks
    each register's type on every call: 22-32 us for 17-25 registers,
    against about 1.3 us)."""

    def __init__(self, uc: Uc, regs: list[int], ctype):
        count = len(regs)
        self._uc = uc
        self._ids = _array_type(ctypes.c_int, count)(*regs)
        self._values = _array_type(ctype, count)()
        size = ctypes.sizeof(ctype)
        base = ctypes.addressof(self._values)
        self._pointers = _array_type(ctypes.c_void_p, count)(*(base + size * i for i in range(count)))
        self._count = count

    def __call__(self) -> list[int]:
        status = uclib.uc_reg_read_batch(self._uc._uch, self._ids, self._pointers, self._count)
        if status:
            raise UcError(status)
        return self._values[:]


@lru_cache(maxsize=None)  # ctypes drops an unused array type, which only the cycle collector frees
def _array_type(ctype, count: int):
    return ctype * count
