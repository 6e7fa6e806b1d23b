"""The report as data: rows per unwinder x category x position (the JSON
schema of ARCHITECTURE.md), where failing stops first went wrong, and each
compiled build's section. Deterministic: the same summaries give the same
bytes, but for the wall-clock seconds of `timing` (`without_seconds`)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, Sequence

from harness import __version__
from harness.classify import MODULE_PREFIX, MODULES, OWN, POSITIONS, SPAWNED_THREAD, THREAD_PREFIX, TRAITS, in_order
from harness.report.failing import to_json as failing_json
from harness.report.summary import Culprits, ProgramSummary, combine, methods_json
from harness.unwind.registry import strategy
from harness.verify.tally import STOPPED_PREFIX

ALL = "all"
SCHEMA = 1


def categories(counts: Counter) -> list[str]:
    seen = {trait for (_, traits, _, _) in counts for trait in traits}
    modules = [module for module in MODULES if module in seen]  # a process's: where the code comes from
    # e.g. no_info for code without CFI; not a thread's label, a program's own (thread_table)
    extra = sorted(trait for trait in seen - set(TRAITS) - set(MODULES)
                   if not trait.startswith((THREAD_PREFIX, MODULE_PREFIX)))  # those have tables of their own
    return [ALL, *TRAITS, *extra, *modules]


def _row(counts: Counter, unwinder: str, category: str, position: str) -> dict:
    """One row: its stops; the failed ones (wrong, or refused in the
    program's own code) by kind; the walks that stopped honestly, per
    module (own: the no_info failures; elsewhere not failures)."""
    stops, failed, stopped, kinds, stopped_in = 0, 0, 0, Counter(), Counter()
    for (name, traits, where, kind), n in counts.items():
        if name != unwinder or (category != ALL and category not in traits):
            continue
        if position != ALL and where != position:
            continue
        stops += n
        if kind is None:
            continue
        if kind.startswith(STOPPED_PREFIX):
            stopped += n
            stopped_in[kind[len(STOPPED_PREFIX):]] += n
            continue
        failed += n
        kinds[kind] += n
        if kind == "no_info":
            stopped_in[OWN] += n
    return {"unwinder": unwinder, "category": category, "position": position, "stops": stops, "failed": failed,
            "failure_kinds": dict(sorted(kinds.items())), "stopped": stopped,
            "stopped_in": {m: stopped_in[m] for m in MODULES if stopped_in[m]}}


def result_rows(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> list[dict]:
    """One row per unwinder x category x position (ARCHITECTURE.md schema)."""
    counts: Counter = Counter()
    for summary in summaries:
        counts.update(summary.counts)
    return [_row(counts, unwinder, category, position)
            for unwinder in unwinders for category in categories(counts) for position in (*POSITIONS, ALL)]


def past_first_frame(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> dict | None:
    """Per unwinder, in the main thread and in the threads the process made:
    the walks that matched every frame up to the thread's first, which has
    no caller, and of those the walks whose step past it made one up
    (harness.verify.walks.INVENTED); None where no summary is a process's
    (a bare-metal function's outermost frame is the harness's, compared)."""
    processes = [summary for summary in summaries if summary.stdout_sha256 is not None]
    if not processes:
        return None
    table = {unwinder: {thread: {"matched": 0, "invented": 0} for thread in ("main_thread", "spawned_threads")}
             for unwinder in unwinders}
    for summary in processes:
        for (unwinder, traits, _, kind), n in summary.counts.items():
            if kind is None and unwinder in table:
                table[unwinder]["spawned_threads" if SPAWNED_THREAD in traits else "main_thread"]["matched"] += n
        for (unwinder, traits, _), n in summary.invented.items():
            if unwinder in table:
                table[unwinder]["spawned_threads" if SPAWNED_THREAD in traits else "main_thread"]["invented"] += n
    return table


def _split_rows(summaries: Sequence[ProgramSummary], unwinders: Sequence[str], label_of) -> dict[str, dict]:
    """Stops by `label_of(traits)`: each label's stops, and per unwinder
    the failed ones (wrong, or refused in the program's own code) and the
    right ones (every frame matched, to the thread's first)."""
    rows: dict[str, dict] = {}
    for summary in summaries:
        for (unwinder, traits, _, kind), n in summary.counts.items():
            row = rows.get(label := label_of(traits)) or rows.setdefault(
                label, {"stops": 0, "failed": dict.fromkeys(unwinders, 0), "right": dict.fromkeys(unwinders, 0)})
            if unwinder == unwinders[0]:
                row["stops"] += n
            if unwinder not in row["failed"]:
                continue
            if kind is None:
                row["right"][unwinder] += n
            elif not kind.startswith(STOPPED_PREFIX):
                row["failed"][unwinder] += n
    return rows


def thread_table(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> dict | None:
    """Per thread of a process that made threads ("main", then each
    "thread TID" in the order of their tids): _split_rows's; None where no
    stop is in a thread the process made."""
    rows = _split_rows(summaries, unwinders,
                       lambda traits: next((trait for trait in traits if trait.startswith(THREAD_PREFIX)), "main"))
    if set(rows) <= {"main"}:
        return None
    return {label: rows[label] for label in sorted(rows, key=lambda label: (label != "main", len(label), label))}


def module_table(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> dict | None:
    """Per module of a process, by the file the innermost pc's code comes
    from (`chromium`, `libc.so.6`, `chromium@plt`, `[jit]`: classify.module_trait),
    most stops first: _split_rows's; None where no stop names one (bare metal)."""
    rows = _split_rows(summaries, unwinders, lambda traits: next(
        (trait[len(MODULE_PREFIX):] for trait in traits if trait.startswith(MODULE_PREFIX)), None))
    rows.pop(None, None)
    return {name: rows[name] for name in sorted(rows, key=lambda name: (-rows[name]["stops"], name))} or None


def culprit_table(summary: ProgramSummary, unwinders: Sequence[str]) -> dict[str, dict]:
    """Per unwinder, where its failing stops first went wrong: in the
    innermost frame or deeper, and the traits of the function that frame is
    in (a stop deep in a healthy chain fails for one bad caller)."""
    table = {}
    for unwinder in unwinders:
        blame = summary.culprits.get(unwinder, Culprits())
        table[unwinder] = {"innermost": blame.innermost, "deeper": blame.deeper,
                           "traits": {t: blame.traits[t] for t in in_order(blame.traits) if blame.traits[t]}}
    return table


def report_data(summaries: Sequence[ProgramSummary], unwinders: Sequence[str], seed: int | None,
                source: str, sizes: dict | None = None) -> dict:
    whole = combine(summaries)
    return {
        "schema": SCHEMA,
        "tool": "unwind-harness",
        "version": __version__,
        "seed": seed,
        "input": source,
        "results": result_rows(summaries, unwinders),
        "checked": {u: strategy(u).restores.describe() for u in unwinders},
        "programs": [
            {"name": s.program, "stops": s.stops, "result": s.result, "expected": s.expected,
             "self_check": s.self_check, **process_fields(s), **({} if s.sampling is None else
                                                                 {"sampling": s.sampling})}
            for s in summaries
        ],
        # unwinder -> register -> failing stops (d8-d15 apart from the core registers)
        "wrong_registers": {u: dict(sorted(c.items())) for u, c in sorted(whole.wrong_registers.items())},
        "culprits": culprit_table(whole, unwinders),
        "failure_samples": {u: whole.samples.get(u, []) for u in unwinders},
        "sizes": sizes,
        # program -> the digest of its failing stops (harness.report.failing), for a later run's gate
        "failing": {s.program: failing_json(s.failing) for s in summaries},
        # chain -> method -> frames it gave, and right ones, each walk followed to its first wrong frame
        "chain_methods": methods_json(whole.methods),
        **_past_first_frame_field(summaries, unwinders),
    }


def _past_first_frame_field(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> dict:
    """A process's fields: past_first_frame, the thread_table where it made threads, the module_table."""
    tables = {"past_first_frame": past_first_frame(summaries, unwinders), "threads": thread_table(summaries, unwinders),
              "modules": module_table(summaries, unwinders)}
    return {key: table for key, table in tables.items() if table is not None}


def process_fields(summary: ProgramSummary) -> dict:
    """A Linux process's exit status and output digest (nothing for a bare-metal run)."""
    if summary.stdout_sha256 is None:
        return {}
    return {"exit_status": summary.result, "stdout_sha256": summary.stdout_sha256}


def elf_group(summary: ProgramSummary, unwinders: Sequence[str], label: dict, problems: dict[str, int]) -> dict:
    """One compiled ELF's section of the report: the same rows as the main
    report, the share of stops v2 fails only because they are epilogues, and
    per unwinder the failures in frames of code without CFI."""
    rows = result_rows([summary], unwinders)
    index = index_rows(rows)
    v2_epilogue = index.get(("v2", ALL, "epilogue"), {"failed": 0})["failed"]
    return {
        **label,
        "stops": summary.stops,
        "self_check": summary.self_check,
        "v2_epilogue_only_failure_percent": round(100 * v2_epilogue / summary.stops, 2) if summary.stops else 0,
        "cfi_not_expressed": problems,
        "failed_in_frames_without_cfi": {u: summary.without_cfi[u] for u in unwinders},
        "results": rows,
        "culprits": culprit_table(summary, unwinders),
        "failure_samples": {u: summary.samples.get(u, []) for u in unwinders},
        "failing": failing_json(summary.failing),
        "chain_methods": methods_json(summary.methods),
        **_past_first_frame_field([summary], unwinders),
    }


def timing(instructions: int, seconds: float, stops_verified: int) -> dict:
    """What a run cost: the instructions its programs ran, the wall-clock
    seconds it took, and the stops at which it verified every unwinder."""
    return {"instructions": instructions, "seconds": round(seconds, 3), "stops_verified": stops_verified}


def with_timing(data: dict, summaries: Sequence[ProgramSummary], seconds: float) -> dict:
    """`data` with the `timing` of the run of `summaries` that took `seconds`."""
    return {**data, "timing": timing(sum(s.instructions for s in summaries), seconds, sum(s.stops for s in summaries))}


def without_seconds(data):
    """A report without its wall-clock seconds (those of every `timing`):
    what the same inputs give byte for byte, on any machine."""
    if isinstance(data, list):
        return [without_seconds(item) for item in data]
    if not isinstance(data, dict):
        return data
    return {key: {k: v for k, v in value.items() if k != "seconds"} if key == "timing" else without_seconds(value)
            for key, value in data.items()}


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def input_label(data: dict, seed_mark: str = " ") -> str:
    """What a report's title says it read: its input, and the generator's
    seed (after `seed_mark`) when generated programs were among it."""
    return data["input"] if data.get("seed") is None else f"{data['input']}, seed{seed_mark}{data['seed']}"


def index_rows(rows: Iterable[dict]) -> dict[tuple[str, str, str], dict]:
    return {(r["unwinder"], r["category"], r["position"]): r for r in rows}
