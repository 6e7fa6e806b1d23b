"""`merge` and hostile shard reports: every field of genuine shards tampered
with (removed, of the wrong type, negative, a float, Infinity, NaN, huge, a
boolean), numbers that disagree, records of other shards, files that are
not shard reports at all. Each is refused with exit code 2 and one line
naming the file and, for a field, its JSON path; no report is written.

The genuine shards are made once: `run --programs 2 --no-elf` in two
shards, `verify-elf` of a small fixture in two shards, and (through the
runner, to keep it fast) a one-shard run whose third unit is a compiled
ELF, for the compiled build's section of the report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from harness import shards
from harness.classify import JIT_NAME, module_trait
from harness.cli import main
from harness.errors import InputError
from harness.filesystem import CAPS
from harness.runner import Shard, Unit, run_unit
from harness.shards import partial, read_partials

ROOT = Path(__file__).resolve().parent.parent
CALLS = "corpus/fixtures/calls-clang-nofp.elf"
REMOVED = object()  # the tamper that deletes the key
TAMPERS = {"removed": REMOVED, "string": "7", "negative": -1, "float": 1.5, "Infinity": float("inf"),
           "NaN": float("nan"), "huge": 10**30, "bool": True, "null": None}  # "string", "null": of the wrong type
# Per kind of field, the tampers that give a value of the right type (not hostile there).
VALID = {"count": (), "positive": (), "constant": (), "address": (), "percent": (), "list": (), "object": (),
         "string": ("string",), "label": ("string",), "optional string": ("string", "null"),
         "optional word": ("null",), "optional count": ("null",), "seed": ("negative", "huge"), "bool": ("bool",),
         "entry count": ("removed",), "entry list": ("removed",),  # entry: of an object whose keys are free
         "seconds": ("float", "huge")}


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> dict[str, Path]:
    """Genuine shard reports: run s0, s1 (2 programs); verify-elf v0, v1; elf (a run with a compiled unit)."""
    where = tmp_path_factory.mktemp("genuine")
    for index in range(2):
        assert main(["run", "--programs", "2", "--no-elf", "--jobs", "1", "--shard", f"{index}/2",
                     "--json", str(where / f"s{index}.json")]) == 0
        assert main(["verify-elf", str(ROOT / CALLS), "--entry", "entry", "--every", "20", "--jobs", "1",
                     "--shard", f"{index}/2", "--json", str(where / f"v{index}.json")]) == 0
    run = [json.loads((where / f"s{i}.json").read_text()) for i in range(2)]
    names = ("v2", "dwarf", "v1", "exidx")
    compiled = run_unit(Unit(2, names, build={"file": f"../fixtures/{Path(CALLS).name}", "entry": "entry"}))
    config = {**run[0]["partial"]["config"], "elf": True, "units": 3}
    records = [run[0]["records"][0], run[1]["records"][0], compiled]
    (where / "elf.json").write_text(json.dumps(partial("run", config, Shard(0, 1), records, 2.5)))
    return {path.stem: path for path in where.glob("*.json")}


def merge(capsys, tmp_path, *files) -> tuple[int, list[str]]:
    """Exit code and stderr lines of `merge files`; checks that no report was written."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    status = main(["merge", *map(str, files), "--reports", str(out)])
    assert list(out.iterdir()) == [] or status == 0
    return status, capsys.readouterr().err.splitlines()


def refused(capsys, tmp_path, files, *words: str) -> str:
    status, lines = merge(capsys, tmp_path, *files)
    assert status == 2, lines
    assert len(lines) == 1 and lines[0].startswith("unwind-harness: error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def json_path(path: tuple) -> str:
    """A path as harness.shards names it: records[3].summary.samples["v2+epilogue"]."""
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{json.dumps(key)}]"
    return text


def tampered(genuine, tmp_path, base: str, change) -> list[Path]:
    """The files to merge: `base`'s partner (if it has one), then `base` changed by `change(data)`."""
    data = json.loads(genuine[base].read_text())
    before = json.dumps(data)
    change(data)
    assert json.dumps(data) != before, "the tamper changed nothing"
    path = tmp_path / f"tampered-{base}.json"
    path.write_text(json.dumps(data))
    partner = {"s0": ["s1"], "v0": ["v1"], "elf": []}[base]
    return [genuine[p] for p in partner] + [path]


