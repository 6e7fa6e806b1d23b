"""The stack of a paused emulator as unwinders read it (the StackReader of
harness.unwind.frame): reads fetched in chunks from the engine, through a
function harness.emulation.emulator gives it, and kept for one stop."""

from __future__ import annotations

import struct
from typing import Callable

from harness.errors import BadRead, UnwindFailure


class LiveStack:
    """Stack reader over the paused emulator's memory, [low, high).

    Reads fetch aligned chunks on demand and keep them for this stop only:
    unwinders touch a few hundred bytes, while a frame may be a megabyte.
    While `recording`, it notes which chunks were read and the lowest address
    examined, so a caller can tell later whether the same reads would still
    give the same answers.
    """

    __slots__ = ("_read", "low", "high", "_chunks", "_holes", "touched", "lowest")
    CHUNK = 512  # bytes fetched from the emulator at a time
    LINE = 16  # granularity at which reads are recorded

    def __init__(self, read: Callable[[int, int], bytes | None], low: int, high: int):
        self._read = read  # (address, size) -> the engine's bytes, None where not all mapped
        self.low = low
        self.high = high
        self._chunks: dict[int, bytes] = {}
        # Chunks of [low, high) where nothing is mapped: a thread on an alternate signal
        # stack below its own reads from there to its top. Read as zeros by `region`;
        # a walk's read there fails.
        self._holes: set[int] = set()
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
            read = self._read(start, end - start) if end > start else b""
            if read is None:  # chunks lie inside pages: wholly mapped or not at all
                read = bytes(end - start)
                self._holes.add(base)
            data = bytes(start - base) + read
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
            data = self.chunk(base)[address - base : address - base + size]
        else:
            data = self.chunk(base)[address - base :] + self.chunk(base + self.CHUNK)[: address + size - base - self.CHUNK]
        if self._holes:
            self._mapped(address, size)
        return data

    def _mapped(self, address: int, size: int) -> None:
        """Raise where a read of `size` bytes at `address` meets a hole."""
        if any(base in self._holes for base in range(address & ~(self.CHUNK - 1), address + size, self.CHUNK)):
            raise UnwindFailure("bad_read", f"read of {size} bytes at {address:#x}: nothing is mapped there "
                                            f"(inside the stack [{self.low:#x}, {self.high:#x}))")

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
            data = self._chunks.get(base) or self.chunk(base)
            if self._holes and base in self._holes:
                self._mapped(address, 4)
            return _U32(data, offset)[0]
        return _U32(self._bytes(address, 4))[0]

    def read_u64(self, address: int) -> int:
        return _U64(self._bytes(address, 8))[0]


_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
