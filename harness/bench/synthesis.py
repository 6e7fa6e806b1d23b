"""`unwind-harness bench`: rows from code (figure 5 of harness.bench.suite).

On the largest binary at hand: the time to analyse every Thumb function
(discovery and the frame analysis, as `encode --from-code` does), the v2
bytes a function beside the compiler's CFI; and at Chrome's scale, on a
synthetic text: the clang builds of the compiled corpus laid again and
again until it holds some 700,000 functions, analysed in a fresh process
(for its peak resident memory: the text, the analysis and its results);
and where `make chromium` fetched it, on Chrome's own armhf binary (about
a million functions found without symbols), in a fresh process too."""

from __future__ import annotations

import time
from pathlib import Path

from harness.bench.scale import SHAPE_BUILDS, peak_resident_kb
from harness.elf_program import code_map, elf_functions
from harness.formats import chrome_v2
from harness.formats.arm_exidx import read_exidx_sections
from harness.formats.dwarf_cfi import read_cfi
from harness.filesystem import cache_root
from harness.formats.elf import executable_ranges, load_segments, open_elf
from harness.linux_verify.corpus import cache as linux_cache
from harness.manifest import ELF_CORPUS
from harness.program import CodeMap
from harness.thumb.discovery import GAP, analyse_all
from harness.thumb.native import AVAILABLE, ProgramCode

SYNTHESIS_BINARY = "cjmp-gcc-O2-fp-static"  # the Linux slice's static build: glibc's Thumb code and ours
CHROMIUM = Path("chromium", "root", "usr", "lib", "chromium", "chromium")  # where `make chromium` unpacks it
COPY_ALIGNMENT = 0x100  # between two copies of a build's code


def synthesis_binary() -> Path:
    """The largest binary at hand for measuring synthesis: the Linux slice's
    static executable when built (make), else the largest compiled ELF."""
    built = linux_cache() / "bin" / SYNTHESIS_BINARY
    return built if built.exists() else max(sorted(ELF_CORPUS.glob("*.elf")), key=lambda p: p.stat().st_size)


def synthesis_at_scale(path: str) -> dict:
    """Rows from the code of every Thumb function of `path`: time, and the
    v2 bytes per function beside the tables from the compiler's CFI, for
    the functions both describe (policy keep, chrome layout)."""
    image = open_elf(path)
    started = time.perf_counter()
    synthesized = tuple(f for f in elf_functions(image, from_code=True) if f.name != GAP)
    seconds = time.perf_counter() - started
    with_cfi = {f.start: f for f in read_cfi(image)}
    same = [f for f in synthesized if f.start in with_cfi]
    per_function = lambda functions: len(chrome_v2.encode(
        functions, min(f.start for f in synthesized), "keep", layout="chrome").blob()) / max(len(functions), 1)
    return {"binary": Path(path).name, "functions": len(synthesized), "seconds": seconds,
            "functions_per_second": len(synthesized) / seconds, "compiled": AVAILABLE,
            "functions_with_cfi": len(same), "refusing_functions": sum(bool(f.problems) for f in synthesized),
            "bytes_per_function_from_code": per_function(same),
            "bytes_per_function_from_cfi": per_function([with_cfi[f.start] for f in same])}


def _build_code(build: str) -> tuple[CodeMap, int, bytes]:
    """A compiled build's code map and its code: [low, low + len(code))."""
    image = open_elf(str(ELF_CORPUS / f"{build}.elf"))
    ranges = executable_ranges(image)
    low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    code = bytearray(high - low)
    for start, data in load_segments(image):
        first, last = max(start, low), min(start + len(data), high)
        if first < last:
            code[first - low:last - low] = data[first - start:last - start]
    return code_map(image, read_exidx_sections(image)), low, bytes(code)


def synthetic_text(count: int) -> tuple[CodeMap, ProgramCode]:
    """The clang builds' code laid end to end, again and again (each copy
    its own symbols; the words of the data only the first's), until it
    holds at least `count` Thumb functions."""
    builds = [_build_code(build) for build in SHAPE_BUILDS]
    base = min(low for _, low, _ in builds)
    maps, text, functions = [], bytearray(), 0
    while functions < count:
        code_map_of, low, code = builds[len(maps) % len(builds)]
        text += b"\0" * (-len(text) % COPY_ALIGNMENT)
        moved = code_map_of.moved(base + len(text) - low)
        maps.append(moved if not maps else moved._replace(pointers=(), entries=(), noreturn=(), labels=()))
        text += code
        functions += len(code_map_of.spans)
    return _merged(maps, (base, base + len(text))), ProgramCode([(base, bytes(text))])


def _merged(maps: list[CodeMap], text: tuple[int, int]) -> CodeMap:
    """One code map of the copies', the text one executable section (as a linker lays it)."""
    fields = {field: tuple(item for one in maps for item in getattr(one, field))
              for field in CodeMap._fields if field not in ("fixed", "ranges")}
    return CodeMap(**fields, ranges=(text,), fixed=maps[0].fixed)


def chromium_binary() -> Path | None:
    """Chrome's armhf binary, where `make chromium` has fetched it."""
    path = cache_root() / CHROMIUM
    return path if path.exists() else None


def synthesis_of_binary(path: str) -> dict:
    """Runs in a fresh process: every function of `path` found and
    analysed as encode --from-code does, and its v2 tables made; the time
    to the rows, the process's peak resident memory, v2 bytes a function."""
    image = open_elf(path)
    started = time.perf_counter()
    functions = tuple(f for f in elf_functions(image, from_code=True) if f.name != GAP)
    seconds = time.perf_counter() - started
    # (as encode writes them: a million functions' rows take several v2 tables)
    tables = chrome_v2.encode_parts(functions, min(f.start for f in functions), "drop", layout="chrome")
    return {"binary": Path(path).name, "functions": len(functions), "seconds": seconds,
            "functions_per_second": len(functions) / seconds, "peak_mb": peak_resident_kb() / 1024,
            "bytes_per_function": sum(len(table.blob()) for table in tables) / len(functions), "compiled": AVAILABLE}


def synthesis_of_synthetic(count: int) -> dict:
    """Runs in a fresh process: the synthetic text of `count` functions
    analysed as encode --from-code does; time and the process's peak
    resident memory."""
    text_map, code = synthetic_text(count)
    started = time.perf_counter()
    functions = [f for f in analyse_all(text_map, code) if f.name != GAP]
    seconds = time.perf_counter() - started
    return {"functions": len(functions), "text_bytes": len(code.segments[0][1]), "seconds": seconds,
            "functions_per_second": len(functions) / seconds, "peak_mb": peak_resident_kb() / 1024,
            "compiled": AVAILABLE}
