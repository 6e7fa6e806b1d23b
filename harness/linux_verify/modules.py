"""The modules of a process: the executable, its dynamic linker, and every
library the dynamic linker maps, each where it was loaded, with its code,
symbols and unwind tables (harness.program.Program, relocated).

Where the libraries go is decided by the run itself (ld.so's mmap calls),
and a run is deterministic: a first run, of ground truth alone (from block
entries) and under every guard the verified run has, finds them and which
frames resume; the verified run then meets the same layout with every
module's tables ready before its first stop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Callable, Mapping, NamedTuple, Sequence

from harness.abi import GUARD_MEMORY, GUARD_SECONDS, Limits
from harness.classify import OWN
from harness.code_origin import library_exports, origin_spans, placed_symbols
from harness.elf_program import program_from_image
from harness.errors import ElfError
from harness.formats.elf import PARSE_ERRORS, open_elf
from harness.linux.files import GuestError
from harness.linux.loader import ET_DYN, KUSER_PAGE, kuser_page
from harness.linux.memory import page_down, page_up
from harness.linux.process import KUSER_SIZE, LinuxRun, LinuxSystem
from harness.program import ModuleSpan, Program
from harness.unwind.modules import Covered, PerModule
from harness.unwind.registry import Strategy, build_unwinders, strategy
from harness.unwind.sigframes import SignalFrames, trampolines_in
from harness.unwind.walk import Unwinder
from harness.verify import kernel
from harness.verify.stops import placed_ground_truth

VECTORS = ModuleSpan(KUSER_PAGE, KUSER_PAGE + KUSER_SIZE, "lib", "[vectors]")  # the kuser helpers


@dataclass(frozen=True)
class LoadedModule:
    label: str  # harness.classify.MODULES
    path: str  # the ELF on the host
    base: int  # added to its link-time addresses
    start: int
    end: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def label_of(name: str) -> str:
    """The MODULES label of a library by its file name."""
    for prefix, label in (("libc.so", "libc"), ("libstdc++", "libstdcxx"), ("libgcc_s", "libgcc"),
                          ("ld-linux", "ld.so")):
        if name.startswith(prefix):
            return label
    return "lib"


def _placed(label: str, path: str, segments, base: int) -> LoadedModule:
    return LoadedModule(label, path, base, page_down(min(a for a, _ in segments)),
                        page_up(max(a + len(d) for a, d in segments)))


def _library(system: LinuxSystem, start: int, guest: str) -> LoadedModule | None:
    """The ELF ld.so mapped at `start` (its first page), or None for a file that is not one."""
    try:
        host = system.files.resolve(guest)[1]
        elf = open_elf(host).elf
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        low = page_down(min(s["p_vaddr"] for s in loads))
        high = page_up(max(s["p_vaddr"] + s["p_memsz"] for s in loads))
        if elf["e_type"] != ET_DYN:
            return None
    except (GuestError, ElfError, *PARSE_ERRORS):
        return None
    base = start - low
    return LoadedModule(label_of(os.path.basename(host)), host, base, start, base + high)


def executable_module(system: LinuxSystem) -> LoadedModule:
    """The program's own module, where the loader placed it."""
    return _placed(OWN, system.run.program, system.executable.segments, system.executable.base)


def modules_of(system: LinuxSystem) -> tuple[LoadedModule, ...]:
    """The modules of a process that has run: the executable and dynamic
    linker the loader placed, and every ELF mapped from its first byte."""
    found = [executable_module(system)]
    if system.interpreter is not None:
        interpreter = system.interpreter
        found.append(_placed("ld.so", interpreter.path, interpreter.segments, interpreter.base))
    seen = {module.path for module in found}
    for start, _end, guest, offset in system.kernel.file_mappings if system.kernel else ():
        module = None if offset else _library(system, start, guest)
        if module is not None and module.path not in seen:
            seen.add(module.path)
            found.append(module)
    return tuple(sorted(found, key=lambda m: m.start))


