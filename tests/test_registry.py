"""Adding an unwinder is its module plus one registry entry: a toy
unwinder registered here, and nothing else touched, is found in the
command line, the report, the size table and the chain."""

from __future__ import annotations

import json

from harness.cli import build_parser, main
from harness.errors import UnwindFailure
from harness.registers import LR, PC
from harness.unwind.frame import Frame, StackReader
from harness.unwind.registry import (
    CHAIN,
    FORMAT_NAMES,
    SIZE_COLUMNS,
    UNWINDER_NAMES,
    Measured,
    Strategy,
    TableFormat,
    registered,
    strategies,
)
from harness.unwind.walk import PC_SP_ONLY, Unwinder, check_caller


class LeafOnly(Unwinder):
    """pc = lr at the innermost frame, sp unchanged; nothing deeper."""

    name = "leaf"
    restores = PC_SP_ONLY

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        if not innermost:
            raise UnwindFailure("no_info", "only the innermost frame's return address is in lr")
        regs = list(frame.r)
        regs[PC] = frame.r[LR] & ~1
        caller = Frame(r=tuple(regs), d=frame.d)
        check_caller(frame, caller, innermost)
        return caller


TOY = Strategy("leaf", lambda program, unwinder_of: LeafOnly(), PC_SP_ONLY, chain_place=0.5, size_column="leaf",
               compared=True)
TOY_FORMAT = TableFormat("leaf", ("leaf",), lambda program, layout: Measured({"leaf": 0}, {}))


def _choices(command: str, option: str) -> list:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return list(next(a for a in sub._actions if option in a.option_strings).choices)


def test_a_registered_unwinder_is_in_the_cli_the_report_the_size_table_and_the_chain(tmp_path):
    with registered(TOY, TOY_FORMAT):
        assert "leaf" in _choices("run", "--unwinder") and "leaf" in _choices("verify-elf", "--unwinder")
        assert "leaf" in _choices("dump", "--format")
        assert list(CHAIN) == ["v2", "leaf", "exidx", "framepointer", "scan"]
        assert main(["run", "--programs", "2", "--seed", "5", "--no-elf", "--jobs", "1", "--unwinder", "leaf",
                     "--unwinder", "chain", "--reports", str(tmp_path)]) in (0, 1)
        data = json.loads((tmp_path / "latest.json").read_text())
        leaf = [r for r in data["results"] if r["unwinder"] == "leaf" and r["category"] == "all"
                and r["position"] == "all"]
        assert leaf and 0 < leaf[0]["failed"] < leaf[0]["stops"]  # right at a leaf's stops, wrong deeper
        assert data["checked"]["leaf"] == "pc, sp"
        assert "leaf" in data["chain_methods"]["chain"]  # the chain's second method gave frames
        assert all("leaf" in row["bytes"] for row in data["sizes"]["rows"])
        assert "| leaf |" in (tmp_path / "latest.md").read_text().replace("`", "")
    assert "leaf" not in UNWINDER_NAMES and "leaf" not in FORMAT_NAMES and "leaf" not in SIZE_COLUMNS
    assert "leaf" not in CHAIN and all(s.name != "leaf" for s in strategies())


def test_a_name_is_registered_once():
    with registered(TOY):
        try:
            with registered(TOY):
                raise AssertionError("registered twice")
        except ValueError as error:
            assert "leaf is registered already" in str(error)
