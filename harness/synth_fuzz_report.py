"""The synthesis fuzz's report (harness.synth_fuzz): per compiler and flag
set, and in all, the instructions compared, agreements, disagreements and
the verdicts of the stops judged there, refusals by reason and runs ended
early; the findings, each with its smallest example; and every build's
counts. JSON (sorted keys: the same run, the same bytes but for
`timing.seconds`) and a short Markdown summary of it."""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

from harness.compare_rows import OUTCOMES

COUNTS = ("builds", "functions", "instructions", "agree", "disagree", "disagree_run", "disagree_data", "refused",
          "stops")
VERDICTS = tuple(OUTCOMES.values())
# Of a finding's occurrences, the example kept: the smallest function, then the first build.
EXAMPLE_ORDER = ("function_bytes", "seed", "compiler", "flags", "pc")


def tally(builds: Sequence[dict]) -> dict:
    """The counts of `builds` added up (those that failed to build apart)."""
    built = [b for b in builds if "error" not in b]
    out = {key: sum(b[key] for b in built) for key in COUNTS if key != "builds"}
    out["builds"], out["build_errors"] = len(built), len(builds) - len(built)
    outcomes, refusals, faults = Counter(), Counter(), Counter()
    for b in built:
        outcomes.update(b["outcomes"])
        refusals.update(b["refusals"])
        if b["disagree"]:  # run only then
            faults[b["fault"] or "ended"] += 1
    out["verdicts"] = {verdict: outcomes[verdict] for verdict in VERDICTS}
    out["refusals"] = dict(sorted(refusals.items()))
    out["runs"] = dict(sorted(faults.items()))  # how the judged runs ended
    return out


def grouped_findings(builds: Sequence[dict], order: dict) -> list[dict]:
    """One finding per kind and key: how often it occurred, in how many
    builds, and its smallest example (EXAMPLE_ORDER)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for b in builds:
        for finding in b.get("findings", ()):
            groups.setdefault((finding["kind"], finding["key"]), []).append(finding)
    out = []
    for (kind, key), found in sorted(groups.items()):
        example = min(found, key=lambda f: tuple(order.get(f[k], f[k]) if k in ("compiler", "flags") else
                                                 int(f[k], 16) if k == "pc" else f[k] for k in EXAMPLE_ORDER))
        out.append({"kind": kind, "key": key, "occurrences": len(found),
                    "builds": len({(f["seed"], f["compiler"], f["flags"]) for f in found}),
                    "programs": len({f["seed"] for f in found}),
                    "refused": sum(f.get("refused", 0) for f in found), "example": example})
    return out


def assemble(records: Sequence[dict], settings: dict, seconds: float) -> dict:
    builds = [b for r in records for b in r["builds"]]
    compilers, flag_sets = list(settings["flag_sets"]), list(next(iter(settings["flag_sets"].values())))
    order = {**{c: n for n, c in enumerate(compilers)}, **{f: n for n, f in enumerate(flag_sets)}}
    groups = [{"compiler": c, "flags": f, **tally([b for b in builds if (b["compiler"], b["flags"]) == (c, f)])}
              for c in compilers for f in flag_sets]
    rows = [{k: v for k, v in b.items() if k != "findings"} for b in builds]
    return {**settings, "groups": groups, "totals": tally(builds), "findings": grouped_findings(builds, order),
            "builds": rows, "timing": {"seconds": round(seconds, 1)}}


def report_json(report: dict) -> str:
    return json.dumps(report, indent=1, sort_keys=True) + "\n"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.3f}%" if whole else "-"


def markdown(report: dict) -> str:
    """The summary: settings, the table per compiler and flag set, the
    refusals by reason and the findings with their examples."""
    s = report
    lines = ["# Synthesis fuzz: rows from code beside the compiler's CFI", "",
             f"csmith seeds {s['seed']}..{s['seed'] + s['count'] - 1} ({s['versions']['csmith']}; "
             f"`{' '.join(s['csmith_options'])}`{'; every function kept out of line' if s['out_of_line'] else ''}), "
             f"instruction budget {s['budget']:,} a run.", ""]
    lines += [f"- {name}: {version}" for name, version in sorted(s["versions"].items()) if name != "csmith"]
    lines += ["", "| compiler | flags | builds | functions | instructions | agree | disagree (run, in data) | refused | "
              "stops judged | code right | compiler right | both right | both wrong | runs out of budget |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in [*s["groups"], {**s["totals"], "compiler": "all", "flags": ""}]:
        flags = " ".join(s["flag_sets"][g["compiler"]][g["flags"]]) if g["flags"] else ""
        v = g["verdicts"]
        lines.append(f"| {g['compiler']} | {flags} | {g['builds']:,}{_errors(g)} | {g['functions']:,} | "
                     f"{g['instructions']:,} | {g['agree']:,} | "
                     f"{g['disagree']:,} ({g['disagree_run']:,}, {g['disagree_data']:,}) | "
                     f"{g['refused']:,} ({_share(g['refused'], g['instructions'])}) | {g['stops']:,} | "
                     f"{v['code right']:,} | {v['compiler right']:,} | {v['both right']:,} | {v['both wrong']:,} | "
                     f"{g['runs'].get('the instruction budget ran out', 0):,} |")
    lines += ["", "Refused instructions by reason:", ""]
    lines += [f"- {n:,}: {reason}" for reason, n in sorted(s["totals"]["refusals"].items(), key=lambda i: -i[1])]
    lines += ["", f"## Findings ({len(s['findings'])})", ""]
    for f in s["findings"]:
        lines += _finding(f)
    lines += ["", f"({s['timing']['seconds']:,.0f} s)", ""]
    return "\n".join(lines)


def _errors(group: dict) -> str:
    return f" (+{group['build_errors']} not built)" if group["build_errors"] else ""


def _finding(f: dict) -> list[str]:
    e = f["example"]
    said = f"refused {f['refused']:,} instructions" if f["kind"] == "refusal" else f"{f['occurrences']} pcs"
    head = [f"### {f['kind']}: {f['key']}", "",
            f"{said} in {f['builds']} builds of {f['programs']} programs. Smallest: seed {e['seed']}, "
            f"{e['compiler']} {e['flags']}, `{e['function']}` ({e['function_bytes']} bytes), pc {e['pc']}"]
    if f["kind"] == "refusal":
        head.append(f"({e['reason']}).")
    else:
        head.append(f"`{e['instruction']}`: compiler `{e['compiler_rule']}`, code `{e['code_rule']}`; "
                    f"stops {e['stops']}.")
    return [*head, "", "```", *e["code"], "```", ""]
