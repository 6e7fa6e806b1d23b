"""Unicorn engines as the emulator needs them, each with its stack mapped,
made once and kept between bare-metal runs.

Making an engine costs about a millisecond (the ARM model defines some
hundreds of system registers, each named and hashed), and unmapping a
16 MiB stack about as much (the engine flushes its TLB page by page):
together most of a short program's set-up, and more than the run of a
thousand instructions. So an emulator gives its engine back when it goes
(harness.emulation.emulator), if every run it made ended well, and the next
one whose stack goes at the same place takes it, reset to how it was made:
nothing mapped but the stack, whose pages are let go (they read as zeros
again), every register as a new engine has it (the context saved when it
was made: the core, VFP and system registers alike), no code translated.
A process's engine (harness.linux) is never kept: its system holds on to
it. Engines are kept per process, a few at most (each holds the pages of
translated code its runs touched).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from typing import NamedTuple

from unicorn import UC_ARCH_ARM, UC_MODE_THUMB, UC_PROT_ALL, Uc, UcError
from unicorn import arm_const as arm

from harness.emulation.placement import Placement

# The engine's buffer of translated code (1 GiB by default) fills as a
# sampled run cuts blocks at its samples (harness/verify/csrc/trace.c) and, once its pages
# are touched, counts in the resident size the memory guard checks; full,
# it is flushed and code is translated anew.
TRANSLATED_CODE_BYTES = 128 << 20
KEPT_AT_MOST = 2  # a run may hold two emulators at once (stops._run_once_if_it_can)


class Engine(NamedTuple):
    uc: Uc
    made: object  # its context as made (a UcContext), which a reset restores
    # The stack's memory, which the harness owns so that the kernel reads it in place (harness/verify/csrc/rules.c).
    stack: mmap.mmap
    stack_at: tuple[int, int]  # where the engine maps it: (lowest address, size)


_kept: list[Engine] = []


def made(where: Placement) -> Engine:
    """A new engine: an ARMv7-A model (for VFP) with cp10/cp11 access in
    CPACR and FPEXC.EN set, in Thumb state, nothing mapped but the stack
    `where` puts it."""
    uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB)
    uc.ctl_set_tcg_buffer_size(TRANSLATED_CODE_BYTES)
    uc.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_A15)
    uc.reg_write(arm.UC_ARM_REG_C1_C0_2, uc.reg_read(arm.UC_ARM_REG_C1_C0_2) | (0xF << 20))
    uc.reg_write(arm.UC_ARM_REG_FPEXC, 0x40000000)
    stack = mmap.mmap(-1, where.stack_size, flags=mmap.MAP_PRIVATE)  # private: let go, its pages read as zeros
    uc.mem_map_ptr(where.stack_bottom, where.stack_size, UC_PROT_ALL,
                   ctypes.addressof(ctypes.c_char.from_buffer(stack)))
    return Engine(uc, uc.context_save(), stack, (where.stack_bottom, where.stack_size))


def taken(where: Placement) -> Engine:
    """A kept engine whose stack `where` puts at the same place, or a new one."""
    for index, engine in enumerate(_kept):
        if engine.stack_at == (where.stack_bottom, where.stack_size):
            return _kept.pop(index)
    return made(where)


def give_back(engine: Engine) -> None:
    """Keep `engine`, reset, for the next emulator (while fewer than
    KEPT_AT_MOST are kept); else let it close. Only an engine whose runs all
    ended well may be given back: one a fault stopped holds the fault's
    state beyond its registers."""
    if len(_kept) >= KEPT_AT_MOST or sys.is_finalizing():
        return
    uc, (stack_low, _) = engine.uc, engine.stack_at
    try:
        for begin, end, _ in list(uc.mem_regions()):
            if begin != stack_low:
                uc.mem_unmap(begin, end - begin + 1)
        uc.context_restore(engine.made)
        uc.ctl_flush_tb()
    except UcError:  # not as it was made: let it close
        return
    engine.stack.madvise(mmap.MADV_DONTNEED)
    _kept.append(engine)


os.register_at_fork(after_in_child=_kept.clear)  # a child makes its own
