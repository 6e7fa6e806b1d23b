"""The report as Markdown (reports/latest.md)."""

from __future__ import annotations

from harness.classify import POSITIONS
from harness.report.ci import verdict_markdown
from harness.report.data import ALL, index_rows, input_label
from harness.report.tables import (
    chain_cells,
    elf_cells,
    epilogue_cells,
    failed_and_stopped,
    group_cells,
    linux_cells,
    not_verified,
    past_first_frame_cells,
    rate,
    size_cells,
    stopped_line,
    table_cells,
    table_lines,
    thread_cells,
    unwinder_names,
)
from harness.report.verdict import labelled_sections


def markdown(data: dict, title: str) -> str:
    header, body = table_cells(data)
    out = [f"# {title}", ""]
    out.append(f"unwind-harness {data['version']}, input: {input_label(data, ': ')}. "
               "Failure rate = stops where the unwinder did not reproduce every frame of the shadow "
               "call stack (pc, sp and the registers it restores, listed under the table), over stops "
               "in that category and position; the category is the innermost function's.")
    if data.get("verdict"):
        out += ["", "## Verdict", "", *verdict_markdown(data)]
    out += ["", f"## {labelled_sections(data)[0][0]}: failure rate by category and position", "",
            *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    out += ["", "Checked in every frame: " + "; ".join(f"`{u}` {c}" for u, c in data["checked"].items())
            + ". v1 and frame-pointer walking restore no other callee-saved register by design, so "
            "they are judged on the stack trace (and, for frame-pointer walking, the chain register)."]
    index = index_rows(data["results"])
    for unwinder in unwinder_names(data):
        out += ["", f"## {unwinder}: failure rate by trait and position", ""]
        out += ["| category | " + " | ".join(POSITIONS) + " |", "|---|" + "---|" * len(POSITIONS)]
        for category in dict.fromkeys(r["category"] for r in data["results"]):
            cells = [rate(index[(unwinder, category, p)]) for p in POSITIONS]
            out.append(f"| {category} | " + " | ".join(cells) + " |")
        kinds = index[(unwinder, ALL, ALL)]["failure_kinds"]
        if kinds:
            out += ["", "Failure kinds: " + ", ".join(f"{k} {n}" for k, n in kinds.items()) + "."]
        stopped = stopped_line(index[(unwinder, ALL, ALL)])
        if stopped:
            out.append(f"Walks {stopped}.")
        blame = data["culprits"][unwinder]
        if blame["innermost"] or blame["deeper"]:
            out.append(f"First wrong frame: the innermost at {blame['innermost']} stops, a caller at "
                       f"{blame['deeper']}; it was in a function that is "
                       + ", ".join(f"{t} {n}" for t, n in blame["traits"].items()) + ".")
        registers = data["wrong_registers"].get(unwinder)
        if registers:
            out.append("Wrong registers: " + ", ".join(f"{k} {n}" for k, n in registers.items()) + ".")
        samples = data["failure_samples"].get(unwinder)
        if samples:
            out += ["", "First failing stops:", ""]
            out += [f"- `{s['program']}` pc {s['pc']} in {s['function']} ({s['position']}): "
                    f"{s['kind']} at frame {s['frame']} ({s['culprit']}): {s['detail']}" for s in samples]
    out += chain_lines(data)
    out += size_lines(data.get("sizes"))
    out += elf_lines(data.get("elf", []))
    out += linux_lines(data.get("linux", []))
    out += thread_lines(data.get("threads"))
    out += past_first_frame_lines([group["past_first_frame"] for group in [*data.get("linux", []), data]
                                   if "past_first_frame" in group])
    programs = data["programs"]
    out += ["", "## Programs", "", "| program | stops | self-check |", "|---|---|---|"]
    out += [f"| {p['name']} | {p['stops']}{stride_cell(p.get('sampling'))} | {p['self_check']} |" for p in programs]
    problems = not_verified(data)
    if problems:
        out += ["", "## Not verified", "", "Every count above covers only the stops before these ended:", ""]
        out += [f"- {line}" for line in problems]
    return "\n".join(out) + "\n"


def stride_cell(sampling: dict | None) -> str:
    """How a program's stops were chosen, where not every stop as asked (verify-elf --every)."""
    if sampling is None:
        return ""
    how = "every stop" if sampling["every"] == 1 else f"samples of mean stride {sampling['every']}"
    return f" ({how}, chosen automatically)" if sampling["chosen"] == "auto" else f" ({how})"


def chain_lines(data: dict) -> list[str]:
    header, body = chain_cells(data)
    if not body:
        return []
    out = ["", "## The chain, method by method", "",
           "Frames each method of `chain` gave (v2, then EXIDX, then frame pointers, then a stack scan, each "
           "where the ones before fail), and how many of them were right: each walk followed up to its first "
           "wrong frame, as LUL counted for Firefox (docs/comparators.md).", "", *table_lines(header)]
    return out + ["| " + " | ".join(row) + " |" for row in body]


def size_lines(sizes: dict | None) -> list[str]:
    if not sizes:
        return []
    # The Linux programs' executables too (their own DWARF), here only: not in the terminal or README.
    sizes = {**sizes, "rows": sizes["rows"] + sizes.get("linux_rows", [])}
    header, totals, ratios = size_cells(sizes)
    out = ["", f"## Table sizes (bytes; v2 in the {sizes['layout']} layout)", "",
           "The compiler's own sections as linked, and the tables built here from the same CFI. "
           "v1 cannot describe some functions at all (`refused`: CFA through r7, frames over 64 KiB, "
           "code over 64 KiB); they cost it nothing and are not unwound. `addresses`: v2 address entries "
           "under the `drop` policy. `n/a`: not emitted (generated code has no DWARF sections) "
           "or not published.", "", *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in totals]
    out += ["", "Bytes per function / per address:", "", *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in ratios]
    header, body = epilogue_cells(sizes["rows"])
    out += ["", "Epilogue rows against `drop`. An epilogue with more of its function after it takes "
            "a function table entry (4 bytes) or two pairs in a list (docs/synthesis.md).", "", *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return out


def linux_lines(groups: list[dict]) -> list[str]:
    if not groups:
        return []
    header, body = linux_cells(groups)
    out = ["", "## Linux programs (corpus/linux)", "",
           "Each run as a process (its exit status and stdout checked against qemu-user's), every module "
           "unwound by its own tables. Failed: stops whose walk got a frame wrong, or refused in the "
           "program's own code; stopped: walks that refused honestly (no_info) in a library without the "
           "unwinder's tables, every frame before right (not failures); own failed: the failed stops of "
           "the program's own code. Per program below, each unwinder's failed / stopped stops per "
           "category: where the innermost pc is (the module its code comes from, harness.code_origin; "
           "`cxx_exception`: an exception on its way to its landing pad; `signal_handler`: in a signal "
           "handler's own code; `through_signal_frame`: a signal frame below the stop; `spawned_thread`: in a "
           "thread the process made).", "",
           *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    for group in groups:
        header, body = group_cells(group, failed_and_stopped)
        out += ["", f"### {group['build']} ({group['compiler']}, {' '.join(group['flags'])})", "",
                *table_lines(header)]
        out += ["| " + " | ".join(row) + " |" for row in body]
        out += thread_lines(group.get("threads"))
    return out


def thread_lines(threads: dict | None) -> list[str]:
    if not threads:
        return []
    return _table("Failed stops per thread (main: the process's first; the others by tid, as it made them):",
                  *thread_cells(threads))


def past_first_frame_lines(tables: list[dict]) -> list[str]:
    if not tables:
        return []
    return ["", "## Past each thread's first frame"] + _table(
        "A thread's first frame (the process's entry; a thread's, clone's child path) has no caller: a right "
        "walk ends there. Of the walks that matched every frame up to it, those whose next step made a "
        "caller up (a profiler would show it as the stack's root; a caller at pc 0 is the end walkers stop "
        "at, not counted): invented / matched.", *past_first_frame_cells(tables))


def _table(intro: str, header: list[str], body: list[list[str]]) -> list[str]:
    """A paragraph, then its table."""
    return ["", intro, "", *table_lines(header)] + ["| " + " | ".join(row) + " |" for row in body]


def elf_lines(groups: list[dict]) -> list[str]:
    if not groups:
        return []
    header, body = elf_cells(groups)
    out = ["", "## Compiled programs (corpus/elf)", "",
           "Failed stops per unwinder over all stops of each build, and how many of those failed in "
           "a frame of code without CFI (libgcc's division wrappers); `n/a`: the compiler describes no "
           "epilogues, so `v2-gcc` would only repeat `v2`. `v2 epilogue-only`: stops v2 fails only "
           "because they are in an epilogue, over all stops (the design measured 1.5% on Chrome).", "",
           *table_lines(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    for group in groups:
        header, body = group_cells(group)
        out += ["", f"### {group['build']} ({group['compiler']}, {' '.join(group['flags'])})", "",
                *table_lines(header)]
        out += ["| " + " | ".join(row) + " |" for row in body]
        if group["cfi_not_expressed"]:
            out += ["", "CFI not expressed: " + ", ".join(f"{m} ({n})" for m, n in group["cfi_not_expressed"].items()) + "."]
    return out
