"""The main job as independent units of work: one per generated program and
one per compiled ELF. A unit's record (its summary, size row and, for an
ELF, its report section) depends on nothing but the unit, so units can run
in a pool of processes (`--jobs`) or on other machines (`--shard I/N`,
joined by `merge`), and the report assembled from the records is the same
byte for byte.
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from generators.corpus import generate_program
from harness.elf_program import has_epilogue_cfi, program_from_elf
from harness.errors import InputError
from harness.formats import chrome_v2
from harness.formats.elf import open_elf, section_size
from harness.manifest import ELF_CORPUS, elf_builds
from harness.report.data import SCHEMA, elf_group, report_data
from harness.report.sizes import CHROME_REFERENCE, add_size_rows, size_row
from harness.report.summary import from_json, summarize, to_json
from harness.unwind import UNWINDER_NAMES, build_unwinders
from harness.verify.stops import verify_program

PARTIAL = "partial"  # the key that marks a shard's output


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
    """A generated program (`number` in the corpus of `seed`) or a compiled build (`build`)."""

    index: int
    names: tuple[str, ...]  # unwinders
    seed: int = 0
    number: int = 0
    build: dict | None = field(default=None, hash=False)

    @property
    def kind(self) -> str:
        return "generated" if self.build is None else "elf"


def units_of(seed: int, programs: int, names: Sequence[str], elf: bool) -> list[Unit]:
    units = [Unit(i, tuple(names), seed, i) for i in range(programs)]
    if elf:
        units += [Unit(programs + i, tuple(names), build=b) for i, b in enumerate(elf_builds())]
    return units


def elf_unwinder_names(program, wanted: Sequence[str]) -> list[str]:
    """`wanted`, but `v2-gcc` only where the compiler describes epilogues
    (elsewhere its input is the same as `v2`'s)."""
    described = has_epilogue_cfi(program)
    return [n for n in wanted if described or n != "v2-gcc"]


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
    """Verify one unit; its record (plain JSON data)."""
    if unit.build is None:
        program = generate_program(unit.seed, unit.number)
        result = verify_program(program, build_unwinders(program, unit.names))
        return {"index": unit.index, "kind": "generated", "summary": to_json(summarize(result)),
                "size": size_row(program.name, [program])}
    build = unit.build
    path = ELF_CORPUS / build["file"]
    # Named by its place in the repository, so reports do not depend on the checkout.
    program = replace(program_from_elf(str(path), build["entry"], build.get("expected_checksum")),
                      name=f"corpus/elf/{build['file']}")
    names = elf_unwinder_names(program, unit.names)
    result = verify_program(program, build_unwinders(program, names))
    encoded = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop")
    label = {"input": program.name, "build": path.stem,
             "compiler": build.get("compiler_version", build.get("compiler", "")),
             "flags": build.get("flags", [])}
    summary = summarize(result, with_cfi={f.name for f in program.functions})
    return {"index": unit.index, "kind": "elf", "summary": to_json(summary),
            "group": elf_group(summary, names, label, not_expressed(encoded)),
            "size": size_row(program.name, [program], section_size(open_elf(str(path)), ".debug_frame"))}


def in_processes(work: Callable, items: Sequence, jobs: int, done: Callable[[dict], None] = lambda record: None,
                 first: Callable = lambda item: 0) -> list:
    """`work(item)` of every item, in item order, by `jobs` processes (in
    this one for a single job); `done` sees each record as it comes, and
    the items `first` ranks lowest start first."""
    if jobs <= 1 or len(items) <= 1:
        records = []
        for item in items:
            records.append(work(item))
            done(records[-1])
        return records
    records: dict[int, object] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(work, items[n]): n for n in sorted(range(len(items)), key=lambda n: first(items[n]))}
        for future in as_completed(futures):
            records[futures[future]] = future.result()
            done(records[futures[future]])
    return [records[n] for n in range(len(items))]


def run_units(units: Sequence[Unit], jobs: int, done: Callable[[dict], None] = lambda record: None) -> list[dict]:
    """Records of `units`, in unit order, verified by `jobs` processes (the
    compiled builds, the longest units, first)."""
    return in_processes(run_unit, units, jobs, done, first=lambda unit: (unit.kind != "elf", unit.index))


def assemble(records: Sequence[dict], names: Sequence[str], seed: int) -> dict:
    """The report of a whole run from its unit records (in unit order)."""
    generated = [r for r in records if r["kind"] == "generated"]
    compiled = [r for r in records if r["kind"] == "elf"]
    sizes = {"layout": "seed", "rows": [
        add_size_rows(f"generated corpus ({len(generated)} programs)", [r["size"] for r in generated]),
        *(r["size"] for r in compiled), CHROME_REFERENCE]}
    data = report_data([from_json(r["summary"]) for r in generated], names, seed, "generated", sizes)
    if compiled:
        data["elf"] = [r["group"] for r in compiled]
    return data


# ------------------------------------------------------------------ shards


def partial(command: str, config: dict, shard: Shard, records: list[dict]) -> dict:
    """A shard's output: its unit records and what the whole run was."""
    return {"schema": SCHEMA, "tool": "unwind-harness",
            PARTIAL: {"command": command, "config": config, "shard": [shard.index, shard.count]},
            "records": records}


def read_partials(paths: Sequence[str]) -> tuple[str, dict, list[dict]]:
    """(command, config, records in order) of shard files that together cover
    one run exactly; InputError naming the file otherwise."""
    command = config = None
    records: dict[int, dict] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: cannot read a shard report: {error}") from None
        part = data.get(PARTIAL) if isinstance(data, dict) else None
        if not isinstance(part, dict) or "records" not in data:
            raise InputError(f"{path}: not a shard report (written by run or verify-elf with --shard)")
        _check_partial(path, part, data["records"])
        if config is None:
            command, config = part["command"], part["config"]
        elif (part["command"], part["config"]) != (command, config):
            raise InputError(f"{path}: from another run ({part['command']} {part['config']}; "
                             f"expected {command} {config})")
        for record in data["records"]:
            if record["index"] in records:
                raise InputError(f"{path}: unit {record['index']} is in two shard reports")
            records[record["index"]] = record
    if config is None:
        raise InputError("merge: no shard reports given")
    missing = sorted(set(range(config["units"])) - set(records))
    if missing:
        raise InputError(f"merge: the shard reports lack units {missing[:10]}"
                         f"{' ...' if len(missing) > 10 else ''} of {config['units']}")
    return command, config, [records[i] for i in sorted(records)]


def _check_partial(path: str, part: dict, records) -> None:
    """InputError naming the file unless a shard report has the shape merge reads."""
    config = part.get("config")
    problem = None
    if part.get("command") not in ("run", "verify-elf"):
        problem = f"command {part.get('command')!r} is neither run nor verify-elf"
    elif not isinstance(config, dict) or not isinstance(config.get("units"), int):
        problem = "its config has no count of units"
    elif not isinstance(records, list) or not all(
            isinstance(r, dict) and isinstance(r.get("index"), int) for r in records):
        problem = "its records are not a list of numbered units"
    if problem:
        raise InputError(f"{path}: corrupt shard report: {problem}")


def all_names(names: Sequence[str] | None) -> list[str]:
    return list(names or UNWINDER_NAMES)
