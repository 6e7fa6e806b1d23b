"""`--jobs`, `--shard` and `merge`: however the work is split, the report is
the same, byte for byte, but for the wall-clock seconds of its timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.data import without_seconds
from harness.runner import Shard, parse_shard

ROOT = Path(__file__).resolve().parent.parent
CALLS = str(ROOT / "corpus" / "fixtures" / "calls-gcc-fp.elf")
RUN = ["run", "--programs", "3", "--seed", "3", "--no-elf"]


def deterministic(path: Path) -> str:
    """A JSON report's text without its seconds (harness.report.data.without_seconds)."""
    return json.dumps(without_seconds(json.loads(path.read_text())), indent=1)


def run(directory: Path, *extra: str) -> int:
    return main([*RUN, "--reports", str(directory), *extra])


def test_run_is_the_same_with_any_jobs_and_shards(tmp_path):
    assert run(tmp_path / "one", "--jobs", "1") == 0
    assert run(tmp_path / "two", "--jobs", "2") == 0
    shards = tmp_path / "shards"
    for index in range(2):
        assert run(shards, "--jobs", "1", "--shard", f"{index}/2") == 0
    # More shards than units: the third shard is empty and still merges.
    for index in range(4):
        assert run(tmp_path / "four", "--jobs", "2", "--shard", f"{index}/4") == 0
    assert main(["merge", *map(str, sorted(shards.glob("shard-*.json"))), "--reports", str(shards)]) == 0
    assert main(["merge", *map(str, sorted((tmp_path / "four").glob("shard-*.json"))),
                 "--reports", str(tmp_path / "four")]) == 0
    for other in ("two", "shards", "four"):
        assert deterministic(tmp_path / other / "latest.json") == deterministic(tmp_path / "one" / "latest.json")
        for name in ("latest.md", "latest.png"):
            assert (tmp_path / other / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), (other, name)


def test_verify_elf_is_the_same_with_any_jobs_and_shards(tmp_path):
    def verify(out: Path, *extra: str) -> int:
        return main(["verify-elf", CALLS, "--entry", "entry", "--json", str(out), *extra])

    assert verify(tmp_path / "one.json", "--jobs", "1") == 0
    assert verify(tmp_path / "two.json", "--jobs", "2") == 0
    assert verify(tmp_path / "s0.json", "--shard", "0/2", "--jobs", "2") == 0
    assert verify(tmp_path / "s1.json", "--shard", "1/2", "--jobs", "1") == 0
    assert main(["merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json"),
                 "--json", str(tmp_path / "merged.json")]) == 0
    expected = deterministic(tmp_path / "one.json")
    assert json.loads(expected)["programs"][0]["stops"] > 400
    assert deterministic(tmp_path / "two.json") == expected
    assert deterministic(tmp_path / "merged.json") == expected


def test_every_and_shards_compose(tmp_path):
    main(["verify-elf", CALLS, "--entry", "entry", "--every", "3", "--jobs", "1", "--json", str(tmp_path / "a.json")])
    main(["verify-elf", CALLS, "--entry", "entry", "--every", "3", "--jobs", "3", "--json", str(tmp_path / "b.json")])
    assert deterministic(tmp_path / "a.json") == deterministic(tmp_path / "b.json")


def test_merge_refuses_an_incomplete_or_mixed_set(tmp_path, capsys):
    for index in range(3):
        run(tmp_path, "--jobs", "1", "--shard", f"{index}/3")
    shards = sorted(str(p) for p in tmp_path.glob("shard-*.json"))
    assert main(["merge", *shards[:2], "--reports", str(tmp_path)]) == 2
    assert "lack units [2]" in capsys.readouterr().err
    assert main(["merge", shards[0], shards[0], "--reports", str(tmp_path)]) == 2
    assert "in two shard reports" in capsys.readouterr().err
    other = tmp_path / "other"
    main(["run", "--programs", "3", "--seed", "4", "--no-elf", "--reports", str(other), "--jobs", "1",
          "--shard", "2/3"])
    assert main(["merge", *shards[:2], str(other / "shard-2-of-3.json"), "--reports", str(tmp_path)]) == 2
    assert "from another run" in capsys.readouterr().err
    (tmp_path / "latest.json").write_text("{}")
    assert main(["merge", str(tmp_path / "latest.json")]) == 2
    assert "not a shard report" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "0/0"])
def test_bad_shard_arguments_are_usage_errors(text, capsys):
    with pytest.raises(SystemExit) as caught:
        main([*RUN, "--shard", text])
    assert caught.value.code == 2
    assert "shard" in capsys.readouterr().err


def test_shards_partition_the_numbers():
    parts = [parse_shard(f"{i}/3") for i in range(3)]
    assert [sum(p.takes(n) for p in parts) for n in range(30)] == [1] * 30
    inner = [Shard(k, 2).within(Shard(1, 3)) for k in range(2)]
    assert sorted(n for n in range(30) for s in inner if s.takes(n)) == [n for n in range(30) if n % 3 == 1]


def test_an_error_in_a_worker_reaches_the_user_as_one_line(tmp_path, monkeypatch, capsys):
    # Typed errors cross the process boundary (they pickle with their fields).
    from harness import runner
    from harness.errors import CorruptTable

    generate = runner.generate_program

    def broken(seed: int, number: int):
        if number == 1:
            raise CorruptTable("function table", "entry 3 points past the end", 40, "v1")
        return generate(seed, number)

    monkeypatch.setattr(runner, "generate_program", broken)
    assert run(tmp_path, "--jobs", "2") == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "unwind-harness: error: corrupt v1 table: function table (byte 40): entry 3 points past the end"]


def test_typed_errors_pickle_with_their_fields():
    import pickle

    from harness.emulation.guards import EmulationFault
    from harness.errors import BadRead, CorruptTable, EhabiError, UnwindFailure
    from harness.formats.arm_exidx import ExidxError

    for error in (ExidxError(".ARM.exidx", 8, "bad word", "x.elf"), CorruptTable("header", "short", 0, "v1"),
                  EhabiError("spare", 2), BadRead(0x10, 4, 0, 8), UnwindFailure("no_info", "none"),
                  EmulationFault(0x100004, "undefined instruction")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
