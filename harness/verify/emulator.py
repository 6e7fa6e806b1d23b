"""The only module that touches Unicorn.

Loads a program's segments, maps a stack, calls the entry in Thumb state with
lr = a sentinel address, and calls back before every instruction. Faults
(unmapped access, undefined instruction, a runaway loop) end the run with an
`EmulationFault` naming the pc and the cause.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
from typing import Callable, Iterable

from unicorn import UC_ARCH_ARM, UC_HOOK_CODE, UC_MODE_THUMB, UC_PROT_ALL, Uc, UcError
from unicorn import arm_const as arm
from unicorn.unicorn_py3.unicorn import uclib  # direct calls: the wrappers cost ~90 us a stop

from harness.errors import BadRead, HarnessError
from harness.verify import abi

PAGE = 0x1000
SENTINEL = 0x0000F000  # the entry "returns" here; nothing else is mapped nearby
STACK_TOP = 0x7F000000
STACK_SIZE = 16 << 20  # room for several frames over 1 MiB
SLOT_IDS = [getattr(arm, f"UC_ARM_REG_{name.upper()}") for name in abi.SLOTS]  # abi.SLOTS as engine ids
STATUS_REGS = SLOT_IDS[: abi.FIRST_VFP_SLOT]  # r0-r15, cpsr


class EmulationFault(HarnessError):
    """The emulated program stopped abnormally."""

    def __init__(self, pc: int, cause: str):
        super().__init__(f"emulation fault at pc {pc:#x}: {cause}")
        self.pc = pc
        self.cause = cause


class _BatchReader:
    """uc_reg_read_batch into preallocated buffers (unicorn 2.1's Python
    wrapper builds them anew on every call): the Python hook's reader."""

    def __init__(self, uc: Uc, regs: list[int], ctype):
        count = len(regs)
        self._uc = uc
        self._ids = (ctypes.c_int * count)(*regs)
        self._values = (ctype * count)()
        size = ctypes.sizeof(ctype)
        base = ctypes.addressof(self._values)
        self._pointers = (ctypes.c_void_p * count)(*(base + size * i for i in range(count)))
        self._count = count

    def __call__(self) -> list[int]:
        status = uclib.uc_reg_read_batch(self._uc._uch, self._ids, self._pointers, self._count)
        if status:
            raise UcError(status)
        return self._values[:]


