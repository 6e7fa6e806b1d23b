"""The main job as independent units of work: one per generated program and
one per compiled ELF. A unit's record (its summary, size row and, for an
ELF, its report section) depends on nothing but the unit, so units can run
in a pool of processes (`--jobs`) or on other machines (`--shard I/N`,
joined by `merge`), and the report assembled from the records is the same
byte for byte.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from generators.corpus import generate_program
from harness.abi import Limits
from harness.elf_program import program_from_elf
from harness.errors import WorkerLost
from harness.formats import chrome_v2
from harness.formats.elf import open_elf, section_size
from harness.linux_verify.corpus import run_linux_unit
from harness.manifest import ELF_CORPUS, elf_builds
from harness.report.data import elf_group, report_data, with_timing
from harness.report.sizes import add_size_rows, chrome_reference, size_row
from harness.report.summary import from_json, summary_of, to_json
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders, meaningful
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: the units (or stops) whose number is `index` modulo `count`."""

    index: int = 0
    count: int = 1

    def takes(self, number: int) -> bool:
        return number % self.count == self.index

    def within(self, outer: "Shard") -> "Shard":
        """This shard of the part `outer` selects (numbers then count in both)."""
        return Shard(outer.index + outer.count * self.index, outer.count * self.count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"not I/N: {text!r}") from None
    if not 0 <= index < count:
        raise ValueError(f"shard {text!r}: need 0 <= I < N")
    return Shard(index, count)


@dataclass(frozen=True)
class Unit:
    """A generated program (`number` in the corpus of `seed`), a compiled
    build (`build`), or a Linux corpus program (`linux`, its manifest entry)."""

    index: int
    names: tuple[str, ...]  # unwinders
    seed: int = 0
    number: int = 0
    build: dict | None = field(default=None, hash=False)
    limits: Limits = DEFAULT_LIMITS  # how far its program may run (harness.abi.Limits)
    linux: dict | None = field(default=None, hash=False)
    every: int = 1  # verify a Linux program at samples of this mean stride (harness.verify.sampling)

    @property
    def kind(self) -> str:
        return "linux" if self.linux is not None else "generated" if self.build is None else "elf"


# Real programs run longer than generated ones: under the default limits,
# a Linux corpus program gets these (explicit limits apply as given).
LINUX_LIMITS = Limits(instructions=500_000_000, seconds=1800, memory_bytes=DEFAULT_LIMITS.memory_bytes,
                      depth=DEFAULT_LIMITS.depth)


def units_of(seed: int, programs: int, names: Sequence[str], elf: bool,
             limits: Limits = DEFAULT_LIMITS, linux: Sequence[dict] = (), linux_every: int = 1) -> list[Unit]:
    units = [Unit(i, tuple(names), seed, i, limits=limits) for i in range(programs)]
    if elf:
        units += [Unit(len(units) + i, tuple(names), build=b, limits=limits) for i, b in enumerate(elf_builds())]
    linux_limits = LINUX_LIMITS if limits == DEFAULT_LIMITS else limits
    return units + [Unit(len(units) + i, tuple(names), limits=linux_limits, linux=entry, every=linux_every)
                    for i, entry in enumerate(linux)]


def not_expressed(encoded: chrome_v2.Encoded) -> dict[str, int]:
    """CFI the conversion could not express or ignored, counted per message."""
    counts: dict[str, int] = {}
    for _, problem in encoded.problems:
        message = problem.split(": ", 1)[-1]
        rows = 1
        if message.endswith(" rows)"):
            message, _, tail = message.rpartition(" (")
            rows = int(tail.split()[0])
        counts[message] = counts.get(message, 0) + rows
    return dict(sorted(counts.items()))


def run_unit(unit: Unit) -> dict:
    """Verify one unit; its record (plain JSON data), with the wall-clock
    seconds it took."""
    started = time.perf_counter()
    record = _verified_unit(unit)
    return {**record, "seconds": round(time.perf_counter() - started, 3)}


