"""The figures of docs/bench.md (and the cost in docs/synthesis.md),
rendered from reports/bench.json, the last full `unwind-harness bench
--json`: one function a block, registered in harness.report.figures'
DOC_BLOCKS, which rewrites them as it does the README's."""

from __future__ import annotations

from statistics import median

LINUX_INPUT = "corpus/linux/"  # how bench labels a Linux corpus program's epilogue row


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def run(reports: dict) -> list[str]:
    """When, where and at what size the figures were measured."""
    bench = reports["bench"]
    size, machine = bench["size"], bench["machine"]
    linux = "with" if size["linux"] else "without"
    return [f"`reports/bench.json`: measured on {machine['date']}, {machine['cores']} cores; "
            f"{size['programs']} generated programs, {size['recorded_stops']:,} recorded stops, "
            f"{size['functions']:,} synthetic functions, {size['lookups']:,} lookups, "
            f"{linux} the built Linux corpus programs."]


def overhead(reports: dict) -> list[str]:
    """Rates of each kind of run, and the overhead ratios."""
    o = reports["bench"]["overhead"]
    return [f"{reports['bench']['size']['programs']} generated programs: {o['instructions']:,} instructions, "
            f"{o['stops']:,} stops, {o['unwinders']} unwinders; each measure the least of {o['passes']} passes.",
            ""] + _table(("figure", "value"), [
                ("emulation with no hook", f"{o['unhooked_stops_per_second']:,.0f} instructions a second"),
                ("bare: a no-op Python hook", f"{o['bare_stops_per_second']:,.0f} instructions a second"),
                ("ground truth alone (the compiled hook, no unwinder)",
                 f"{o['ground_truth_stops_per_second']:,.0f} instructions a second"),
                (f"verified: {o['unwinders']} unwinders at every stop, and the summary",
                 f"{o['verified_stops_per_second']:,.0f} stops a second"),
                ("the emulator's set-up and closing (in the rates above, not in stepping)",
                 f"{o['setup_ms_per_program']:.2f} ms a program"),
                ("**verifier overhead ratio**: bare / verified, stepping (target: at least 0.30)",
                 f"**{o['verifier_overhead_ratio']:.3f}**"),
                ("emulation with no hook / verified, stepping", f"{o['overhead_ratio_against_no_hook']:.3f}"),
                ("whole runs: bare / verified, set-up and closing in both", f"{o['whole_run_overhead_ratio']:.3f}"),
            ])


def steps(reports: dict) -> list[str]:
    """Each unwinder's Python step, microseconds a frame."""
    s = reports["bench"]["steps"]
    rows = [(f"`{name}`", f"{us:.2f}", f"{s['frames'][name]:,}") for name, us in s["step_us"].items()]
    return _table(("unwinder", "µs a frame", "frames a round"), rows) + [
        "", f"`dwarf` / `v2`: {s['step_cost_ratio_dwarf_over_v2']:.2f}; "
            f"the pc cache's hit rate: {100 * s['cache_hit_rate']:.1f}%."]


def scale(reports: dict) -> list[str]:
    """The v2 encoder and reader on the synthetic text, beside Chrome's figures."""
    bench = reports["bench"]
    e, r, c = bench["encoder"], bench["reader"], bench["chrome"]
    parts = ", ".join(f"{name} {size:,}" for name, size in sorted(e["table_bytes"].items(), key=lambda p: -p[1]))
    return _table(("figure", "value", "Chrome (design figures)"), [
        ("functions", f"{e['functions']:,}", f"{c['functions']:,}"),
        ("CFI rows (addresses) a function", f"{e['cfi_rows'] / e['functions']:.2f} "
         f"({e['addresses'] / e['functions']:.2f})", f"({c['addresses'] / c['functions']:.2f})"),
        ("text", f"{e['text_bytes'] / 1e6:.1f} MB", ""),
        ("encode (target: under 5 s)", f"{e['encode_seconds']:.2f} s", ""),
        ("peak resident memory of the encoding process (target: under 500 MB)", f"{e['encode_peak_mb']:,.0f} MB", ""),
        ("blob", f"{e['blob_bytes']:,} bytes", f"{c['bytes']:,} bytes"),
        ("bytes a function", f"{e['bytes_per_function']:.2f}", f"{c['bytes_per_function']:.2f}"),
        ("bytes an address", f"{e['bytes_per_address']:.2f}", f"{c['bytes_per_address']:.2f}"),
        ("the blob's parts, bytes", parts, ""),
        ("reader: load and validate", f"{r['load_seconds']:.2f} s", ""),
        ("reader: lookups a second", f"{r['lookups_per_second']:,.0f}", ""),
        ("lookups that take the previous page's entry", f"{100 * r['share_touching_two_pages']:.2f}%", ""),
    ])


