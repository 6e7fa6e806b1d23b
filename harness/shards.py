"""Shard reports: what `run --shard I/N` and `verify-elf --shard I/N` write
(`partial`), and reading them back for `merge` (`read_partials`).

A shard report is input like any other: each is read under the size cap of
its kind and checked against the format `partial` writes before anything
of it is used. Every type, key and range is checked (counts are integers
from 0 to 2**53; floats, Infinity, NaN and booleans are not), and so is
what the numbers must agree on: the shard holds exactly its units, every
verified stop is counted once per unwinder, failing stops are blamed once,
and a compiled build's section is the one its summary gives. Anything else
is refused with one line naming the file and the JSON path of the field.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from typing import NamedTuple, Sequence

from harness.classify import MODULE_PREFIX, MODULES, NO_INFO, POSITIONS, STATE_TRAITS, THREAD_PREFIX, TRAITS
from harness.errors import FAILURE_KINDS, InputError
from harness.filesystem import read_json
from harness.report.data import ALL, SCHEMA, elf_group
from harness.report.failing import parse_group
from harness.report.summary import SAMPLES_PER_UNWINDER, from_json
from harness.runner import Shard
from harness.schema import (
    ANY,
    BOOLEAN,
    COUNT,
    POSITIVE,
    SEED,
    WORD,
    Check,
    at,
    fail,
    hex_address,
    integer,
    list_of,
    map_of,
    number,
    object_of,
    one_of,
    optional,
    row,
    show,
    string,
)
from harness.unwind.registry import CHAIN, SIZE_COLUMNS, UNWINDER_NAMES
from harness.verify.failures import COMPARED_REGISTERS, MISMATCH_KINDS
from harness.verify.tally import STOPPED_KINDS

PARTIAL = "partial"  # the key that marks a shard's output
TOOL = "unwind-harness"
NOT_A_SHARD = "not a shard report (written by run or verify-elf with --shard)"


def partial(command: str, config: dict, shard: Shard, records: list[dict], seconds: float) -> dict:
    """A shard's output: its unit records, what the whole run was, and the
    wall-clock seconds the shard took."""
    return {"schema": SCHEMA, "tool": TOOL,
            PARTIAL: {"command": command, "config": config, "shard": [shard.index, shard.count],
                      "seconds": round(seconds, 3)},
            "records": records}


class Partials(NamedTuple):
    command: str
    config: dict
    records: list[dict]  # in unit order
    seconds: float  # the shards' wall-clock seconds, added


def read_partials(paths: Sequence[str]) -> Partials:
    """The shard files that together cover one run exactly, read; InputError
    naming the file otherwise."""
    first_path, first_run = None, None  # the first shard's path, and (command, config)
    records: dict[int, dict] = {}
    seconds = 0.0
    for path in paths:
        data = read_json(path, "shard report")
        if not isinstance(data, dict) or PARTIAL not in data:
            raise InputError(f"{path}: {NOT_A_SHARD}")
        try:
            check_shard_report(data)
        except InputError as error:
            raise InputError(f"{path}: {error}") from None
        command, config = data[PARTIAL]["command"], data[PARTIAL]["config"]
        seconds += data[PARTIAL]["seconds"]
        if first_path is None:
            first_path, first_run = path, (command, config)
        elif (command, config) != first_run:
            raise InputError(f"{path}: from another run than {first_path} ({_other_run(command, config, *first_run)})")
        for record in data["records"]:
            if record["index"] in records:
                raise InputError(f"{path}: unit {record['index']} is in two shard reports")
            records[record["index"]] = record
    if first_run is None:
        raise InputError("merge: no shard reports given")
    command, config = first_run
    if len(records) < config["units"]:
        missing = [i for i in range(min(config["units"], len(records) + 10)) if i not in records][:10]
        raise InputError(f"merge: the shard reports lack units {missing}"
                         f"{' ...' if config['units'] - len(records) > 10 else ''} of {config['units']}")
    return Partials(command, config, [records[i] for i in sorted(records)], seconds)


def _other_run(command: str, config: dict, first_command: str, first_config: dict) -> str:
    if command != first_command:
        return f"its command is {command}, the first shard's {first_command}"
    key = next(k for k in {**first_config, **config} if config.get(k, ...) != first_config.get(k, ...))
    mine, theirs = (show(c[key]) if key in c else "not given" for c in (config, first_config))
    return f"its partial.config.{key} is {mine}, the first shard's {theirs}"


# ------------------------------------------------------------ the checker

# ------------------------------------------------------------ the format

POSITION = one_of(POSITIONS)
_KNOWN_TRAIT = one_of((*TRAITS, NO_INFO, *STATE_TRAITS, *MODULES), "a trait")


def _trait(value, where: str) -> None:
    """A trait, a thread's label (classify.thread_trait) or a module's (classify.module_trait)."""
    if isinstance(value, str) and re.fullmatch(rf"{THREAD_PREFIX}[1-9][0-9]{{0,9}}|{MODULE_PREFIX}.+", value):
        return
    _KNOWN_TRAIT(value, where)


TRAIT = _trait
KIND = one_of((*FAILURE_KINDS, *MISMATCH_KINDS), "a failure kind")
COUNTED_KIND = one_of((*FAILURE_KINDS, *MISMATCH_KINDS, *STOPPED_KINDS), "a failure kind, or stopped:MODULE")
REGISTER = one_of(COMPARED_REGISTERS, "a compared register (r4-r11, d8-d15)")
SHARD = row("a shard [I, N]", COUNT, POSITIVE)
SECONDS = number(0, sys.float_info.max, "a number of seconds (0 or more)")
TOP = object_of({"schema": one_of([SCHEMA]), "tool": one_of([TOOL]), "records": list_of(map_of(string, ANY)),
               PARTIAL: object_of({"command": one_of(["run", "verify-elf"]), "config": map_of(string, ANY),
                                 "shard": SHARD, "seconds": SECONDS})})
PERCENT = number(0, 100, "a percentage (a number from 0 to 100)")
UNWINDERS = list_of(one_of(UNWINDER_NAMES, "an unwinder's name"))
LIMIT = integer(1, math.inf, "a positive integer")
LIMITS = {"limits": row("limits [instructions, seconds, memory bytes, depth]", LIMIT,  # where not the defaults
                         optional(number(sys.float_info.min, sys.float_info.max, "a positive number of seconds")),
                         optional(LIMIT), LIMIT)}  # seconds null: the clock scaled to the work; memory null: the default
_VERIFY = {"elf": string, "unwinders": UNWINDERS, "every": POSITIVE, "units": POSITIVE}
_VERIFY_BARE = object_of({**_VERIFY, "entry": string}, LIMITS)  # a bare-metal function
_VERIFY_PROCESS = object_of({**_VERIFY, "args": list_of(string), "sysroot": optional(string),  # a Linux process
                             "cwd": optional(string), "stdin": optional(string)},
                            {**LIMITS, "signal_frames": BOOLEAN,  # false with --no-signal-frames
                             "every_auto": BOOLEAN})  # the stride chosen from the first run (--every auto)
# The stride of a program verified at samples, or chosen automatically (harness.linux_verify.verify.sampling_of).
SAMPLING = object_of({"every": POSITIVE, "chosen": one_of(["auto", "given"])},
                     {"first_run_instructions": COUNT, "every_stop_up_to": POSITIVE, "samples": POSITIVE,
                      "why": string})
CONFIGS = {
    "run": object_of({"seed": SEED, "programs": POSITIVE, "unwinders": UNWINDERS, "elf": BOOLEAN, "units": POSITIVE},
                   {**LIMITS, "linux": list_of(string),  # the Linux corpus programs, by name
                    "linux_every": POSITIVE}),  # ... verified at samples of mean stride N
    "verify-elf": lambda config, where: (_VERIFY_BARE if isinstance(config, dict) and "entry" in config
                                         else _VERIFY_PROCESS)(config, where),
}
# report.data.past_first_frame: walks that matched up to a thread's first frame, and those that invented its caller
PAST = object_of({"matched": COUNT, "invented": COUNT})
THREADS = ("main_thread", "spawned_threads")
SAMPLE = object_of({"program": string, "stop": COUNT, "pc": hex_address, "function": string, "position": POSITION,
                  "kind": KIND, "frame": COUNT, "culprit": string, "detail": string})
SAMPLES = list_of(SAMPLE, SAMPLES_PER_UNWINDER)
CULPRITS = object_of({"innermost": COUNT, "deeper": COUNT, "traits": map_of(TRAIT, COUNT)})
# chain -> method -> frames given and right (report.summary.methods_json)
CHAIN_METHODS = map_of(one_of(UNWINDER_NAMES, "an unwinder's name"),
                       map_of(one_of(CHAIN, "a method of the chain"), object_of({"frames": COUNT, "right": COUNT})))
SIZE = object_of({"input": string, "functions": POSITIVE, "addresses": POSITIVE, "v1_refused": COUNT,
                "epilogues_inside": COUNT,  # bytes: a count or null per column of the registered formats
                "bytes": lambda value, where: object_of(dict.fromkeys(SIZE_COLUMNS, optional(COUNT)))(value, where)})
RESULT_ROW = object_of({"unwinder": string, "category": one_of((ALL, *TRAITS, NO_INFO, *STATE_TRAITS, *MODULES), "a category"),
                        "position": one_of((*POSITIONS, ALL)), "stops": COUNT, "failed": COUNT,
                        "failure_kinds": map_of(KIND, COUNT), "stopped": COUNT,
                        "stopped_in": map_of(one_of(MODULES, "a module"), COUNT)})


def _failing_group(value, where: str) -> None:
    """A line of the digest of failing stops (harness.report.failing.to_json)."""
    string(value, where)
    try:
        (_, position, kind), _ = parse_group(value)
    except ValueError as error:
        fail(where, f"not a failing group: {error}")
    POSITION(position, where)
    KIND(kind, where)


def _failing(unwinder: Check) -> Check:
    return map_of(unwinder, list_of(_failing_group))


def _summary(unwinder: Check) -> Check:
    """ProgramSummary as `harness.report.summary.to_json` writes it."""
    count_row = row("a count row [unwinder, traits, position, kind, stops]",
                     unwinder, list_of(TRAIT), POSITION, optional(COUNTED_KIND), COUNT)
    invented_row = row("an invented row [unwinder, traits, position, walks]", unwinder, list_of(TRAIT), POSITION, COUNT)
    return object_of({"program": string, "stops": COUNT, "instructions": COUNT, "counts": list_of(count_row),
                    "result": optional(WORD), "expected": optional(WORD), "fault": optional(string),
                    "samples": map_of(unwinder, SAMPLES),
                    "wrong_registers": map_of(unwinder, map_of(REGISTER, COUNT)), "culprits": map_of(unwinder, CULPRITS),
                    "without_cfi": map_of(unwinder, COUNT), "failing": _failing(unwinder),
                    "methods": CHAIN_METHODS},
                   {"stdout_sha256": optional(string), "expected_stdout_sha256": optional(string),
                    "sampling": SAMPLING, "invented": list_of(invented_row)})


def _records(unwinder: Check) -> dict[str, Check]:
    """Per kind, the schema of a unit record (split_row: data._split_rows's, a thread's or a module's stops)."""
    summary = _summary(unwinder)
    split_row = object_of({"stops": COUNT, "failed": map_of(unwinder, COUNT), "right": map_of(unwinder, COUNT)})
    group = object_of({"input": string, "build": string, "compiler": string, "flags": list_of(string),
                     "stops": COUNT, "self_check": string, "v2_epilogue_only_failure_percent": PERCENT,
                     "cfi_not_expressed": map_of(string, COUNT),
                     "failed_in_frames_without_cfi": map_of(unwinder, COUNT), "results": list_of(RESULT_ROW),
                     "culprits": map_of(unwinder, CULPRITS), "failure_samples": map_of(unwinder, SAMPLES),
                     "failing": _failing(unwinder), "chain_methods": CHAIN_METHODS},
                    {"every": POSITIVE,  # a Linux program verified at samples of mean stride N
                     "past_first_frame": map_of(unwinder, object_of({thread: PAST for thread in THREADS})),
                     "threads": map_of(string, split_row), "modules": map_of(string, split_row)})
    more = {"generated": {"size": SIZE, "seconds": SECONDS}, "elf": {"group": group, "size": SIZE, "seconds": SECONDS},
            "linux": {"group": group, "size": optional(SIZE), "seconds": SECONDS}, "stops": {}}
    return {kind: object_of({"index": COUNT, "kind": one_of([kind]), "summary": summary, **more[kind]}) for kind in more}


# ------------------------------------------------------------ checking one report


def check_shard_report(data: dict) -> None:
    """InputError (with the JSON path, without the file) unless `data` is a
    shard report as `partial` writes it."""
    TOP(data, "")
    part = data[PARTIAL]
    command, config, (index, count) = part["command"], part["config"], part["shard"]
    CONFIGS[command](config, "partial.config")
    if index >= count:
        fail("partial.shard", f"shard {index}/{count} is not one of {count} (need 0 <= I < N)")
    _check_config(command, config, count)
    schemas = _records(one_of(config["unwinders"], "one of partial.config.unwinders"))
    taken = range(index, config["units"], count) if command == "run" else range(index, index + 1)
    records = data["records"]
    for n, record in enumerate(records):
        where = f"records[{n}]"
        for key in ("index", "kind"):
            if key not in record:
                fail(where, f"the key {show(key)} is missing")
        COUNT(record["index"], f"{where}.index")
        _check_index(record["index"], n, taken, config["units"], Shard(index, count), f"{where}.index")
        kinds = (["stops"] if command == "verify-elf" else ["generated"] if record["index"] < config["programs"]
                 else ["elf", "linux"])
        one_of(kinds, " or ".join(f'"{k}"' for k in kinds) + f' (the kind of unit {record["index"]})')(
            record["kind"], f"{where}.kind")
        kind = record["kind"]
        schemas[kind](record, where)
        _check_summary(record["summary"], f"{where}.summary")
        _check_record(command, config, record, where)
    if len(records) < len(taken):
        fail("records", f"lacks unit {taken[len(records)]} (shard {index}/{count} holds {len(taken)} of the "
                         f"{config['units']} units of partial.config.units)")


def _check_config(command: str, config: dict, count: int) -> None:
    names = config["unwinders"]
    if not names or len(set(names)) < len(names):
        fail("partial.config.unwinders", "names no unwinder" if not names else "names an unwinder twice")
    units, where = config["units"], "partial.config.units"
    if command == "verify-elf" and units != count:
        fail(where, f"{units} is not the count of shards N = {count} of partial.shard")
    if command == "run" and (units < config["programs"] or (units != config["programs"] and not config["elf"])):
        fail(where, f"{units} units do not fit partial.config.programs {config['programs']} "
                     f"with partial.config.elf {show(config['elf'])}")


def _check_index(index: int, n: int, taken: range, units: int, shard: Shard, where: str) -> None:
    if n < len(taken) and index == taken[n]:
        return
    if index >= units:
        fail(where, f"unit {index} is not below partial.config.units {units}")
    if index not in taken:
        fail(where, f"unit {index} is not one of shard {shard}'s")
    fail(where, f"unit {index} is out of order or twice" + (f" (expected unit {taken[n]})" if n < len(taken) else ""))


def _check_summary(summary: dict, where: str) -> None:
    """The numbers of a summary agree: every stop once per unwinder, every
    failing stop blamed once, no more samples or registers than failures."""
    stops, seen = summary["stops"], {}
    total, failing = Counter(), Counter()
    for n, (unwinder, traits, position, kind, count) in enumerate(summary["counts"]):
        if len(set(traits)) < len(traits):
            fail(f"{where}.counts[{n}][1]", "names a trait twice")
        key = (unwinder, frozenset(traits), position, kind)
        if key in seen:
            fail(f"{where}.counts[{n}]", f"the same unwinder, traits, position and kind as counts[{seen[key]}]")
        seen[key] = n
        total[unwinder] += count
        failing[unwinder] += count if kind is not None else 0
    for unwinder, counted in total.items():
        if counted != stops:
            fail(f"{where}.counts", f"the rows of {show(unwinder)} count {counted} stops, not the summary's "
                                     f"{stops} (every stop is counted once per unwinder)")
    _check_classes(summary["counts"], where)
    for n, (unwinder, traits, position, count) in enumerate(summary.get("invented", ())):
        matched = seen.get((unwinder, frozenset(traits), position, None))
        if count > (0 if matched is None else summary["counts"][matched][4]):
            fail(f"{where}.invented[{n}]", f"{count} walks are more than the walks of {show(unwinder)} that matched "
                                            "every frame there (its count row of kind null)")
    culprits = summary["culprits"]
    for unwinder in sorted(set(failing) | set(culprits)):
        blame = culprits.get(unwinder, {"innermost": 0, "deeper": 0, "traits": {}})
        blamed = blame["innermost"] + blame["deeper"]
        if blamed != failing[unwinder]:
            fail(at(f"{where}.culprits", unwinder), f"innermost + deeper is {blamed}, not the "
                  f"{failing[unwinder]} failing stops of its count rows")
        for trait, count in blame["traits"].items():
            if count > blamed:
                fail(at(at(at(f"{where}.culprits", unwinder), "traits"), trait),
                      f"{count} is more than the {blamed} failing stops")
    parts = {"samples": {u: len(s) for u, s in summary["samples"].items()}, "without_cfi": summary["without_cfi"],
             "wrong_registers": {u: sum(r.values()) for u, r in summary["wrong_registers"].items()}}
    for name, numbers in parts.items():
        for unwinder, count in numbers.items():
            if count > failing[unwinder]:
                fail(at(f"{where}.{name}", unwinder), f"{count} is more than the {failing[unwinder]} "
                                                        "failing stops of its count rows")
    for chain, methods in summary["methods"].items():
        for method, count in methods.items():
            if count["right"] > count["frames"]:
                fail(at(at(f"{where}.methods", chain), method),
                     f"{count['right']} right frames are more than the {count['frames']} it gave")


def _check_classes(counts: list, where: str) -> None:
    """Every unwinder walked the same stops: per class of stop (traits and
    position), all unwinders count the same number."""
    classes: dict[str, Counter] = {}
    for unwinder, traits, position, _, count in counts:
        classes.setdefault(unwinder, Counter())[(frozenset(traits), position)] += count
    first, *others = sorted(classes) or [None]
    for unwinder in others:
        if classes[unwinder] != classes[first]:
            changed = next(k for k in classes[unwinder].keys() | classes[first].keys()
                           if classes[unwinder][k] != classes[first][k])
            traits, position = changed
            fail(f"{where}.counts", f"{show(unwinder)} counts {classes[unwinder][changed]} stops of "
                                     f"{sorted(traits)} in the {position}, {show(first)} "
                                     f"{classes[first][changed]}: unwinders walk the same stops")


def _check_record(command: str, config: dict, record: dict, where: str) -> None:
    program = record["summary"]["program"]
    if command == "verify-elf" and program != config["elf"]:
        fail(f"{where}.summary.program", f"{show(program)} is not partial.config.elf {show(config['elf'])}")
    if "size" in record and record["size"]["input"] != program:
        fail(f"{where}.size.input", f"{show(record['size']['input'])} is not the summary's program")
    if record["kind"] in ("elf", "linux"):
        _check_group(record["group"], record["summary"], f"{where}.group")


def _check_group(group: dict, summary: dict, where: str) -> None:
    """A compiled build's section: rows that add up, and what its summary gives."""
    for n, result in enumerate(group["results"]):
        if result["failed"] > result["stops"]:
            fail(f"{where}.results[{n}].failed", f"{result['failed']} is more than the row's {result['stops']} stops")
        if sum(result["failure_kinds"].values()) != result["failed"]:
            fail(f"{where}.results[{n}].failure_kinds", f"add up to {sum(result['failure_kinds'].values())}, "
                                                         f"not the row's {result['failed']} failed")
    if group["input"] != summary["program"]:
        fail(f"{where}.input", f"{show(group['input'])} is not the summary's program")
    names = list(group["failed_in_frames_without_cfi"])
    if not names:
        fail(f"{where}.failed_in_frames_without_cfi", "names no unwinder")
    label = {key: group[key] for key in ("input", "build", "compiler", "flags")}
    expected = elf_group(from_json(summary), names, label, group["cfi_not_expressed"])
    difference = _difference(group, expected, where)
    if difference:
        path, got, want = difference
        fail(path, f"{got}, but the record's summary gives {want}")


def _difference(got, want, where: str) -> tuple[str, str, str] | None:
    """The first place where `got` (checked JSON) is not `want`: (path, got, want)."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in [*want, *(k for k in got if k not in want)]:
            if key not in got or key not in want:
                return at(where, key), "present" if key in got else "missing", "present" if key in want else "none"
        pairs = ((got[key], want[key], at(where, key)) for key in want)
    elif isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return where, f"{len(got)} items", f"{len(want)}"
        pairs = ((g, w, at(where, n)) for n, (g, w) in enumerate(zip(got, want)))
    else:
        return (where, show(got), show(want)) if type(got) is not type(want) or got != want else None
    return next(filter(None, (_difference(*pair) for pair in pairs)), None)