def resolve(data: dict, path: tuple) -> tuple:
    """`path` with its placeholders replaced: ROW, a failing count row of v1
    with traits; TRAIT, a trait of v1's culprits."""
    if "ROW" not in path and "TRAIT" not in path:
        return path
    summary = data["records"][0]["summary"]
    row = next(n for n, r in enumerate(summary["counts"]) if r[1] and r[3] and r[0] == "v1")
    trait = next(iter(summary["culprits"]["v1"]["traits"]))
    return tuple({"ROW": row, "TRAIT": trait}.get(key, key) if isinstance(key, str) else key for key in path)


def place(data, path: tuple, value) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {}) if isinstance(data, dict) else data[key]
    if value is REMOVED:
        del data[path[-1]]
    else:
        data[path[-1]] = value


R = ("records", 0)
S = (*R, "summary")
G = ("records", 2, "group")
FIELDS = [  # (base, path, kind)
    ("s0", ("schema",), "constant"), ("s0", ("tool",), "constant"), ("s0", ("partial", "command"), "constant"),
    ("s0", ("partial", "config", "seed"), "seed"), ("s0", ("partial", "config", "programs"), "positive"),
    ("s0", ("partial", "config", "unwinders"), "list"), ("s0", ("partial", "config", "unwinders", 0), "constant"),
    ("s0", ("partial", "config", "elf"), "bool"), ("s0", ("partial", "config", "units"), "positive"),
    ("s0", ("partial", "shard", 0), "count"), ("s0", ("partial", "shard", 1), "positive"),
    ("s0", ("records",), "list"), ("s0", R, "object"), ("s0", (*R, "index"), "count"),
    ("s0", (*R, "kind"), "constant"), ("s0", S, "object"), ("s0", (*S, "program"), "string"),
    ("s0", (*S, "stops"), "count"), ("s0", (*S, "instructions"), "count"), ("s0", (*S, "counts"), "list"),
    ("s0", ("partial", "seconds"), "seconds"), ("s0", (*R, "seconds"), "seconds"),
    ("s0", (*S, "counts", "ROW"), "list"),
    ("s0", (*S, "counts", "ROW", 0), "constant"), ("s0", (*S, "counts", "ROW", 1), "list"),
    ("s0", (*S, "counts", "ROW", 1, 0), "string"), ("s0", (*S, "counts", "ROW", 2), "constant"),
    ("s0", (*S, "counts", "ROW", 3), "optional string"), ("s0", (*S, "counts", "ROW", 4), "count"),
    ("s0", (*S, "result"), "optional word"), ("s0", (*S, "expected"), "optional word"),
    ("s0", (*S, "fault"), "optional string"), ("s0", (*S, "samples"), "object"),
    ("s0", (*S, "samples", "v1"), "entry list"), ("s0", (*S, "samples", "v1", 0), "object"),
    *(("s0", (*S, "samples", "v1", 0, key), kind) for key, kind in (
        ("program", "string"), ("stop", "count"), ("pc", "address"), ("function", "string"),
        ("position", "constant"), ("kind", "string"), ("frame", "count"), ("culprit", "string"),
        ("detail", "string"))),
    ("s0", (*S, "wrong_registers"), "object"), ("s0", (*S, "wrong_registers", "v1", "r4"), "entry count"),
    ("s0", (*S, "culprits"), "object"), ("s0", (*S, "culprits", "v1"), "object"),
    ("s0", (*S, "culprits", "v1", "innermost"), "count"), ("s0", (*S, "culprits", "v1", "deeper"), "count"),
    ("s0", (*S, "culprits", "v1", "traits"), "object"),
    ("s0", (*S, "culprits", "v1", "traits", "TRAIT"), "entry count"),
    ("s0", (*S, "without_cfi"), "object"), ("s0", (*S, "without_cfi", "v1"), "entry count"),
    ("s0", (*S, "failing"), "object"), ("s0", (*S, "failing", "v1"), "entry list"),
    ("s0", (*S, "failing", "v1", 0), "constant"),
    ("s0", (*R, "size"), "object"), ("s0", (*R, "size", "input"), "string"),
    ("s0", (*R, "size", "functions"), "positive"), ("s0", (*R, "size", "addresses"), "positive"),
    ("s0", (*R, "size", "v1_refused"), "count"), ("s0", (*R, "size", "bytes"), "object"),
    ("s0", (*R, "size", "bytes", "v2 drop"), "optional count"),
    ("s0", (*R, "size", "bytes", ".debug_frame"), "optional count"),
    ("v0", ("partial", "config", "elf"), "string"), ("v0", ("partial", "config", "entry"), "label"),
    ("v0", ("partial", "config", "every"), "positive"), ("v0", ("partial", "config", "units"), "positive"),
    ("v0", ("partial", "config", "unwinders"), "list"), ("v0", (*R, "kind"), "constant"),
    ("v0", (*S, "stops"), "count"), ("v0", (*S, "program"), "string"),
    ("elf", ("records", 2, "kind"), "constant"), ("elf", G, "object"), ("elf", (*G, "input"), "constant"),
    ("elf", (*G, "build"), "label"), ("elf", (*G, "compiler"), "label"), ("elf", (*G, "flags"), "list"),
    ("elf", (*G, "stops"), "count"), ("elf", (*G, "self_check"), "constant"),
    ("elf", (*G, "v2_epilogue_only_failure_percent"), "percent"),
    ("elf", (*G, "cfi_not_expressed"), "object"), ("elf", (*G, "cfi_not_expressed", "x"), "entry count"),
    ("elf", (*G, "failed_in_frames_without_cfi"), "object"),
    ("elf", (*G, "failed_in_frames_without_cfi", "v1"), "entry count"), ("elf", (*G, "results"), "list"),
    ("elf", (*G, "results", 0), "object"), ("elf", (*G, "results", 0, "unwinder"), "constant"),
    ("elf", (*G, "results", 0, "position"), "constant"), ("elf", (*G, "results", 0, "stops"), "count"),
    ("elf", (*G, "results", 0, "failed"), "count"), ("elf", (*G, "results", 0, "failure_kinds"), "object"),
    ("elf", (*G, "culprits", "v1", "innermost"), "count"), ("elf", (*G, "failure_samples", "v1"), "list"),
    ("elf", (*G, "failure_samples", "v1", 0, "pc"), "address"),
]
FIELD_CASES = [pytest.param(base, path, name, id=f"{base}:{json_path(path)}:{name}")
               for base, path, kind in FIELDS for name in TAMPERS if name not in VALID[kind]
               if not (name == "removed" and isinstance(path[-1], int))]


