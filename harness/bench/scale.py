"""`unwind-harness bench` at Chrome's scale (figures 3 and 4 of
harness.bench.suite): the v2 encoder on a synthetic text drawn from the
functions of the compiled corpus, in a fresh process (for its peak
memory), and the v2 reader's lookups over random pcs of its blob."""

from __future__ import annotations

import random
import resource
import time
from dataclasses import replace

from harness.formats import chrome_v2
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf
from harness.manifest import ELF_CORPUS
from harness.program import CfiRow, FunctionCfi

SHAPE_BUILDS = ("clang-O2-fp", "clang-O2-nofp", "clang-Os-fp", "clang-Os-nofp")


def function_shapes() -> list[tuple[int, tuple]]:
    """(size, rows relative to the start) of every function of the shape builds."""
    shapes = []
    for build in SHAPE_BUILDS:
        for function in read_cfi(open_elf(str(ELF_CORPUS / f"{build}.elf"))):
            rows = tuple(replace(r, address=r.address - function.start) for r in function.rows)
            shapes.append((function.end - function.start, rows))
    return shapes


def synthetic_text(count: int, seed: int = 0, base: int = 0x10000) -> list[FunctionCfi]:
    """`count` functions laid end to end, each a copy of a corpus function
    drawn at random (so rows per function and row shapes follow the corpus)."""
    shapes = function_shapes()
    rng = random.Random(seed)
    functions, address = [], base
    for number in range(count):
        size, rows = rng.choice(shapes)
        end = address + size
        functions.append(FunctionCfi(f"f{number}", address, end, rows_at(rows, address)))
        address = end  # the same int object: this function's end, the next one's start
    return functions


def rows_at(shape: tuple[CfiRow, ...], start: int) -> tuple[CfiRow, ...]:
    """A shape's rows (relative to 0) moved to `start`. The input is most of
    the encode's peak memory, so copies share what they can: the shape's
    saves, and the function's own start int for a row at its start."""
    return tuple(CfiRow(start + row.address if row.address else start, row.cfa_reg, row.cfa_offset,
                        row.saved, row.problem) for row in shape)


def peak_resident_kb() -> int:
    """This process's own peak resident size: /proc's VmHWM, which starts
    afresh at exec (ru_maxrss keeps the parent's peak at fork: a bench
    worker would report the bench's), else ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def encode_at_scale(count: int) -> dict:
    """Runs in a fresh process: build the text, encode it, and report time,
    peak memory (the whole process: interpreter, input and encoder) and size."""
    functions = synthetic_text(count)
    started = time.perf_counter()
    encoded = chrome_v2.encode(functions, functions[0].start, "drop", layout="chrome")
    blob = encoded.blob()
    seconds = time.perf_counter() - started
    peak_kb = peak_resident_kb()
    return {
        "functions": len(encoded.functions), "cfi_rows": encoded.rows, "addresses": encoded.addresses,
        "text_bytes": functions[-1].end - functions[0].start,
        "encode_seconds": seconds, "encode_peak_mb": peak_kb / 1024, "blob_bytes": len(blob),
        "bytes_per_function": len(blob) / len(encoded.functions),
        "bytes_per_address": len(blob) / encoded.addresses,
        "table_bytes": encoded.table_sizes(),
        "blob": blob, "text_base": functions[0].start, "text_end": functions[-1].end,
    }


def lookups(blob: bytes, text_end: int, text_base: int, count: int, seed: int = 1) -> dict:
    started = time.perf_counter()
    reader = chrome_v2.V2Reader.from_blob(blob, "chrome")
    load = time.perf_counter() - started
    rng = random.Random(seed)
    offsets = [rng.randrange(0, text_end - text_base) & ~1 for _ in range(count)]
    continued = 0
    started = time.perf_counter()
    for offset in offsets:
        found = reader.lookup(offset)
        continued += found is not None and found.continued
    seconds = time.perf_counter() - started
    return {"load_seconds": load, "lookups_per_second": count / seconds,
            "share_touching_two_pages": continued / count}