def _verified_unit(unit: Unit) -> dict:
    if unit.linux is not None:
        return run_linux_unit(unit.index, unit.linux, unit.names, unit.limits, unit.every)
    if unit.build is None:
        program = generate_program(unit.seed, unit.number)
        summary = summary_of(lambda: verify_program(program, build_unwinders(program, unit.names),
                                                    Verify(limits=unit.limits)))
        return {"index": unit.index, "kind": "generated", "summary": to_json(summary),
                "size": size_row(program.name, [program])}
    build = unit.build
    path = ELF_CORPUS / build["file"]
    # Named by its place in the repository, so reports do not depend on the checkout.
    program = replace(program_from_elf(str(path), build["entry"], build.get("expected_checksum")),
                      name=f"corpus/elf/{build['file']}")
    names = meaningful(program, unit.names)
    unwinders = build_unwinders(program, names)
    summary = summary_of(lambda: verify_program(program, unwinders, how=Verify(limits=unit.limits)),
                         with_cfi={f.name for f in program.functions})
    encoded = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop")
    label = {"input": program.name, "build": path.stem,
             "compiler": build.get("compiler_version", build.get("compiler", "")),
             "flags": build.get("flags", [])}
    return {"index": unit.index, "kind": "elf", "summary": to_json(summary),
            "group": elf_group(summary, names, label, not_expressed(encoded)),
            "size": size_row(program.name, [program], section_size(open_elf(str(path)), ".debug_frame"))}


def in_processes(work: Callable, items: Sequence, jobs: int, done: Callable[[dict], None] = lambda record: None,
                 first: Callable = lambda item: 0, name: Callable = str) -> list:
    """`work(item)` of every item, in item order, by `jobs` processes (in
    this one for a single job, or where no process can be started: a
    process limit); `done` sees each record as it comes, and the items
    `first` ranks lowest start first. A worker that dies (killed, out of
    memory) ends the run with WorkerLost naming the item (`name`)."""
    order = sorted(range(len(items)), key=lambda n: first(items[n]))
    records: dict[int, object] = {}
    if jobs > 1 and len(items) > 1:
        try:
            pool = ProcessPoolExecutor(max_workers=jobs)
            futures = {pool.submit(work, items[n]): n for n in order}
        except (OSError, RuntimeError) as error:  # no process or thread to be had
            print(f"unwind-harness: note: cannot start {jobs} processes ({error}); verifying in one",
                  file=sys.stderr)
        else:
            with pool:
                _collect(futures, records, done, lambda number: name(items[number]))
            return [records[n] for n in range(len(items))]
    for number in order:
        records[number] = work(items[number])
        done(records[number])
    return [records[n] for n in range(len(items))]


def _collect(futures: dict, records: dict, done: Callable, name: Callable) -> None:
    for future in as_completed(futures):
        number = futures[future]
        try:
            records[number] = future.result()
        except BrokenProcessPool:
            raise WorkerLost(f"a worker process died while verifying {name(number)} "
                             "(killed, or out of memory)") from None
        done(records[number])


def run_units(units: Sequence[Unit], jobs: int, done: Callable[[dict], None] = lambda record: None) -> list[dict]:
    """Records of `units`, in unit order, verified by `jobs` processes (the
    compiled builds, the longest units, first)."""
    return in_processes(run_unit, units, jobs, done, first=lambda unit: (unit.kind == "generated", unit.index),
                        name=unit_name)


def unit_name(unit: Unit) -> str:
    if unit.linux is not None:
        return f"corpus/linux/{unit.linux['name']}"
    if unit.build is not None:
        return f"corpus/elf/{unit.build['file']}"
    return f"generated program {unit.number} (seed {unit.seed})"


def assemble(records: Sequence[dict], names: Sequence[str], seed: int, seconds: float) -> dict:
    """The report of a whole run from its unit records (in unit order) that
    took `seconds`; each compiled build's and Linux program's section with
    its own timing."""
    generated = [r for r in records if r["kind"] == "generated"]
    compiled = [r for r in records if r["kind"] == "elf"]
    sizes = {"layout": "seed", "rows": [
        add_size_rows(f"generated corpus ({len(generated)} programs)", [r["size"] for r in generated]),
        *(r["size"] for r in compiled), chrome_reference()],
        "linux_rows": [r["size"] for r in records if r["kind"] == "linux" and r.get("size")]}
    summaries = [from_json(r["summary"]) for r in records]
    data = report_data([s for s, r in zip(summaries, records) if r["kind"] == "generated"], names, seed, "generated",
                       sizes)
    for kind in ("elf", "linux"):
        groups = [with_timing(r["group"], [s], r["seconds"]) for s, r in zip(summaries, records) if r["kind"] == kind]
        if groups:
            data[kind] = groups
    return with_timing(data, summaries, seconds)


def all_names(names: Sequence[str] | None) -> list[str]:
    return list(names or UNWINDER_NAMES)
