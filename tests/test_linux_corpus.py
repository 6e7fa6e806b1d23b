"""The Linux corpus in the main job: which programs run (the slice, all,
none; only those built), how a bad manifest is refused, and the gate on
their own code's failures."""

from __future__ import annotations

import json

import pytest

from harness.errors import InputError
from harness.linux_verify import corpus
from harness.linux_verify.corpus import build_label, linux_entries
from harness.report.baseline import regressions

ENTRY = {"name": "demo-gcc-O2-fp", "path": "bin/demo-gcc-O2-fp", "args": [], "stdin": None, "cwd": None,
         "compiler": "gcc", "opt": "O2", "frame_pointer": True, "link": "dynamic", "exit_status": 0,
         "stdout_sha256": "0" * 64}


@pytest.fixture
def manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "linux" / "bin").mkdir(parents=True)
    (tmp_path / "cache" / "linux" / "bin" / "demo-gcc-O2-fp").write_bytes(b"built")
    other = {**ENTRY, "name": "absent", "path": "bin/absent"}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"programs": [ENTRY, other]}))
    slice_file = tmp_path / "slice.txt"
    slice_file.write_text("absent\n")
    monkeypatch.setattr(corpus, "SLICE", slice_file)
    return path


def test_only_built_programs_run_and_the_rest_are_named(manifest, capsys):
    assert [e["name"] for e in linux_entries("all", manifest)] == ["demo-gcc-O2-fp"]
    assert "1 of the 2 Linux corpus programs are not built" in capsys.readouterr().err
    assert linux_entries("slice", manifest) == []  # the slice's program is not built
    assert linux_entries("none", manifest) == []


@pytest.mark.parametrize("broken, field", [({"programs": {}}, "no list of programs"),
                                           ({"programs": [{**ENTRY, "exit_status": "0"}]}, "exit_status"),
                                           ({"programs": [{"name": "x"}]}, "path")])
def test_a_malformed_manifest_is_refused(tmp_path, broken, field):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(InputError, match=field):
        linux_entries("all", path)


def test_labels_name_the_build():
    label = build_label(ENTRY)
    assert label == {"input": "corpus/linux/demo-gcc-O2-fp", "build": "demo-gcc-O2-fp", "compiler": "gcc",
                     "flags": ["-O2", "-fno-omit-frame-pointer", "-Wl,-z,now"]}
    shipped = build_label({"name": "debian-gzip", "source": "debian-shipped", "link": "dynamic"})
    assert shipped["compiler"] == "debian-shipped" and shipped["flags"] == ["-Wl,-z,now"]


def _row(category: str, failed: int) -> dict:
    return {"unwinder": "dwarf", "category": category, "position": "all", "stops": 100, "failed": failed}


def test_the_gate_watches_a_linux_programs_own_code_only():
    before = {"results": [], "linux": [{"build": "p", "results": [_row("own", 1), _row("libc", 1)]}]}
    after = {"results": [], "linux": [{"build": "p", "results": [_row("own", 1), _row("libc", 9)]}]}
    assert regressions(after, before) == []  # libc moves with the sysroot's versions
    after["linux"][0]["results"][0] = _row("own", 2)
    assert [r.line() for r in regressions(after, before)] == ["p: dwarf / own / all: 1 -> 2 failed stops"]


def test_linux_every_samples_each_program_and_says_so():
    """run --linux-every N verifies a Linux program at samples of mean stride N; its
    group records N and the table shows it; no baseline from a sample."""
    from harness.cli import main
    from harness.linux_verify.corpus import run_linux_unit
    from harness.report.tables import linux_cells
    from harness.runner import LINUX_LIMITS

    entry = next(e for e in linux_entries("slice") if e["name"] == "cwc-clang-Os-nofp")
    every_25 = run_linux_unit(0, entry, ("dwarf",), LINUX_LIMITS, 25)["group"]
    every_50 = run_linux_unit(0, entry, ("dwarf",), LINUX_LIMITS, 50)["group"]
    assert (every_25["every"], every_50["every"]) == (25, 50) and every_50["self_check"] == "ok"
    assert abs(every_25["stops"] - 2 * every_50["stops"]) < 0.02 * every_25["stops"]  # samples of mean stride N
    assert linux_cells([every_50])[1][0][1] == f"{every_50['stops']} (1 in 50)"
    assert "every" not in run_linux_unit(0, entry, ("dwarf",), LINUX_LIMITS._replace(instructions=1000), 1)["group"]
    assert main(["run", "--linux", "slice", "--linux-every", "3", "--check-baseline"]) == 2


@pytest.mark.parametrize("name", ["cwc-clang-Os-nofp", "cjmp-gcc-O2-fp-static"])
def test_a_programs_report_does_not_depend_on_where_the_cache_is(tmp_path, monkeypatch, name):
    """The cache reached by a longer path (here a link in a deep directory)
    gives the same record: neither argv[0] nor /proc/self/exe (which static
    glibc reads at start-up) is the host's path."""
    from harness.linux_verify.corpus import cache, run_linux_unit
    from harness.runner import LINUX_LIMITS

    entry = next(e for e in linux_entries("slice") if e["name"] == name)
    here = run_linux_unit(0, entry, ("dwarf",), LINUX_LIMITS, 50)
    deep = tmp_path / ("a-much-longer-directory-name" * 3) / "unwind-harness"
    deep.mkdir(parents=True)
    (deep / "linux").symlink_to(cache())
    monkeypatch.setenv("UNWIND_HARNESS_CACHE", str(deep))
    assert run_linux_unit(0, entry, ("dwarf",), LINUX_LIMITS, 50) == here