@pytest.mark.parametrize("base, path, tamper", FIELD_CASES)
def test_a_tampered_field_is_refused_by_its_path(base, path, tamper, genuine, tmp_path, capsys):
    files = tampered(genuine, tmp_path, base, lambda data: place(data, resolve(data, path), TAMPERS[tamper]))
    # A removed key is named with the object that lacks it; anything else by its own path.
    named = resolve(json.loads(genuine[base].read_text()), path[:-1] if tamper == "removed" else path)
    where = json_path(named)
    line = refused(capsys, tmp_path, files)
    if path == ("partial",):
        assert line == f"unwind-harness: error: {files[-1]}: not a shard report (written by run or verify-elf with --shard)"
    assert line.startswith(f"unwind-harness: error: {files[-1]}: {where}"), (where, line)


# ------------------------------------------------- numbers that disagree, and the like


def at(data, path: tuple):
    for key in resolve(data, path):
        data = data[key]
    return data


def setting(path: tuple, value) -> Callable:
    """A change: the value at `path` (resolved) set to `value`, or to `value(old)` if callable."""
    def change(data):
        where = resolve(data, path)
        place(data, where, value(at(data, where)) if callable(value) else value)
    return change


def extra_key(path: tuple) -> Callable:
    return setting((*path, "extra"), 1)


def both(*changes) -> Callable:
    def change(data):
        for each in changes:
            each(data)
    return change


