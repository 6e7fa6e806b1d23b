"""`run`: deterministic reports, the JSON schema, and the baseline check."""

import json
from pathlib import Path

from harness.classify import POSITIONS, TRAITS
from harness.cli import main
from harness.report.data import without_seconds

ROOT = Path(__file__).resolve().parent.parent


def run(tmp_path, *extra):
    return main(["run", "--programs", "2", "--seed", "5", "--no-elf", "--reports", str(tmp_path), *extra])


def test_same_seed_gives_byte_identical_reports(tmp_path):
    """Byte for byte but for the JSON's wall-clock seconds (its `timing`)."""
    assert run(tmp_path / "a") == 0
    assert run(tmp_path / "b") == 0
    for name in ("latest.md", "latest.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    a, b = (json.loads((tmp_path / d / "latest.json").read_text()) for d in "ab")
    assert without_seconds(a) == without_seconds(b)
    seconds_apart = {**a, "timing": {**a["timing"], "seconds": b["timing"]["seconds"]}}
    assert json.dumps(seconds_apart, indent=1) + "\n" == (tmp_path / "b" / "latest.json").read_text()


def test_json_schema(tmp_path):
    run(tmp_path)
    data = json.loads((tmp_path / "latest.json").read_text())
    assert (data["schema"], data["tool"], data["input"], data["seed"]) == (1, "unwind-harness", "generated", 5)
    rows = {(r["unwinder"], r["category"], r["position"]): r for r in data["results"]}
    for unwinder in ("v2", "v2-gcc", "dwarf"):
        for category in ("all", *TRAITS):
            for position in (*POSITIONS, "all"):
                row = rows[(unwinder, category, position)]
                assert set(row) >= {"stops", "failed", "failure_kinds"}
                assert sum(row["failure_kinds"].values()) == row["failed"] <= row["stops"]
    assert all(p["self_check"] == "ok" for p in data["programs"])
    stops = sum(p["stops"] for p in data["programs"])  # every instruction of a generated program a stop
    assert data["timing"]["instructions"] == data["timing"]["stops_verified"] == stops > 0 < data["timing"]["seconds"]
    names = {r["unwinder"] for r in data["results"]}
    assert set(data["checked"]) == set(data["culprits"]) == names >= {"v1", "exidx", "framepointer"}
    for unwinder, blame in data["culprits"].items():
        # Every failing stop is blamed on exactly one first wrong frame.
        assert blame["innermost"] + blame["deeper"] == rows[(unwinder, "all", "all")]["failed"]


def test_check_baseline_names_each_risen_category(tmp_path, capsys):
    assert run(tmp_path, "--write-baseline") == 0
    assert run(tmp_path, "--check-baseline") == 0
    baseline = json.loads((tmp_path / "baseline.json").read_text())
    lowered = 0
    for row in baseline["results"]:
        if row["unwinder"] == "v2" and row["category"] == "leaf" and row["failed"]:
            row["failed"] -= 1
            lowered += 1
    assert lowered
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    capsys.readouterr()
    assert run(tmp_path, "--check-baseline") == 1
    err = capsys.readouterr().err
    assert "regression: v2 / leaf / all" in err
    assert "regression: v2 / all / all" not in err


def test_check_baseline_refuses_another_seed(tmp_path, capsys):
    run(tmp_path, "--write-baseline")
    assert main(["run", "--programs", "2", "--seed", "6", "--no-elf", "--reports", str(tmp_path), "--check-baseline"]) == 2
    assert "seed: 6 vs 5" in capsys.readouterr().err


def test_summary_of_lets_the_run_go_before_the_collector_resumes():
    """The result of a verified run is thousands of small objects: let go
    with the collector paused, it is never walked; the summary equals
    summarize's."""
    import gc
    import weakref

    from generators.corpus import generate_program
    from harness.report.summary import summarize, summary_of, to_json
    from harness.unwind.registry import build_unwinders
    from harness.verify.stops import verify_program

    program = generate_program(0, 1)
    collecting_when_freed = []

    def verified():
        result = verify_program(program, build_unwinders(program))
        weakref.finalize(result, lambda: collecting_when_freed.append(gc.isenabled()))
        return result

    summary = summary_of(verified)
    assert collecting_when_freed == [False] and gc.isenabled()
    assert to_json(summary) == to_json(summarize(verify_program(program, build_unwinders(program))))


def test_blame_counts_each_unwinders_registers_and_culprits_in_the_order_of_their_first_cause():
    """summary.blame: wrong registers by unwinder, stops whose innermost
    frame or a caller went wrong, and the culprits' traits, each in the
    order its first cause comes; a cause without stops is left out."""
    from harness.report.summary import blame
    from harness.verify.failures import FailureCause

    def ordered(made):  # dicts compared with their order, all the way down
        registers, blamed = made
        return ([(u, list(counts.items())) for u, counts in registers.items()],
                [(u, c.innermost, c.deeper, list(c.traits.items())) for u, c in blamed.items()])

    causes = [FailureCause("v2", "wrong_register", 1, "g", "r4", "", frozenset({"leaf", "alloca"})),
              FailureCause("v2", "limit", 0, "f", None, "", frozenset({"leaf"})),
              FailureCause("exidx", "wrong_pc", 0, "f", None, "", frozenset())]
    entries = [(0, 1, 2), (1, 0, 3), (2, 1, 4)]  # cause 2 has no stops
    traits = [(trait, {"leaf": 9, "alloca": 3}[trait]) for trait in causes[0].culprit_traits]  # as cause 0 has them
    assert ordered(blame(entries, causes)) == ([("v2", [("r4", 3)])], [("v2", 6, 3, traits)])


def test_a_run_writes_to_the_ignored_folder_and_gates_on_the_committed_baseline(tmp_path, monkeypatch):
    """Without --reports, reports go to out/ (which git ignores) and the
    gate reads reports/baseline.json, which only --write-baseline changes:
    `make run` and `make test` rewrite no tracked file."""
    monkeypatch.chdir(tmp_path)
    job = ["run", "--programs", "1", "--seed", "5", "--no-elf", "--jobs", "1", "--unwinder", "v2"]
    assert main([*job, "--write-baseline"]) == 0
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["baseline.json"]
    recorded = (tmp_path / "reports" / "baseline.json").read_bytes()
    (tmp_path / "out" / "latest.md").unlink()
    assert main([*job, "--check-baseline"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["latest.json", "latest.md", "latest.png"]
    assert json.loads((tmp_path / "out" / "latest.json").read_text())["gate"]["baseline"] == "reports/baseline.json"
    assert (tmp_path / "reports" / "baseline.json").read_bytes() == recorded
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "out/" in ignored and not any(line.startswith("reports") and "baseline" in line for line in ignored)


def test_the_stopped_line_says_how_many_walks_went_right_to_the_bottom():
    """v2 in csegv (every stop, --signal-frames): of 214,753 stops 98 failed
    and 214,620 stopped in libraries without its tables (own code's 30 are
    among the failed), so 35 walks went right to the bottom."""
    from harness.report.tables import stopped_line

    row = {"stops": 214753, "failed": 98, "stopped": 214620,
           "stopped_in": {"own": 30, "libc": 33853, "libgcc": 53, "ld.so": 180430, "plt": 284}}
    assert stopped_line(row) == ("stopped, no tables there, at 214620 stops (libc 33853, libgcc 53, ld.so 180430, "
                                 "plt 284); in own code at 30, counted as failed; right to the bottom at 35 (0.02%)")
    assert stopped_line({**row, "stopped": 0, "stopped_in": {}}) is None