class LiveStack:
    """Stack reader over the paused emulator's memory, [low, high).

    Reads fetch aligned chunks on demand and keep them for this stop only:
    unwinders touch a few hundred bytes, while a frame may be a megabyte.
    While `recording`, it notes which chunks were read and the lowest address
    examined, so a caller can tell later whether the same reads would still
    give the same answers.
    """

    __slots__ = ("_uc", "low", "high", "_chunks", "touched", "lowest")
    CHUNK = 512  # bytes fetched from the emulator at a time
    LINE = 16  # granularity at which reads are recorded

    def __init__(self, uc: Uc, low: int, high: int):
        self._uc = uc
        self.low = low
        self.high = high
        self._chunks: dict[int, bytes] = {}
        self.touched: set[int] | None = None
        self.lowest = high

    def start_recording(self) -> None:
        self.touched = set()
        self.lowest = self.high

    def stop_recording(self) -> tuple[int, set[int]]:
        """(lowest address examined, start addresses of the LINE-byte lines read)."""
        touched, self.touched = self.touched, None
        return self.lowest, touched

    def contains(self, address: int) -> bool:
        if self.touched is not None and address < self.lowest:
            self.lowest = address
        return self.low <= address <= self.high

    def chunk(self, base: int) -> bytes:
        """CHUNK bytes from `base` (a multiple of CHUNK); zeros outside the stack."""
        data = self._chunks.get(base)
        if data is None:
            start = max(base, self.low)
            end = min(base + self.CHUNK, self.high)
            data = bytes(start - base) + _read(self._uc, start, end - start) if end > start else b""
            self._chunks[base] = data
        return data

    def line(self, address: int) -> bytes:
        """The LINE bytes at `address` (a multiple of LINE)."""
        base = address & ~(self.CHUNK - 1)
        offset = address - base
        return self.chunk(base)[offset : offset + self.LINE]

    def region(self, start: int, size: int) -> bytes:
        """`size` bytes from `start` (zeros outside the stack), unrecorded."""
        base = start & ~(self.CHUNK - 1)
        if start + size <= base + self.CHUNK:
            return self.chunk(base)[start - base : start - base + size]
        parts = [self.chunk(b) for b in range(base, start + size, self.CHUNK)]
        return b"".join(parts)[start - base : start - base + size]

    def _bytes(self, address: int, size: int) -> bytes:
        if address < self.low or address + size > self.high:
            raise BadRead(address, size, self.low, self.high)
        if self.touched is not None:
            self.touched.update(range(address & ~(self.LINE - 1), address + size, self.LINE))
            self.lowest = min(self.lowest, address)
        base = address & ~(self.CHUNK - 1)
        if address + size <= base + self.CHUNK:
            return self.chunk(base)[address - base : address - base + size]
        return self.chunk(base)[address - base :] + self.chunk(base + self.CHUNK)[: address + size - base - self.CHUNK]

    def read_u32(self, address: int) -> int:
        offset = address & (self.CHUNK - 1)
        if self.low <= address and offset <= self.CHUNK - 4 and address + 4 <= self.high:
            touched = self.touched  # the common case, kept short
            if touched is not None:
                touched.add(address & ~(self.LINE - 1))
                if address & (self.LINE - 1) > self.LINE - 4:
                    touched.add((address & ~(self.LINE - 1)) + self.LINE)
                if address < self.lowest:
                    self.lowest = address
            base = address - offset
            return _U32(self._chunks.get(base) or self.chunk(base), offset)[0]
        return _U32(self._bytes(address, 4))[0]

    def read_u64(self, address: int) -> int:
        return _U64(self._bytes(address, 8))[0]


_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from


def _read(uc: Uc, address: int, size: int) -> bytes:
    buffer = ctypes.create_string_buffer(size)
    status = uclib.uc_mem_read(uc._uch, address, buffer, size)
    if status:
        raise UcError(status)
    return buffer.raw