SUM = "the rows of"
DISAGREE = "but the record's summary gives"
CASES = [  # (id, base, change, words the line holds after "FILE: ")
    ("stops-one-more", "s0", setting((*S, "stops"), lambda n: n + 1), f"{json_path(S)}.counts: {SUM}"),
    ("count-one-more", "s0", setting((*S, "counts", 0, 4), lambda n: n + 1), f"{json_path(S)}.counts: {SUM}"),
    ("count-row-removed", "s0", lambda d: at(d, (*S, "counts")).pop(), f"{json_path(S)}.counts: {SUM}"),
    ("count-row-twice", "s0", lambda d: at(d, (*S, "counts")).append(at(d, (*S, "counts", 0))),
     "the same unwinder, traits, position and kind as counts[0]"),
    ("trait-twice", "s0", setting((*S, "counts", "ROW", 1), lambda t: [t[0], t[0]]), "names a trait twice"),
    ("trait-dropped", "s0", setting((*S, "counts", "ROW", 1), lambda t: t[1:]), "unwinders walk the same stops"),
    ("trait-unknown", "s0", setting((*S, "counts", "ROW", 1), lambda t: [*t, "fast"]), "is not a trait"),
    ("verify-count-one-more", "v0", setting((*S, "counts", 0, 4), lambda n: n + 1), f"{json_path(S)}.counts: {SUM}"),
    ("innermost-one-more", "s0", setting((*S, "culprits", "v1", "innermost"), lambda n: n + 1),
     f"{json_path(S)}.culprits.v1: innermost + deeper is"),
    ("deeper-one-less", "s0", setting((*S, "culprits", "v1", "deeper"), lambda n: n - 1),
     f"{json_path(S)}.culprits.v1: innermost + deeper is"),
    ("culprits-removed", "s0", lambda d: at(d, (*S, "culprits")).pop("v1"), f"{json_path(S)}.culprits.v1: "),
    ("culprits-of-a-sound-unwinder", "s0", setting((*S, "culprits", "dwarf"), {"innermost": 1, "deeper": 0,
                                                                              "traits": {}}),
     f"{json_path(S)}.culprits.dwarf: innermost + deeper is 1, not the 0"),
    ("culprit-trait-over", "s0", setting((*S, "culprits", "v1", "traits", "TRAIT"), 10**6),
     f"{json_path(S)}.culprits.v1.traits."),
    ("samples-of-a-sound-unwinder", "s0", lambda d: place(d, (*S, "samples", "dwarf"), at(d, (*S, "samples", "v1"))[:1]),
     f"{json_path(S)}.samples.dwarf: 1 is more than the 0 failing stops"),
    ("eleven-samples", "s0", setting((*S, "samples", "v1"), lambda s: s + s[:1]),
     f"{json_path(S)}.samples.v1: 11 items, more than the 10"),
    ("wrong-registers-of-a-sound-unwinder", "s0", setting((*S, "wrong_registers", "dwarf"), {"r4": 1}),
     f"{json_path(S)}.wrong_registers.dwarf: 1 is more than the 0"),
    ("without-cfi-over", "s0", setting((*S, "without_cfi", "v1"), 10**6), f"{json_path(S)}.without_cfi.v1: 1000000"),
    ("unwinder-not-in-config", "s0", setting(("partial", "config", "unwinders"), lambda u: [n for n in u if n != "v1"]),
     "[0]: \"v1\" is not one of partial.config.unwinders"),
    ("unwinder-unknown", "s0", setting(("partial", "config", "unwinders", 0), "v9"),
     'partial.config.unwinders[0]: "v9" is not an unwinder\'s name'),
    ("unwinders-none", "s0", setting(("partial", "config", "unwinders"), []), "partial.config.unwinders: names no"),
    ("unwinders-twice", "s0", setting(("partial", "config", "unwinders"), lambda u: u + u[:1]),
     "partial.config.unwinders: names an unwinder twice"),
    *((f"unknown-key-{json_path(path) or 'top'}", base, extra_key(path),
       f"{json_path(path) + ': ' if path else ''}unknown key \"extra\"")
      for base, path in [("s0", ()), ("s0", ("partial",)), ("s0", ("partial", "config")), ("s0", R), ("s0", S),
                         ("s0", (*S, "samples", "v1", 0)), ("s0", (*S, "culprits", "v1")), ("s0", (*R, "size")),
                         ("s0", (*R, "size", "bytes")), ("v0", ("partial", "config")), ("elf", G),
                         ("elf", (*G, "results", 0)), ("elf", (*G, "culprits", "v1"))]),
    ("generated-unit-as-elf", "s0", setting((*R, "kind"), "elf"), 'records[0].kind: "elf" is not "generated"'),
    ("stops-record-as-generated", "v0", setting((*R, "kind"), "generated"), 'records[0].kind: "generated" is not "stops"'),
    ("elf-unit-as-generated", "elf", setting(("records", 2, "kind"), "generated"), 'records[2].kind: "generated" is not'),
    ("unit-of-another-shard", "s0", setting((*R, "index"), 1), "records[0].index: unit 1 is not one of shard 0/2's"),
    ("unit-beyond-units", "s0", setting((*R, "index"), 2), "records[0].index: unit 2 is not below partial.config.units"),
    ("records-of-another-shard", "s0", setting(("partial", "shard"), [1, 2]), "records[0].index: unit 0 is not one of"),
    ("record-twice", "s0", setting(("records",), lambda r: r + r), "records[1].index: unit 0 is out of order or twice"),
    ("records-out-of-order", "elf", setting(("records",), lambda r: r[::-1]), "records[0].index: unit 2 is out of order"),
    ("record-missing", "elf", setting(("records",), lambda r: r[:2]), "records: lacks unit 2 (shard 0/1 holds 3 of the 3 units"),
    ("records-none", "s0", setting(("records",), []), "records: lacks unit 0 (shard 0/2 holds 1 of the 2"),
    ("shard-index-is-count", "s0", setting(("partial", "shard"), [2, 2]), "partial.shard: shard 2/2 is not one of 2"),
    ("shard-index-over-count", "s0", setting(("partial", "shard"), [7, 2]), "partial.shard: shard 7/2"),
    ("shard-of-none", "s0", setting(("partial", "shard"), [0, 0]), "partial.shard[1]: 0 is not a positive integer"),
    ("shard-negative", "s0", setting(("partial", "shard"), [-1, 2]), "partial.shard[0]: -1 is not a count"),
    ("shard-as-text", "s0", setting(("partial", "shard"), "0/2"), 'partial.shard: "0/2" is not a shard [I, N]'),
    ("shard-short", "s0", setting(("partial", "shard"), [0]), "partial.shard: a list is not a shard [I, N]"),
    ("shard-long", "s0", setting(("partial", "shard"), [0, 2, 2]), "partial.shard: a list is not a shard"),
    ("units-minus-five", "s0", setting(("partial", "config", "units"), -5), "partial.config.units: -5 is not a positive"),
    ("units-zero", "s0", setting(("partial", "config", "units"), 0), "partial.config.units: 0 is not a positive"),
    ("units-huge", "s0", setting(("partial", "config", "units"), 10**30), "partial.config.units: 10000"),
    ("units-at-the-limit", "s0", setting(("partial", "config", "units"), 2**53), "partial.config.units: 9007199254740992 units"),
    ("units-many-with-elf", "s0", setting(("partial", "config"), lambda c: {**c, "units": 10**12, "elf": True}),
     "records: lacks unit 2 (shard 0/2 holds 500000000000 of the 1000000000000 units of partial.config.units)"),
    ("units-fewer-than-programs", "s0", setting(("partial", "config", "programs"), 3), "partial.config.units: 2 units"),
    ("limits-zero-instructions", "v0", setting(("partial", "config", "limits"), [0, 1.0, 1, 1]),
     "partial.config.limits[0]: 0 is not a positive integer"),
    ("limits-seconds-nan", "s0", setting(("partial", "config", "limits"), [1, float("nan"), 1, 1]),
     "partial.config.limits[1]: NaN is not a positive number of seconds"),
    ("limits-seconds-infinite", "s0", setting(("partial", "config", "limits"), [1, float("inf"), 1, 1]),
     "partial.config.limits[1]: Infinity is not a positive number of seconds"),
    ("limits-short", "s0", setting(("partial", "config", "limits"), [1, 1.0, 1]), "partial.config.limits: a list is not"),
    ("limits-text", "s0", setting(("partial", "config", "limits"), "none"), 'partial.config.limits: "none" is not'),
    ("verify-units-not-shards", "v0", setting(("partial", "config", "units"), 3),
     "partial.config.units: 3 is not the count of shards N = 2"),
    ("verify-two-records", "v0", setting(("records",), lambda r: r + r), "records[1].index: unit 0 is out of order"),
    ("verify-record-of-another-shard", "v0", setting((*R, "index"), 1), "records[0].index: unit 1 is not one of"),
    ("verify-no-record", "v0", setting(("records",), []), "records: lacks unit 0 (shard 0/2 holds 1 of the 2"),
    ("verify-another-program", "v0", setting((*S, "program"), "other.elf"),
     'records[0].summary.program: "other.elf" is not partial.config.elf'),
    ("size-no-functions", "s0", setting((*R, "size", "functions"), 0), "size.functions: 0 is not a positive integer"),
    ("size-of-another-program", "s0", setting((*R, "size", "input"), "other"), 'size.input: "other" is not the summary'),
    ("summary-of-another-program", "s0", setting((*S, "program"), "other"), 'size.input: "generated-0-0" is not the'),
    ("result-over-32-bits", "s0", setting((*S, "result"), 2**32), "summary.result: 4294967296 is too large"),
    ("pc-not-hex", "s0", setting((*S, "samples", "v1", 0, "pc"), "0xZZ"), '.pc: "0xZZ" is not an address'),
    ("position-unknown", "s0", setting((*S, "counts", 0, 2), "middle"), '[2]: "middle" is not "prologue" or'),
    ("schema-two", "s0", setting(("schema",), 2), "schema: 2 is not 1"),
    ("schema-true", "s0", setting(("schema",), True), "schema: true is not 1"),
    ("another-tool", "s0", setting(("tool",), "other"), 'tool: "other" is not "unwind-harness"'),
    ("command-unknown", "s0", setting(("partial", "command"), "mutants"), 'partial.command: "mutants" is not "run"'),
    ("command-swapped", "s0", setting(("partial", "command"), "verify-elf"), "partial.config.elf: false is not a string"),
    ("elf-row-failed-over-stops", "elf", setting((*G, "results", 0), lambda r: {**r, "failed": r["stops"] + 1}),
     f"{json_path(G)}.results[0].failed: "),
    ("elf-row-kinds-over-failed", "elf", setting((*G, "results", 0, "failure_kinds", "limit"), 1),
     f"{json_path(G)}.results[0].failure_kinds: add up to"),
    ("elf-row-unknown-kind", "elf", setting((*G, "results", 0, "failure_kinds", "extra"), 1),
     f"{json_path(G)}.results[0].failure_kinds.extra: \"extra\" is not a failure kind"),
    ("elf-row-stops-changed", "elf", setting((*G, "results", 3, "stops"), lambda n: n + 1),
     f"{json_path(G)}.results[3].stops: "),
    ("elf-group-stops-changed", "elf", setting((*G, "stops"), lambda n: n + 1), f"{json_path(G)}.stops: "),
    ("elf-percent-changed", "elf", setting((*G, "v2_epilogue_only_failure_percent"), 99.5),
     f"{json_path(G)}.v2_epilogue_only_failure_percent: 99.5, {DISAGREE}"),
    ("elf-percent-over-100", "elf", setting((*G, "v2_epilogue_only_failure_percent"), 100.5),
     "v2_epilogue_only_failure_percent: 100.5 is not a percentage"),
    ("elf-percent-enormous", "elf", setting((*G, "v2_epilogue_only_failure_percent"), 10**400),
     "v2_epilogue_only_failure_percent: 10000000000000000000... (401 digits) is not a percentage"),
    ("elf-no-unwinders", "elf", setting((*G, "failed_in_frames_without_cfi"), {}),
     f"{json_path(G)}.failed_in_frames_without_cfi: names no unwinder"),
    ("elf-unwinder-dropped", "elf", lambda d: at(d, (*G, "failed_in_frames_without_cfi")).pop("v1"),
     f"{json_path(G)}.results: "),
    ("elf-culprits-changed", "elf", setting((*G, "culprits", "v1", "innermost"), lambda n: n + 1),
     f"{json_path(G)}.culprits.v1.innermost: "),
    ("elf-culprits-extra-unwinder", "elf", setting((*G, "culprits", "v2-gcc"), {"innermost": 0, "deeper": 0,
                                                                               "traits": {}}),
     f'{json_path(G)}.culprits["v2-gcc"]: present, {DISAGREE} none'),
    ("elf-sample-changed", "elf", setting((*G, "failure_samples", "v1", 0, "detail"), "fine"),
     f'{json_path(G)}.failure_samples.v1[0].detail: "fine", {DISAGREE}'),
    ("elf-samples-dropped", "elf", setting((*G, "failure_samples", "v1"), lambda s: s[1:]),
     f"{json_path(G)}.failure_samples.v1: "),
    ("elf-input-not-summary", "elf", setting((*G, "input"), "x.elf"), f'{json_path(G)}.input: "x.elf" is not the'),
    ("elf-no-info-traits", "elf", setting((*G, "results", 0, "category"), "cat"), f"{json_path(G)}.results[0].category"),
    ("invented-over-matched", "s0", setting((*S, "invented"), [["v2", [], "body", 10**6]]),
     "summary.invented[0]: 1000000 walks are more than the walks of \"v2\" that matched"),
    ("invented-unknown-unwinder", "s0", setting((*S, "invented"), [["nope", [], "body", 1]]),
     'summary.invented[0][0]: "nope" is not'),
    ("long-text", "s0", setting((*R, "index"), "x" * 1_000_000), 'records[0].index: "xxxxxxxxxx'),
    ("long-key", "s0", setting((*R, "x" * 1_000_000), 1), 'records[0]: unknown key "xxxxxxxxx'),
    ("long-number", "s0", setting((*S, "stops"), 10**4000), "is too large (more than 2**53)"),
    ("newline-in-text", "s0", setting((*R, "kind"), "a\nb\r\nc"), 'records[0].kind: "a\\nb\\r\\nc" is not'),
    ("deep-but-parsed", "s0", setting((*S, "program"), json.loads("[" * 400 + "]" * 400)),
     "summary.program: a list is not a string"),
]


