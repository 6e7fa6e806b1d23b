"""The multi-machine workflow (.github/workflows/unwind.yml): its shard and
merge jobs run `.ci/shard I N` and `.ci/merge N`, and those commands, run
here with N = 3 on a small corpus, give the report an unsharded run gives
(but for wall-clock seconds), gated, with the JUnit file and the summary."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from harness.cli import main
from harness.report.data import without_seconds

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = (ROOT / ".github" / "workflows" / "unwind.yml").read_text()
SMALL = ["--programs", "3", "--seed", "3", "--no-elf", "--jobs", "1"]


def deterministic(path: Path) -> dict:
    return without_seconds(json.loads(path.read_text()))


def job(name: str) -> str:
    """The text of one job of the workflow."""
    found = re.search(rf"^  {name}:\n(.*?)(?=^  \w[\w-]*:\n|\Z)", WORKFLOW, re.S | re.M)
    assert found, name
    return found[1]


def test_the_workflow_spreads_the_main_job_over_a_matrix_and_merges_it():
    shards = int(re.search(r"^  SHARDS: (\d+)$", WORKFLOW, re.M)[1])
    shard, merge = job("shard"), job("merge")
    assert re.search(r"shard: \[(.*)\]", shard)[1] == ", ".join(map(str, range(shards)))
    assert "run: .ci/shard ${{ matrix.shard }} ${{ env.SHARDS }}" in shard
    assert "make setup toolchains linux-slice" in shard and "actions/cache" in shard
    assert "needs: shard" in merge and "run: .ci/merge ${{ env.SHARDS }}" in merge
    assert "container: debian:bookworm" in shard and "container: debian:bookworm" in merge
    for path in ("out/shards/", "out/merged/"):
        assert path in WORKFLOW


def script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / ".ci" / name), *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HARNESS": f"{sys.executable} -m harness", **env}, timeout=900)


def test_three_shards_merged_by_the_ci_scripts_equal_one_run(tmp_path):
    baseline = tmp_path / "baseline.json"
    assert main(["run", *SMALL, "--reports", str(tmp_path / "written"), "--baseline", str(baseline),
                 "--write-baseline"]) == 0
    assert main(["run", *SMALL, "--reports", str(tmp_path / "one"), "--baseline", str(baseline),
                 "--check-baseline"]) == 0
    env = {"RUN_ARGS": " ".join(SMALL), "SHARD_DIR": str(tmp_path / "shards"),
           "REPORTS_DIR": str(tmp_path / "merged"), "BASELINE": str(baseline), "GITHUB_STEP_SUMMARY": ""}
    for index in range(3):
        done = script("shard", str(index), "3", **env)
        assert done.returncode == 0, done.stderr
    done = script("merge", "3", **env)
    assert done.returncode == 0, done.stderr
    merged = tmp_path / "merged"
    assert deterministic(merged / "latest.json") == deterministic(tmp_path / "one" / "latest.json")
    assert json.loads((merged / "latest.json").read_text())["gate"]["passed"] is True
    cases = ElementTree.parse(merged / "junit.xml").getroot().iter("testcase")
    assert sum(1 for _ in cases) > 0
    assert "PASS" in (merged / "summary.md").read_text()


def test_a_missing_shard_fails_the_merge_with_one_line(tmp_path):
    env = {"SHARD_DIR": str(tmp_path / "none"), "REPORTS_DIR": str(tmp_path / "merged"), "GITHUB_STEP_SUMMARY": ""}
    done = script("merge", "2", **env)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "shard-0-of-2.json" in lines[0], done.stderr