@dataclass(frozen=True)
class FirstRun:
    """What a first run of a process tells the verified run: the modules it
    loaded, the frames that resume (None where it faulted: the verified
    run meets the fault again, and its stops before it count), and the
    instructions it ran (to its end, or its fault): the verified run's
    automatic stride and clock are chosen by them."""

    modules: tuple[LoadedModule, ...]
    resumes: bytes | None
    instructions: int = 0
    exact_faults: bool = False  # it takes a fault only the per-instruction hook places: its runs need that hook


def process_program(system: LinuxSystem) -> Program:
    """The executable's code and unwind tables, where the loader put them."""
    return module_program(executable_module(system))


def discover(run: LinuxRun, limits: Limits) -> FirstRun:
    """The first run of `run`: ground truth alone, under `limits` (a clock
    not given scaled to the instruction budget: guards.as_limits). A run past
    the clock or the memory limit raises its EmulationFault: nothing after
    it could go on (the verified run would only pass the limit again)."""
    systems = [LinuxSystem(run)]  # the first, whose executable gives the program; then fresh ones
    program = process_program(systems[0])
    truth, system, exact = placed_ground_truth(program, lambda: systems.pop() if systems else LinuxSystem(run),
                                               kernel.AVAILABLE, limits)
    if truth.fault is not None and truth.fault.guard in (GUARD_SECONDS, GUARD_MEMORY):
        raise truth.fault
    return FirstRun(modules_of(system), truth.resumes, truth.instructions, exact_faults=exact)


@lru_cache(maxsize=8)  # a process's runs load the same libraries at the same bases
def module_program(module: LoadedModule) -> Program:
    image = open_elf(module.path)
    return program_from_image(image, image.elf["e_entry"], load_base=module.base, cfi_required=False)


def _with_plt(spans: list[ModuleSpan], plt: ModuleSpan) -> list[ModuleSpan]:
    """`spans` with the PLT's addresses cut out of them and `plt` in its place."""
    out = [plt]
    for span in spans:
        if span.start < plt.start:
            out.append(replace(span, end=min(span.end, plt.start)))
        if span.end > plt.end:
            out.append(replace(span, start=max(span.start, plt.end)))
    return sorted(out, key=lambda s: s.start)


def spans_of(module: LoadedModule, exported: Mapping[str, str] = {}) -> list[ModuleSpan]:
    """The module's code for classifying stops: the executable's cut by
    origin (harness.code_origin; `exported`: the runtime libraries' function
    names), its PLT apart."""
    image = open_elf(module.path)
    if module.label == OWN:
        spans = origin_spans(image, module.start - module.base, module.end - module.base, module.base,
                             module.name, exported)
    else:
        spans = [ModuleSpan(module.start, module.end, module.label, module.name,
                            placed_symbols(image, module.base))]
    plt = image.elf.get_section_by_name(".plt")
    if plt is None or not plt["sh_size"]:
        return spans
    low, high = plt["sh_addr"] + module.base, plt["sh_addr"] + plt["sh_size"] + module.base
    return _with_plt(spans, ModuleSpan(low, high, "plt", f"{module.name}@plt"))


# Where a Debian armhf sysroot keeps the C and C++ runtimes.
RUNTIME_LIBRARIES = tuple(f"{directory}/{name}" for name in ("libc.so.6", "libstdc++.so.6", "libgcc_s.so.1")
                          for directory in ("/lib/arm-linux-gnueabihf", "/usr/lib/arm-linux-gnueabihf"))


def runtime_exports(system: LinuxSystem, modules: Sequence[LoadedModule]) -> dict[str, str]:
    """The function names the runtime libraries export, by library label:
    those the process loaded, or for a static executable the sysroot's."""
    libraries = {m.path: m.label for m in modules if m.label not in (OWN, "ld.so")}
    if not libraries:
        for guest in RUNTIME_LIBRARIES:
            try:
                host = system.files.resolve(guest)[1]
            except GuestError:
                continue
            if os.path.isfile(host):
                libraries.setdefault(host, label_of(os.path.basename(guest)))
    return library_exports(libraries)