@pytest.mark.parametrize("base, change, words", [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_inconsistent_shards_are_refused(base, change, words, genuine, tmp_path, capsys):
    files = tampered(genuine, tmp_path, base, change)
    line = refused(capsys, tmp_path, files, f"{files[-1]}: ")
    assert words in line, (words, line)
    assert len(line) < 400, line


# ------------------------------------------------- files that are not shard reports


def write_deep(path: Path) -> None:
    path.write_text('{"partial": ' + "[" * 100_000 + "]" * 100_000 + "}")


def write_over_cap(path: Path) -> None:
    with open(path, "wb") as file:  # sparse: costs no disk
        file.truncate(CAPS["shard report"] + 1)


def write_fifo(path: Path) -> None:
    os.mkfifo(path)


FILES = [  # (id, make(path) or a fixed path, words)
    ("nested-100000-deep", write_deep, "not a shard report (not JSON: nested too deeply)"),
    ("over-the-cap", write_over_cap, f"{CAPS['shard report'] + 1:,} bytes, more than the"),
    ("dev-null", "/dev/null", "not a regular file (a character device)"),
    ("directory", lambda path: path.mkdir(), "not a regular file (a directory)"),
    ("fifo", write_fifo, "not a regular file (a FIFO)"),
    ("missing", lambda path: None, "cannot read"),
    ("empty", lambda path: path.write_text(""), "not a shard report (not JSON"),
    ("not-json", lambda path: path.write_text("{'partial': 1}"), "not a shard report (not JSON"),
    ("truncated", lambda path: path.write_text('{"partial": {"command": "run"'), "not a shard report (not JSON"),
    ("json-list", lambda path: path.write_text("[1, 2]"), "not a shard report (written by run or verify-elf"),
    ("json-number", lambda path: path.write_text("NaN"), "not a shard report"),
    ("a-full-report", lambda path: path.write_text('{"schema": 1, "results": []}'), "not a shard report"),
    ("partial-null", lambda path: path.write_text('{"schema": 1, "tool": "unwind-harness", "partial": null, '
                                                  '"records": []}'), "partial: null is not an object"),
    ("binary", lambda path: path.write_bytes(b"\x7fELF\x00\xff" * 100), "not a shard report (not JSON"),
]


@pytest.mark.parametrize("make, words", [pytest.param(*case[1:], id=case[0]) for case in FILES])
def test_files_that_are_not_shard_reports_are_refused(make, words, genuine, tmp_path, capsys):
    path = Path(make) if isinstance(make, str) else tmp_path / "shard.json"
    if callable(make):
        make(path)
    refused(capsys, tmp_path, [genuine["s1"], path], f"{path}: {words}")


# ------------------------------------------------- the shards together


def test_genuine_shards_merge(genuine, tmp_path, capsys):
    command, config, records, seconds = read_partials([str(genuine["elf"])])
    assert (command, config["units"], [r["index"] for r in records], seconds) == ("run", 3, [0, 1, 2], 2.5)
    assert merge(capsys, tmp_path, genuine["s1"], genuine["s0"])[0] == 0
    assert read_partials([str(genuine["v1"]), str(genuine["v0"])])[0] == "verify-elf"


def test_a_merged_report_times_the_shards_together(genuine, tmp_path):
    """timing: the instructions the program ran once (each verify-elf shard
    runs it whole), the stops every shard verified, the seconds they took."""
    shards = [json.loads(genuine[name].read_text()) for name in ("v0", "v1")]
    assert main(["merge", str(genuine["v0"]), str(genuine["v1"]), "--json", str(tmp_path / "merged.json")]) == 0
    timing = json.loads((tmp_path / "merged.json").read_text())["timing"]
    ran = {shard["records"][0]["summary"]["instructions"] for shard in shards}
    assert len(ran) == 1 and timing["instructions"] == ran.pop() > 0
    assert timing["stops_verified"] == sum(shard["records"][0]["summary"]["stops"] for shard in shards) > 0
    assert timing["seconds"] == pytest.approx(sum(shard["partial"]["seconds"] for shard in shards), abs=2e-3)


def test_verify_elf_shards_merge_like_run_shards(genuine, tmp_path, monkeypatch):
    """merge makes a new --reports directory and writes json, md and png
    there; without --reports it leaves the main job's reports alone and
    writes to out/verify-elf."""
    new = tmp_path / "new" / "directory"
    assert main(["merge", str(genuine["v0"]), str(genuine["v1"]), "--reports", str(new)]) == 0
    assert sorted(p.name for p in new.iterdir()) == ["latest.json", "latest.md", "latest.png"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "latest.json").write_text("the main job's")
    assert main(["merge", str(genuine["v0"]), str(genuine["v1"])]) == 0
    assert (tmp_path / "out" / "latest.json").read_text() == "the main job's"
    assert json.loads((tmp_path / "out" / "verify-elf" / "latest.json").read_text())["input"].endswith(".elf")


def test_a_shard_of_another_run_is_named(genuine, tmp_path, capsys):
    files = tampered(genuine, tmp_path, "s0", setting(("partial", "config", "seed"), 4))
    refused(capsys, tmp_path, files, f"{files[-1]}: from another run than {files[0]} "
                                     "(its partial.config.seed is 4, the first shard's 0)")
    refused(capsys, tmp_path / "2", [genuine["s0"], genuine["v1"]],
            f"{genuine['v1']}: from another run than {genuine['s0']} (its command is verify-elf, the first shard's run)")


def test_limits_other_than_the_defaults_are_part_of_the_run(genuine, tmp_path, capsys):
    limited = setting(("partial", "config", "limits"), [1000, 2.5, 1 << 30, 100])
    files = tampered(genuine, tmp_path, "elf", limited)
    assert read_partials([str(files[-1])])[1]["limits"] == [1000, 2.5, 1 << 30, 100]
    files = tampered(genuine, tmp_path, "s0", limited)
    refused(capsys, tmp_path, files, f"{files[-1]}: from another run than {files[0]} "
                                     "(its partial.config.limits is a list, the first shard's not given)")


def test_a_unit_in_two_shards_is_named(genuine, tmp_path, capsys):
    refused(capsys, tmp_path, [genuine["s0"], genuine["s1"], genuine["s0"]],
            f"{genuine['s0']}: unit 0 is in two shard reports")


def test_a_missing_shard_is_refused(genuine, tmp_path, capsys):
    refused(capsys, tmp_path, [genuine["s0"]], "merge: the shard reports lack units [1] of 2")
    refused(capsys, tmp_path / "2", [genuine["v1"]], "merge: the shard reports lack units [0] of 2")


def test_the_tampers_are_many():
    assert len(FIELD_CASES) + len(CASES) + len(FILES) >= 85


def test_a_stops_module_and_thread_are_traits_a_shard_may_carry():
    """A process's stops carry their thread's label and their module's
    (classify.thread_trait, module_trait): a shard report holding them is
    read; a trait neither known nor such a label is refused."""
    for trait in ("thread 4243", module_trait("libc.so.6"), module_trait(JIT_NAME), "jit", "no_info"):
        shards.TRAIT(trait, "counts[0]")
    for trait in ("module ", "thread 0", "fast"):
        with pytest.raises(InputError, match="counts.0."):
            shards.TRAIT(trait, "counts[0]")