def synthesis(reports: dict) -> list[str]:
    """Rows from code on the largest binary at hand, and on the synthetic text."""
    y = reports["bench"]["synthesis"]
    t = y["synthetic"]
    return _table(("figure", "value"), [
        ("binary", f"{y['binary']}: {y['functions']:,} functions, {y['refusing_functions']:,} of them refusing "
                   "somewhere"),
        ("time", f"{y['seconds']:.2f} s, {y['functions_per_second']:,.0f} functions a second"),
        ("synthetic text", f"{t['functions']:,} functions (the clang builds' code again and again), "
                           f"{t['text_bytes'] / 1e6:.1f} MB of code"),
        ("its time", f"{t['seconds']:.1f} s, {t['functions_per_second']:,.0f} functions a second"),
        ("its peak resident memory (the process: text, analysis, results)", f"{t['peak_mb']:,.0f} MB"),
        (f"v2 bytes a function, the {y['functions_with_cfi']:,} functions with CFI: from code / from CFI",
         f"{y['bytes_per_function_from_code']:.2f} / {y['bytes_per_function_from_cfi']:.2f}"),
    ])


def _epilogue_cells(row: dict) -> tuple:
    return (row["input"], f"{row['functions']:,}", f"{row['epilogues_inside']:,}", f"{row['drop']:,}",
            f"{row['synthesize']:,}", f"{row['over_drop']:+.0%}", f"{row['floor_over_drop']:+.0%}")


def epilogue(reports: dict) -> list[str]:
    """Per input, v2 bytes with epilogue rows against `drop`, and the floor;
    the Linux corpus programs summed up in a line."""
    rows = reports["bench"]["epilogue_rows"]
    linux = [row for row in rows if row["input"].startswith(LINUX_INPUT)]
    lines = _table(("input", "functions", "epilogues inside", "`drop`", "`synthesize`", "over `drop`",
                    "floor over `drop`"), [_epilogue_cells(row) for row in rows if row not in linux])
    if linux:
        over = [row["over_drop"] for row in linux]
        lines += ["", f"{len(linux)} built Linux corpus programs with CFI: over `drop` {min(over):+.0%} to "
                      f"{max(over):+.0%} (median {median(over):+.0%}), {sum(o > 0.2 for o in over)} above +20%; "
                      f"the floor above +20% on {sum(row['floor_over_drop'] > 0.2 for row in linux)}."]
    return lines


def sampling(reports: dict) -> list[str]:
    """A long program: emulation alone against ground truth and a sampled run."""
    f = reports["bench"]["sampling"]
    return _table(("figure", "value"), [
        ("program", f"{f['program']}, {f['instructions']:,} instructions"),
        ("bare: emulation alone, no hook", f"{f['bare_instructions_per_s']:,.0f} instructions a second"),
        ("ground truth from block entries / bare (target: at least 0.25)", f"{f['ground_truth_over_bare']:.3f}"),
        ("ground truth from a hook before every instruction / bare",
         f"{f['ground_truth_per_instruction_over_bare']:.3f}"),
        (f"sampled, every {f['every']:,}, {f['unwinders']} unwinders / bare (target: at least 0.20)",
         f"{f['sampled_over_bare']:.3f} ({f['stops_verified']:,} stops verified)"),
    ])


BLOCKS = {"bench-run": run, "bench-overhead": overhead, "bench-steps": steps, "bench-scale": scale,
          "bench-synthesis": synthesis, "bench-epilogue": epilogue, "bench-sampling": sampling}
