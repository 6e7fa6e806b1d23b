"""`unwind-harness bench`: speed and size figures.

This machine is shared and noisy, so every figure is a rate or a ratio of
two measurements taken in the same run, never a time compared with a fixed
target in a test.

1. Harness overhead: verified stops per second against the same emulation
   with a no-op per-instruction hook (the physical limit of stepping in
   Python), and against ground truth alone (the shadow stack, no unwinder);
   whole runs, the emulator's set-up included, and stepping alone
   (harness.bench.overhead).
2. Unwinder step cost: microseconds per frame over the same recorded stops,
   for each unwinder, and a v2 variant with a small direct-mapped pc cache
   (harness.bench.step_cost).
3. The v2 encoder at Chrome's scale, on a synthetic text drawn from the
   functions of the compiled corpus, in a fresh process (for its peak
   memory), and 4. the v2 reader at that scale (harness.bench.scale).
5. Rows from code: on the largest binary at hand, and at Chrome's scale on
   a synthetic text in a fresh process (harness.bench.synthesis).
6. Table sizes with epilogue rows against `drop` (harness.bench.table_sizes).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

from generators.corpus import generate_program
from harness.bench.overhead import overhead
from harness.bench.sampled import SAMPLED_EVERY, sampling_figures, sampling_rows
from harness.bench.scale import encode_at_scale, lookups
from harness.bench.step_cost import PC_CACHE_ENTRIES, step_cost
from harness.bench.synthesis import (chromium_binary, synthesis_at_scale, synthesis_binary, synthesis_of_binary,
                                     synthesis_of_synthetic)
from harness.bench.table_sizes import epilogue_rows

# Chrome is built by clang with optimization for size or speed: its functions
# are drawn from these builds.
CHROME = {"bytes": 1_800_000, "functions": 389_694, "addresses": 816_686}


@dataclass(frozen=True)
class BenchSize:
    programs: int  # generated programs for the overhead figure
    recorded_stops: int  # stops replayed for the step cost
    functions: int  # synthetic text for the encoder and reader
    lookups: int
    synthesized: int  # functions of the synthetic text rows are made from code for
    linux: bool  # epilogue rows of the built Linux corpus programs too
    chromium: bool  # rows from code for Chrome's binary, where `make chromium` fetched it (minutes)


FULL = BenchSize(programs=40, recorded_stops=4_000, functions=400_000, lookups=500_000, synthesized=700_000,
                 linux=True, chromium=True)
QUICK = BenchSize(programs=1, recorded_stops=200, functions=4_000, lookups=20_000, synthesized=4_000, linux=False,
                  chromium=False)


# The flat keys CI and other tools read, by the figure they come from.
FLAT_KEYS = {"overhead": ("verifier_overhead_ratio", "overhead_ratio_against_no_hook"),
             "steps": ("step_us", "step_cost_ratio_dwarf_over_v2", "cache_hit_rate"),
             "encoder": ("encode_seconds", "encode_peak_mb", "bytes_per_function", "bytes_per_address"),
             "reader": ("lookups_per_second",),
             "sampling": ("bare_instructions_per_s", "ground_truth_over_bare", "sampled_over_bare")}


def run_bench(size: BenchSize, note: Callable[[str], None] = lambda step: None) -> dict:
    """Every figure; `note` hears of each step as it starts."""
    programs = [generate_program(0, number) for number in range(size.programs)]
    figures = {"size": size.__dict__}
    note(f"verification overhead ({size.programs} programs)")
    figures["overhead"] = overhead(size.programs)
    note(f"step cost per unwinder ({size.recorded_stops:,} stops)")
    figures["steps"] = step_cost(programs, size.recorded_stops)
    note(f"encoding {size.functions:,} functions")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        scale = pool.submit(encode_at_scale, size.functions).result()
    note("rows from code (synthesis)")
    figures["synthesis"] = synthesis_at_scale(str(synthesis_binary()))
    note(f"rows from code for a synthetic text of {size.synthesized:,} functions")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # its own peak memory
        figures["synthesis"]["synthetic"] = pool.submit(synthesis_of_synthetic, size.synthesized).result()
    if size.chromium and (chromium := chromium_binary()) is not None:
        note(f"rows from code for Chrome's binary ({chromium})")
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # its own peak memory
            figures["synthesis"]["chromium"] = pool.submit(synthesis_of_binary, str(chromium)).result()
    note("epilogue rows against drop")
    figures["epilogue_rows"] = epilogue_rows(size.programs, size.linux)
    blob = scale.pop("blob")
    figures["encoder"] = scale
    note(f"reader lookups ({size.lookups:,})")
    figures["reader"] = lookups(blob, scale.pop("text_end"), scale.pop("text_base"), size.lookups)
    figures["chrome"] = {**CHROME, "bytes_per_function": CHROME["bytes"] / CHROME["functions"],
                         "bytes_per_address": CHROME["bytes"] / CHROME["addresses"]}
    note(f"a sampled run against emulation alone (every {SAMPLED_EVERY})")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # its memory guard sees its run alone
        figures["sampling"] = pool.submit(sampling_figures, size.linux).result()
    figures["machine"] = {"cores": os.cpu_count(), "date": datetime.date.today().isoformat()}
    figures.update({key: figures[group][key] for group, keys in FLAT_KEYS.items() for key in keys})
    return figures


def table_rows(figures: dict) -> list[tuple[str, str, str]]:
    """(figure, value, beside it) for the terminal table."""
    o, s, e, r, c = (figures[k] for k in ("overhead", "steps", "encoder", "reader", "chrome"))
    rows = [
        ("emulation alone (no hook)", f"{o['unhooked_stops_per_second']:,.0f} stops/s", ""),
        ("bare emulation (no-op Python hook)", f"{o['bare_stops_per_second']:,.0f} stops/s", ""),
        ("ground truth only (shadow stack)", f"{o['ground_truth_stops_per_second']:,.0f} stops/s", "compiled hook"),
        (f"verified, {o['unwinders']} unwinders", f"{o['verified_stops_per_second']:,.0f} stops/s", "compiled hook"),
        ("verifier overhead ratio (stepping)", f"{o['verifier_overhead_ratio']:.4f}",
         "target >= 0.30 (against the no-op Python hook)"),
        ("  against emulation with no hook", f"{o['overhead_ratio_against_no_hook']:.4f}", ""),
        ("  whole runs, emulator set-up in both", f"{o['whole_run_overhead_ratio']:.4f}",
         f"set-up and closing {o['setup_ms_per_program']:.1f} ms a program"),
    ]
    rows += [(f"step: {name}", f"{us:.2f} us/frame", f"{s['frames'][name]:,} frames")
             for name, us in s["step_us"].items()]
    rows += [
        ("dwarf / v2 step cost", f"{s['step_cost_ratio_dwarf_over_v2']:.2f}", "seeds: 15-30 (full CFI parsing)"),
        (f"{PC_CACHE_ENTRIES}-entry pc cache hit rate", f"{100 * s['cache_hit_rate']:.1f}%", ""),
        ("encode: functions / CFI rows", f"{e['functions']:,} / {e['cfi_rows']:,}",
         f"Chrome: {c['functions']:,} / {c['addresses']:,} addresses"),
        ("encode: seconds", f"{e['encode_seconds']:.1f}", "target < 5"),
        ("encode: peak memory (process)", f"{e['encode_peak_mb']:.0f} MB", "target < 500 MB"),
        ("blob bytes", f"{e['blob_bytes']:,}", f"Chrome: {c['bytes']:,}"),
        ("bytes per function", f"{e['bytes_per_function']:.2f}", f"Chrome: {c['bytes_per_function']:.2f}"),
        ("bytes per address", f"{e['bytes_per_address']:.2f}", f"Chrome: {c['bytes_per_address']:.2f}"),
        ("reader: load and validate", f"{r['load_seconds']:.2f} s", ""),
        ("reader: lookups", f"{r['lookups_per_second']:,.0f} /s", ""),
        ("lookups via the previous page's entry", f"{100 * r['share_touching_two_pages']:.2f}%", ""),
    ]
    y = figures["synthesis"]
    t = y["synthetic"]
    rows += [
        (f"rows from code: {y['functions']:,} functions", f"{y['functions_per_second']:,.0f} functions/s",
         y["binary"]),
        (f"rows from code: {t['functions']:,} functions", f"{t['functions_per_second']:,.0f} functions/s",
         f"synthetic text of {t['text_bytes'] / 1e6:.0f} MB, peak {t['peak_mb']:,.0f} MB (process); "
         "target >= 10,000/s, < 2,048 MB"),
    ]
    if "chromium" in y:
        k = y["chromium"]
        rows.append((f"rows from code: {k['functions']:,} functions", f"{k['functions_per_second']:,.0f} functions/s",
                     f"Chrome's armhf binary, peak {k['peak_mb']:,.0f} MB (process), {k['bytes_per_function']:.2f} v2 "
                     "bytes a function; target >= 10,000/s, < 2,048 MB"))
    rows += [
        ("v2 bytes per function: from code / CFI", f"{y['bytes_per_function_from_code']:.2f} / "
         f"{y['bytes_per_function_from_cfi']:.2f}", f"the {y['functions_with_cfi']:,} functions with CFI"),
    ]
    rows += [(f"epilogue rows: {row['input']}", f"{row['over_drop']:+.0%} over drop (floor {row['floor_over_drop']:+.0%})",
              f"{row['drop']:,} -> {row['synthesize']:,} bytes, {row['epilogues_inside']:,} inside epilogues")
             for row in figures["epilogue_rows"]]
    return rows + sampling_rows(figures["sampling"])