def process_image(modules: Sequence[LoadedModule], programs: Sequence[Program],
                  exported: Mapping[str, str] = {}) -> Program:
    """One Program standing for the whole process, for classifying stops:
    the executable's, with every module's functions and spans."""
    own = programs[[m.label for m in modules].index(OWN)]
    functions = tuple(sorted((f for p in programs for f in p.functions), key=lambda f: f.start))
    spans = sorted([span for module in modules for span in spans_of(module, exported)] + [VECTORS],
                   key=lambda s: s.start)
    return replace(own, functions=functions, modules=tuple(s for s in spans if s.start < s.end))


def own_tables(program: Program, own_unwinders: Callable[[Program], list[Unwinder]]) -> dict[str, Unwinder]:
    """The executable's unwinders by name, built by `own_unwinders`; none
    for an executable without CFI (Debian's, stripped), which they would
    have no tables for (the CFI strategies refuse there, exidx and frame
    pointers are built as for any module)."""
    if not program.cfi.get("reference"):
        return {}
    return {unwinder.name: unwinder for unwinder in own_unwinders(program)}


def process_code(programs: Sequence[Program]) -> list[tuple[int, int]]:
    """[start, end) of the code of a process whose modules `programs` hold,
    and the kernel's vectors page."""
    return [(start, start + len(data)) for program in programs for start, data in program.segments] \
        + [(KUSER_PAGE, KUSER_PAGE + len(kuser_page()))]


def process_trampolines(programs: Sequence[Program]) -> dict[int, bool]:
    """The sigreturn trampolines of a process whose modules' code `programs`
    hold, and the kernel's in its vectors page (harness.unwind.sigframes)."""
    return trampolines_in([*(segment for program in programs for segment in program.segments),
                           (KUSER_PAGE, kuser_page())])


def process_unwinders(names: Sequence[str], modules: Sequence[LoadedModule], programs: Sequence[Program],
                      own_unwinders: Callable[[Program], list[Unwinder]], signal_frames: bool = True) -> list[Unwinder]:
    """Each strategy over the process: for each module the unwinder built
    from its own tables where it has them (CFI for v2, dwarf and v1,
    `.ARM.exidx` for exidx, its code for v2-code); the executable's by `own_unwinders` (which
    may stand given v2 tables in); frame pointers everywhere alike; a scan
    that knows every module's calls; the chain of those (harness.unwind.registry.CHAIN).
    With `signal_frames`, each table-driven one crosses signal frames by
    their trampolines (harness.unwind.sigframes)."""
    own_index = [m.label for m in modules].index(OWN)
    own_program = programs[own_index]
    own = own_tables(own_program, own_unwinders)
    process_strategy = partial(_process_strategy, _Process(modules, programs, own_index, own, {}))
    if not signal_frames:
        return [process_strategy(name) for name in names]
    trampolines, code = process_trampolines(programs), process_code(programs)
    return [SignalFrames(process_strategy(name), trampolines, code) if strategy(name).signal_frames
            else process_strategy(name) for name in names]


class _Process(NamedTuple):
    """A process's modules and what its strategies are built from."""

    modules: Sequence[LoadedModule]
    programs: Sequence[Program]
    own_index: int  # the executable's
    own: dict[str, Unwinder]  # the executable's unwinders (own_tables)
    built: dict[str, Unwinder]  # each strategy over the process, once built


def _process_strategy(process: _Process, name: str) -> Unwinder:
    """One strategy over a process, built once (a partial, not a closure
    that refers to itself: nothing of a run may wait for the cycle collector)."""
    if name not in process.built:
        process.built[name] = _process_unwinder(process, strategy(name))
    return process.built[name]


def _process_unwinder(process: _Process, declared: Strategy) -> Unwinder:
    """As harness.unwind.registry.Strategy says: from every module at once,
    from the executable alone, or each module by its own tables where it has them."""
    if declared.process_build is not None:
        return declared.process_build(process.programs)
    if declared.module_tables is None:
        return declared.build(process.programs[process.own_index], partial(_process_strategy, process))
    covered = []
    for index, (module, program) in enumerate(zip(process.modules, process.programs)):
        if declared.module_tables(program):
            found = (process.own.get(declared.name) if index == process.own_index else None) \
                or build_unwinders(program, [declared.name])[0]
            covered.append(Covered(module.start, module.end, found))
    return PerModule(declared.name, covered)