def _merged_pages(segments: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    """Page-aligned ranges covering every segment, merged where they touch."""
    spans = sorted(
        (address & ~(PAGE - 1), (address + len(data) + PAGE - 1) & ~(PAGE - 1))
        for address, data in segments
    )
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


class Emulator:
    def __init__(self, segments: Iterable[tuple[int, bytes]]):
        uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB)
        # VFP needs an ARMv7-A model, cp10/cp11 access in CPACR, and FPEXC.EN.
        uc.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_A15)
        uc.reg_write(arm.UC_ARM_REG_C1_C0_2, uc.reg_read(arm.UC_ARM_REG_C1_C0_2) | (0xF << 20))
        uc.reg_write(arm.UC_ARM_REG_FPEXC, 0x40000000)
        segments = [(address, bytes(data)) for address, data in segments]
        for start, end in _merged_pages(segments):
            uc.mem_map(start, end - start, UC_PROT_ALL)
        for address, data in segments:
            uc.mem_write(address, data)
        uc.mem_map(SENTINEL, PAGE, UC_PROT_ALL)
        # The stack lives in memory the harness owns, so that the compiled
        # kernel reads it in place (harness/verify/csrc/rules.c).
        self._stack_memory = mmap.mmap(-1, STACK_SIZE)
        stack_address = ctypes.addressof(ctypes.c_char.from_buffer(self._stack_memory))
        uc.mem_map_ptr(STACK_TOP - STACK_SIZE, STACK_SIZE, UC_PROT_ALL, stack_address)
        self._uc = uc
        self.instructions = 0
        self.registers = _BatchReader(uc, STATUS_REGS, ctypes.c_uint32)
        """r0-r15 and cpsr (17 values)."""
        self.registers_and_vfp = _BatchReader(uc, SLOT_IDS, ctypes.c_uint64)
        """r0-r15, cpsr and d8-d15 (25 values) in one call: 32-bit registers
        fill the low half of their 64-bit slot, whose high half stays 0."""

    def stack(self, sp: int) -> LiveStack:
        return LiveStack(self._uc, sp, STACK_TOP)

    @property
    def stack_memory(self) -> tuple[mmap.mmap, int, int]:
        """(the stack's bytes, the address of the first, the stack top)."""
        return self._stack_memory, STACK_TOP - STACK_SIZE, STACK_TOP

    def read(self, address: int, size: int) -> bytes:
        return bytes(self._uc.mem_read(address, size))

    def engine(self, uses_vfp: bool) -> abi.Engine:
        """The engine as the compiled tracer (harness/verify/csrc/trace.c)
        drives it; its registers: the slots up to cpsr, and d8-d15 when
        `uses_vfp`."""
        functions = (uclib.uc_reg_read_batch, uclib.uc_mem_read, uclib.uc_emu_start, uclib.uc_emu_stop,
                     uclib.uc_hook_add, uclib.uc_hook_del)
        addresses = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in functions)
        return abi.Engine(self._uc._uch.value, *addresses, UC_HOOK_CODE,
                          tuple(SLOT_IDS if uses_vfp else STATUS_REGS))

    def call(self, entry: int, on_stop: Callable[[int], None] | None, budget: int,
             args: tuple[int, ...] = ()) -> int:
        """Run `entry` (Thumb) until it returns to the sentinel; return r0.

        `on_stop(pc)` runs before every instruction (None: no hook at all,
        emulation alone). Raises EmulationFault when the program faults or
        executes more than `budget` instructions.
        """
        uc = self._start(args)
        overran: list[int] = []

        def hook(uc_, address, size, user_data):
            self.instructions += 1
            if self.instructions > budget:
                overran.append(address)
                uc_.emu_stop()
                return
            on_stop(address)

        handle = None if on_stop is None else uc.hook_add(UC_HOOK_CODE, hook)
        try:
            uc.emu_start(entry | 1, SENTINEL, count=budget if on_stop is None else 0)
        except UcError as error:
            raise EmulationFault(uc.reg_read(arm.UC_ARM_REG_PC), str(error)) from None
        finally:
            if handle is not None:
                uc.hook_del(handle)
        return self._returned(overran[0] if overran else None, budget)

    def call_traced(self, entry: int, tracer, budget: int, args: tuple[int, ...] = ()) -> int:
        """`call`, with the compiled tracer (built on `engine()`) as the hook."""
        self._start(args)
        status, overran = tracer.run(entry | 1, SENTINEL, budget)
        if status:
            raise EmulationFault(self._uc.reg_read(arm.UC_ARM_REG_PC), str(UcError(status)))
        return self._returned(None if overran < 0 else overran, budget)

    def _start(self, args: tuple[int, ...]) -> Uc:
        uc = self._uc
        for index, value in enumerate(args):
            uc.reg_write(arm.UC_ARM_REG_R0 + index, value)
        uc.reg_write(arm.UC_ARM_REG_SP, STACK_TOP)
        uc.reg_write(arm.UC_ARM_REG_LR, SENTINEL | 1)
        return uc

    def _returned(self, overran: int | None, budget: int) -> int:
        """r0 of a run that ended without an engine error, or the fault."""
        if overran is not None:
            raise EmulationFault(overran, f"more than {budget} instructions (runaway loop?)")
        pc = self._uc.reg_read(arm.UC_ARM_REG_PC)
        if pc != SENTINEL:
            raise EmulationFault(pc, "stopped before returning to the sentinel")
        return self._uc.reg_read(arm.UC_ARM_REG_R0)
