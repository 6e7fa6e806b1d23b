"""Every error the package raises on purpose, on the smallest input that
triggers it, through the function a user would call; then the command line's
exit codes and messages for every kind of bad input.

COVERAGE below is the table of error classes and the test that pins each one
down (exact class, and a message naming what went wrong and where). A meta
test collects every exception class defined in the `harness` package and
fails if one is missing from the table, so a new error class needs a test.
Where a test elsewhere already does exactly this, the table points at it.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from generators.ehabi_writer import write_exidx
from harness.cli import main
from harness.emulation.emulator import Emulator
from harness.emulation.guards import EmulationFault
from harness.errors import (
    FAILURE_KINDS,
    BadRead,
    CorruptTable,
    EhabiError,
    ElfError,
    EncodeError,
    HarnessError,
    InputError,
    TableOverflow,
    TruncatedSequence,
    UnwindFailure,
    WorkerLost,
)
from harness.formats import chrome_v2, ehabi
from harness.formats.arm_exidx import ExidxError, parse_exidx
from harness.formats.chrome_v1 import Refused, V1Table, encode_v1, v1_rows
from harness.formats.chrome_v2.encoder import InexpressibleState, state_instructions
from harness.formats.chrome_v2.layout import serialize
from harness.formats.chrome_v2.synthesize import Unsynthesizable, _after, synthesize_epilogues
from harness.formats.chrome_v2.tables import FunctionTableEntry, V2Tables
from harness.formats.elf import open_elf
from harness.program import CfiRow, FunctionCfi
from harness.registers import SP
from harness.runner import in_processes
from harness.shards import read_partials
from harness.thumb.disasm import decode_one
from harness.thumb.epilogue import Release
from harness.thumb.frame_analysis import analyse
from harness.thumb.frame_effects import FrameState, Unknowable, after
from harness.unwind.ehabi_run import caller_by_run
from harness.unwind.frame import Stack, make_frame
from harness.unwind.v2 import V2Unwinder
from harness.unwind.v2_chrome import ChromeV2Unwinder

ROOT = Path(__file__).resolve().parent.parent
ELF = ROOT / "corpus" / "fixtures" / "calls-clang-nofp.elf"  # small, fast to verify

# error class -> the test that covers it ("file::test" for one in another file).
COVERAGE = {
    "harness.linux.call_table.GuestError": "test_linux_syscalls.py::test_symlink_loops_end_with_eloop",
    "harness.emulation.machine.BadAddress": "test_linux_syscalls.py::test_readlink_of_the_executable_and_a_bad_buffer",
    "harness.linux.call_table.SystemCallFault": "test_linux_syscalls.py::test_an_unknown_system_call_is_a_fault_naming_it",
    "harness.errors.HarnessError": "test_every_typed_error_is_a_harness_error",  # base, never raised itself
    "harness.errors.InputError": "test_input_error",
    "harness.thumb.apart.ChildFailed": "test_apart.py::test_a_failing_child_is_reported",
    "harness.errors.EhabiError": "test_every_typed_error_is_a_harness_error",  # base, never raised itself
    # Exact class and offset for every byte value: test_ehabi.py covers these.
    "harness.errors.SpareEncoding": "test_ehabi.py::test_decode_single_byte_instruction",
    "harness.errors.TruncatedSequence": "test_truncated_sequence",
    "harness.errors.CorruptTable": "test_corrupt_table",  # also test_v2_reader.py, test_v1.py (every field)
    # test_table_overflow: raised by the generators' .ARM.exidx writer (the
    # harness shares its errors); also test_v2_tables.py (16-bit index), test_exidx.py
    "harness.errors.TableOverflow": "test_table_overflow",
    "harness.errors.EncodeError": "test_encode_error",  # also test_v2_encoder.py, test_exidx.py (generators' writer)
    "harness.errors.ElfError": "test_elf_error",  # also test_cfi.py (missing, not ELF, x86, no CFI)
    "harness.errors.UnwindFailure": "test_unwind_failure",  # one case per FAILURE_KINDS
    "harness.errors.BadRead": "test_bad_read",  # also test_ehabi.py::test_execute_read_outside_stack_is_bad_read
    "harness.formats.arm_exidx.ExidxError": "test_exidx_error",  # also test_exidx.py (every malformation)
    "harness.formats.breakpad.BreakpadError":
        "test_breakpad.py::test_a_file_that_is_not_a_symbol_file_is_a_one_line_error",
    "harness.emulation.guards.EmulationFault": "test_emulation_fault",
    "harness.emulation.guards.ImpreciseFault":
        "test_linux_signals.py::test_a_fault_in_a_run_from_block_entries_is_named_and_a_process_runs_from_every_instruction",
    "harness.emulation.placement.NoRoom": "test_placement.py::test_a_program_that_leaves_no_room_is_refused",
    "harness.errors.WorkerLost": "test_worker_lost",
    "harness.errors.ToolMissing": "test_synth_fuzz.py::test_a_missing_csmith_is_named",
    # Internal: caught where raised and turned into a report line; they never escape.
    "harness.formats.chrome_v1.Refused": "test_refused",
    "harness.formats.qut.Inexpressible": "test_qut.py::test_states_qut_cannot_express_are_refused",
    "harness.formats.vmkunwind.Inexpressible":
        "test_vmkunwind.py::test_rows_the_triple_cannot_express_are_refused_with_the_reason",
    "harness.formats.chrome_v2.encoder.InexpressibleState": "test_inexpressible_state",
    "harness.formats.chrome_v2.synthesize.Unsynthesizable": "test_unsynthesizable",
    "harness.thumb.frame_effects.Unknowable": "test_unknowable",
    # A call that must wait on files: the kernel blocks its thread (harness.linux.kernel._attempt)
    "harness.linux.threads.Blocked": "test_linux_waits.py::test_a_read_of_an_empty_pipe_waits_until_another_thread_writes",
    # A rule that cannot say for a frame: whoever applies it runs the unwinder's step instead.
    "harness.unwind.rule.Defers": "test_rule_apply.py::test_each_kind_computes_its_formula",
    "harness.unwind.rule.ChainFailure": "test_rule_apply.py::test_each_kind_computes_its_formula",
}
INTERNAL = {"harness.formats.chrome_v1.Refused", "harness.formats.chrome_v2.encoder.InexpressibleState",
            "harness.formats.vmkunwind.Inexpressible", "harness.formats.qut.Inexpressible",
            "harness.formats.chrome_v2.synthesize.Unsynthesizable", "harness.thumb.frame_effects.Unknowable",
            "harness.linux.threads.Blocked", "harness.unwind.rule.Defers"}


def raised(call, *args, **kwargs) -> Exception:
    """The exception `call(*args, **kwargs)` raises (failing if it returns)."""
    with pytest.raises(Exception) as caught:
        call(*args, **kwargs)
    return caught.value


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def defined_exceptions() -> dict[str, type]:
    """Every exception class defined in a module of the harness package."""
    found = {}
    for info in pkgutil.walk_packages(harness.__path__, "harness."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # importing it runs the command line
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[qualified(value)] = value
    return found


# ------------------------------------------------------------- meta tests


def test_every_error_class_has_a_test():
    defined = defined_exceptions()
    assert sorted(set(defined) - set(COVERAGE)) == [], "add a test and a COVERAGE row"
    assert sorted(set(COVERAGE) - set(defined)) == [], "COVERAGE names a class that no longer exists"
    for cls, test in COVERAGE.items():
        if "::" in test:
            path, name = test.split("::")
            assert f"def {name}(" in (ROOT / "tests" / path).read_text(), (cls, test)
        else:
            assert callable(globals().get(test)), (cls, test)


def test_every_typed_error_is_a_harness_error():
    # HarnessError and EhabiError are bases: raised only as their subclasses.
    for name, cls in defined_exceptions().items():
        assert issubclass(cls, HarnessError) != (name in INTERNAL), name
    for cls in ("SpareEncoding", "TruncatedSequence"):
        assert issubclass(getattr(harness.errors, cls), EhabiError)
    assert set(UNWIND_CASES) == set(FAILURE_KINDS)


# ----------------------------------------------------- one test per class


def test_input_error(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("{}")
    error = raised(read_partials, [str(path)])
    assert type(error) is InputError
    assert str(error) == f"{path}: not a shard report (written by run or verify-elf with --shard)"


def test_truncated_sequence():
    error = raised(ehabi.decode, bytes([0xB0, 0xB1]))  # finish; b1 without its operand
    assert type(error) is TruncatedSequence
    assert error.offset == 1
    assert str(error) == "instruction 0xb1 lacks its operand byte at byte 1"


@pytest.mark.parametrize("table, read, blob, message", [
    ("v2", lambda blob: chrome_v2.V2Reader.from_blob(blob, "seed"), bytes(3),
     "corrupt v2 table: header (byte 0): blob of 3 bytes is shorter than the 40-byte seed header"),
    ("v1", V1Table.from_blob, bytes(3), "corrupt v1 table: header (byte 0): 3 bytes; the entry count needs 4"),
])
def test_corrupt_table(table, read, blob, message):
    error = raised(read, blob)
    assert type(error) is CorruptTable
    assert (error.field, error.offset) == ("header", 0)
    assert str(error) == message


def test_table_overflow():
    # The generators' .ARM.exidx writer: the function lies 1 GiB below the
    # entry that must point at it.
    error = raised(write_exidx, [(0x100, b"")], 0x4000_0200, 0x2000, 0x1000)
    assert type(error) is TableOverflow
    assert str(error).startswith(".ARM.exidx byte 0: prel31 offset from 0x40000200 to 0x100")


def simple(name: str, start: int, end: int) -> FunctionCfi:
    return FunctionCfi(name, start, end, (CfiRow(start),))


def test_encode_error():
    error = raised(chrome_v2.encode, [simple("a", 0x10, 0x30), simple("b", 0x20, 0x40)], 0)
    assert type(error) is EncodeError
    assert str(error) == "functions overlap: a [0x10, 0x30) and b [0x20, 0x40)"


def test_elf_error(tmp_path):
    path = tmp_path / "cut"
    path.write_bytes(ELF.read_bytes()[:200])
    error = raised(open_elf, str(path))
    assert type(error) is ElfError
    assert str(error).startswith(f"{path}: truncated or corrupt ELF: ")


def test_exidx_error():
    error = raised(parse_exidx, bytes(4), 0x1000)
    assert type(error) is ExidxError
    assert (error.section, error.offset) == (".ARM.exidx", 0)
    assert str(error) == "corrupt .ARM.exidx at byte 0: size 4 is not a multiple of 8"


BASE = 0x10000
TOP = 0x8000  # sp of the crafted frames


def one_function_unwinder(run: bytes) -> V2Unwinder:
    """A v2 unwinder over a blob with one function at BASE, whose one run is `run`."""
    tables = V2Tables(page_table=(0,), continuation=(False,), function_table=(FunctionTableEntry(0, 0),),
                      function_offset_table=b"\x00\x00", unwind_instruction_table=run)
    return V2Unwinder(chrome_v2.V2Reader.from_blob(serialize(tables, "seed"), "seed"), BASE)


def chrome_step(run: bytes):
    tables = V2Tables(page_table=(0,), continuation=(False,), function_table=(FunctionTableEntry(0, 0),),
                      function_offset_table=b"\x00\x00", unwind_instruction_table=run)
    unwinder = ChromeV2Unwinder(chrome_v2.V2Reader.from_blob(serialize(tables, "chrome"), "chrome"), BASE)
    return unwinder.step(make_frame(BASE + 4, TOP, lr=BASE + 0x41), Stack(TOP, bytes(16)), True)


def step(run: bytes, pc: int = BASE + 4, stack: bytes = bytes(16), innermost: bool = True):
    frame = make_frame(pc, TOP, lr=BASE + 0x41)
    return one_function_unwinder(run).step(frame, Stack(TOP, stack), innermost)


# kind -> (the step that fails, its exact reason)
UNWIND_CASES = {
    "no_info": (lambda: step(b"\xb0", pc=BASE + (1 << 17)), f"no v2 entry covers pc {BASE + (1 << 17):#x}"),
    "unsupported": (lambda: chrome_step(b"\xa1\xb0"),  # pop {r4, r5}: no branch of Chrome's runtime runs it
                    f"at pc {BASE + 4:#x}: instruction 0xa1 is not one Chrome's runtime executes"),
    "bad_read": (lambda: step(b"\x3f\xb0"), f"vsp {TOP + 0x100:#x} left the stack after 'vsp = vsp + 256'"),
    "limit": (lambda: step(b"\xb0", innermost=False),  # finish only: sp does not rise in a caller
              f"caller sp {TOP:#x} does not rise above callee sp {TOP:#x}"),
    # A run without finish gets past no reader, so only a hand-made one shows it.
    "corrupt_table": (lambda: caller_by_run((ehabi.VspAdd(4),), make_frame(BASE, TOP), Stack(TOP, bytes(16)),
                                            True), "instruction run has no finish"),
}


@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_unwind_failure(kind):
    failing, reason = UNWIND_CASES[kind]
    error = raised(failing)
    assert type(error) is UnwindFailure
    assert (error.kind, error.reason) == (kind, reason)
    assert str(error) == f"{kind}: {reason}"


def test_bad_read():
    error = raised(step, b"\xa0\xb0", stack=b"\x00\x00")  # pop {r4}; finish, from a 2-byte stack
    assert type(error) is BadRead
    assert (error.kind, error.address) == ("bad_read", TOP)
    assert error.reason == f"read of 4 bytes at {TOP:#x} outside the stack [{TOP:#x}, {TOP + 2:#x})"


@pytest.mark.parametrize("code, args, budget, pc, cause", [
    ("00de", (), 100, BASE, "Invalid instruction (UC_ERR_INSN_INVALID)"),  # udf #0
    ("0047", (0x4000_0001,), 100, 0x4000_0000, "Invalid memory fetch (UC_ERR_FETCH_UNMAPPED)"),  # bx r0
    ("fee7", (), 10, BASE, "more than 10 instructions (runaway loop?)"),  # b .
], ids=["undefined", "unmapped", "runaway"])
def test_emulation_fault(code, args, budget, pc, cause):
    emulator = Emulator([(BASE, bytes.fromhex(code))])
    error = raised(emulator.call, BASE, lambda stop: None, budget, args)
    assert type(error) is EmulationFault
    assert (error.pc, error.cause) == (pc, cause)
    assert str(error) == f"emulation fault at pc {pc:#x}: {cause}"


def test_refused():
    too_long = simple("huge", BASE, BASE + 0x10000)
    error = raised(v1_rows, too_long)
    assert type(error) is Refused
    assert str(error) == "65536 bytes of code (v1 offsets have 16 bits)"
    # encode_v1 reports the function and encodes the rest.
    assert encode_v1([too_long], BASE).refused == (("huge", str(error)),)


def test_inexpressible_state():
    row = CfiRow(BASE + 2, SP, 6)
    error = raised(state_instructions, row)
    assert type(error) is InexpressibleState
    assert str(error) == "CFA offset 6 is not a multiple of 4"
    # The encoder refuses to unwind there, and says why and where.
    encoded = chrome_v2.encode([FunctionCfi("f", BASE, BASE + 8, (CfiRow(BASE), row))], BASE)
    assert encoded.problems == [("f", f"{BASE + 2:#x}: CFA offset 6 is not a multiple of 4")]


def test_unsynthesizable():
    body = CfiRow(BASE, SP, 8, ((4, -8), (14, -4)))
    error = raised(_after, body, Release(reg=12), {})
    assert type(error) is Unsynthesizable
    assert str(error) == "sp released by r12, whose value is unknown"
    # The same epilogue in code (add sp, r12; pop {r4, pc}) is left alone and reported.
    code = bytes.fromhex("e544" "10bd")
    function = FunctionCfi("f", BASE, BASE + len(code), (body,))
    result = synthesize_epilogues(function, lambda address, size: code[address - BASE : address - BASE + size])
    assert result.rows == function.rows
    assert result.problems == (f"{BASE:#x}: epilogue not synthesized: {error}",)


# ------------------------------------------------------- the command line
# Exit codes: 0 ok, 1 verification failure or regression, 2 bad input or usage.
# test_cli.py and test_verify_elf.py check some of these messages' words; here
# every bad input of every command is held to the same form.


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    """Bad input files by kind (`missing` is never written), and `dir`, their directory."""
    directory = tmp_path_factory.mktemp("bad")
    data = ELF.read_bytes()
    files = {kind: directory / f"{kind}.elf" for kind in ("missing", "text", "cut", "x86", "nocfi")}
    files["corrupt"] = directory / "corrupt.bin"
    files["text"].write_text("hello\n")
    files["cut"].write_bytes(data[:200])
    x86 = bytearray(data)
    struct.pack_into("<H", x86, 18, 3)  # e_machine: EM_386
    files["x86"].write_bytes(bytes(x86))
    objcopy = shutil.which("arm-none-eabi-objcopy")
    if objcopy:
        subprocess.run([objcopy, "--remove-section", ".debug_frame", "--remove-section", ".eh_frame",
                        str(ELF), str(files["nocfi"])], check=True)
    else:  # rename the sections instead
        files["nocfi"].write_bytes(data.replace(b".debug_frame", b".nodbg_frame").replace(b".eh_frame", b".no_frame"))
    files["corrupt"].write_bytes(b"\x28\x00\x00\x00" + b"\xff" * 40)  # 0xffffffff pages
    files["dir"] = directory
    return files


def exit_and_stderr(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    return code, capsys.readouterr().err


def expect_one_line(argv, capsys, *names: str, code: int = 2) -> str:
    status, err = exit_and_stderr(argv, capsys)
    assert status == code, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("unwind-harness:"), err
    for name in names:
        assert name in lines[0], (name, err)
    return lines[0]


def expect_usage_error(argv, capsys, option: str) -> None:
    status, err = exit_and_stderr(argv, capsys)
    assert status == 2 and "Traceback" not in err
    assert "error:" in err and option in err.splitlines()[-1], err


# kind of bad ELF -> what the message says besides the file's name
BAD_ELF = {
    "missing": "cannot read: No such file or directory",
    "text": "not an ELF file",
    "cut": "truncated or corrupt ELF",
    "x86": "not a 32-bit ARM ELF (machine EM_386",
    "nocfi": "no .debug_frame or .eh_frame",
}


@pytest.mark.parametrize("kind", BAD_ELF)
@pytest.mark.parametrize("command", [["encode", "-o", "{out}"], ["encode", "--format", "v1", "-o", "{out}"],
                                     ["verify-elf", "--entry", "entry"]], ids=["encode", "encode-v1", "verify-elf"])
def test_cli_bad_elf(command, kind, bad, capsys, tmp_path):
    argv = [part.format(out=tmp_path / "out.bin") for part in command] + [str(bad[kind])]
    expect_one_line(argv, capsys, str(bad[kind]), BAD_ELF[kind])
    assert not (tmp_path / "out.bin").exists()


def test_cli_encode_output_that_cannot_be_written(bad, capsys, tmp_path):
    out = tmp_path / "no" / "such" / "dir.bin"
    expect_one_line(["encode", str(ELF), "-o", str(out)], capsys, str(out), "cannot write: no directory")


def test_cli_encode_synthesize(tmp_path, capsys):
    # Policy synthesize needs the code: the command line reads it from the ELF.
    assert main(["encode", str(ELF), "-o", str(tmp_path / "x.bin"), "--epilogue", "synthesize"]) == 0
    assert "rows dropped by epilogue policy 'synthesize'" in capsys.readouterr().out


@pytest.mark.parametrize("argv, names", [
    pytest.param(["dump", "{missing}"], ["{missing}", "cannot read"], id="dump-missing"),
    pytest.param(["dump", "{corrupt}"], ["{corrupt}", "corrupt v2 table: page table (byte 40)"],
                 id="dump-corrupt"),
    pytest.param(["dump", "{corrupt}", "--layout", "chrome"], ["{corrupt}", "corrupt v2 table"],
                 id="dump-corrupt-chrome"),
    pytest.param(["verify-elf", str(ELF), "--entry", "nowhere"], [str(ELF), "no function symbol 'nowhere'"],
                 id="verify-elf-unknown-entry"),
    pytest.param(["verify-elf", str(ELF), "--entry", "entry", "--v2-table", "{corrupt}"],
                 ["{corrupt}", "not a v2 blob in either layout"], id="verify-elf-corrupt-v2-table"),
    pytest.param(["verify-elf", str(ELF), "--entry", "entry", "--v2-table", "{corrupt}", "--layout", "seed"],
                 ["{corrupt}", "corrupt v2 table"], id="verify-elf-corrupt-v2-table-seed"),
    pytest.param(["verify-elf", str(ELF), "--entry", "entry", "--v2-table", "{missing}"],
                 ["{missing}", "cannot read"], id="verify-elf-missing-v2-table"),
    pytest.param(["verify-elf", str(ELF), "--entry", "entry", "--shard", "0/2"], ["--shard", "--json"],
                 id="verify-elf-shard-without-json"),
    pytest.param(["verify-elf", str(ELF), "--entry", "entry", "--json", "{dir}/no/report.json"],
                 ["{dir}/no/report.json", "cannot write"], id="verify-elf-json-unwritable"),
    pytest.param(["bench", "--quick", "--json", "{dir}/no/bench.json"], ["{dir}/no/bench.json", "cannot write"],
                 id="bench-json-unwritable"),
    pytest.param(["merge", "{missing}"], ["{missing}: cannot read"], id="merge-missing"),
    pytest.param(["merge", "{text}"], ["{text}: not a shard report (not JSON"], id="merge-not-json"),
])
def test_cli_bad_input(argv, names, bad, capsys):
    paths = {name: str(path) for name, path in bad.items()}
    expect_one_line([a.format(**paths) for a in argv], capsys, *(n.format(**paths) for n in names))


@pytest.mark.parametrize("shard, words", [
    ({"schema": 1}, "not a shard report"),
    ({"schema": 1, "tool": "unwind-harness",
      "partial": {"command": "run", "config": {"units": 1}, "shard": [0, 1], "seconds": 1}, "records": 5},
     "records: 5 is not a list"),
    ({"schema": 1, "tool": "unwind-harness",
      "partial": {"command": "run", "config": {}, "shard": [0, 1], "seconds": 1}, "records": []},
     'partial.config: the key "seed" is missing'),
], ids=["not-shard", "records", "config"])
def test_cli_merge_corrupt_shard_report(shard, words, tmp_path, capsys):
    path = tmp_path / "shard.json"
    path.write_text(json.dumps(shard))
    expect_one_line(["merge", str(path), "--reports", str(tmp_path)], capsys, str(path), words)


def test_cli_merge_malformed_records(tmp_path, capsys):
    path = tmp_path / "shard.json"
    config = {"seed": 0, "programs": 1, "unwinders": ["v2"], "elf": False, "units": 1}
    path.write_text(json.dumps({"schema": 1, "tool": "unwind-harness",
                                "partial": {"command": "run", "config": config, "shard": [0, 1], "seconds": 0.5},
                                "records": [{"index": 0, "kind": "generated"}]}))
    expect_one_line(["merge", str(path), "--reports", str(tmp_path)], capsys,
                    f'{path}: records[0]: the key "summary" is missing')


@pytest.mark.parametrize("argv, option", [
    (["encode", str(ELF), "-o", "x.bin", "--text-start", "xyz"], "--text-start"),
    (["dump", "x.bin", "--text-start", "xyz"], "--text-start"),
    (["verify-elf", str(ELF), "--entry", "entry", "--every", "0"], "--every"),
    (["verify-elf", str(ELF), "--entry", "entry", "--shard", "3/2"], "--shard"),
    (["verify-elf", str(ELF), "--entry", "entry", "--text-start", "xyz"], "--text-start"),
    (["verify-elf", str(ELF), "--entry", "entry", "--expect", "xyz"], "--expect"),
    (["verify-elf", str(ELF), "--entry", "entry", "--expect", "-1"], "--expect"),
    (["verify-elf", str(ELF), "--entry", "entry", "--text-start", "0x100000000"], "--text-start"),
    (["verify-elf", str(ELF)], "--entry"),
    (["run", "--shard", "3/2"], "--shard"),
    (["run", "--jobs", "0"], "--jobs"),
    (["run", "--programs", "0"], "--programs"),
    (["bench", "--every", "2"], "--every"),
    (["merge"], "shards"),
])
def test_cli_usage_errors(argv, option, capsys):
    expect_usage_error(argv, capsys, option)


def test_cli_wrong_expect_is_a_verification_failure(capsys):
    argv = ["verify-elf", str(ELF), "--entry", "entry", "--expect", "0x1234", "--jobs", "1", "--unwinder", "v2"]
    expect_one_line(argv, capsys, str(ELF), "expected 0x1234", code=1)


RUN = ["run", "--programs", "1", "--no-elf", "--jobs", "1", "--unwinder", "v2"]


@pytest.mark.parametrize("baseline, words", [
    ("{not json", "not a baseline (not JSON"),
    ("[]", "not a report"),
    ('{"seed": 0, "input": "generated"}', "not a report"),
    ('{"seed": 0, "input": "generated", "results": [{"unwinder": "v2"}]}', "programs: 1 vs 0"),
    ('{"seed": 0, "input": "generated", "programs": [{}], "results": [{"unwinder": "v2"}]}',
     "malformed result rows"),
    ('{"seed": 0, "programs": [{}], "results": [{"unwinder": "v2", "position": "all"}], "elf": [{}]}',
     "malformed report"),
], ids=["not-json", "list", "no-results", "another-run", "bad-rows", "bad-groups"])
def test_cli_corrupt_baseline(baseline, words, tmp_path, capsys):
    path = tmp_path / "baseline.json"
    path.write_text(baseline)
    expect_one_line([*RUN, "--reports", str(tmp_path), "--check-baseline"], capsys, str(path), words)


def test_python_dash_m_truncated_elf_has_no_traceback(bad, tmp_path):
    result = subprocess.run([sys.executable, "-m", "harness", "encode", str(bad["cut"]), "-o",
                             str(tmp_path / "x.bin")], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"unwind-harness: error: {bad['cut']}: truncated or corrupt ELF")


def _dies(item: int) -> int:
    """A worker that is killed while it works on item 1."""
    if item == 1:
        os._exit(9)
    return item


def test_worker_lost():
    """A worker process that dies ends the run naming what it was doing."""
    error = raised(in_processes, _dies, [0, 1, 2], 2, name=lambda item: f"unit {item}")
    assert type(error) is WorkerLost
    assert str(error) == "a worker process died while verifying unit 1 (killed, or out of memory)"


def test_unknowable():
    code = bytes.fromhex("8546" "10bd")  # mov sp, r0; pop {r4, pc}
    insn = decode_one(code, BASE)
    error = raised(after, insn, FrameState(8, saved=((4, -8), (14, -4))), lambda address, size: b"")
    assert type(error) is Unknowable
    assert str(error) == "'mov sp, r0' sets sp in a way the analysis does not model"
    # analyse catches it: that pc and what follows refuse, and the problem says where.
    function = analyse("f", BASE, BASE + 4, lambda address, size: code[address - BASE:address - BASE + size])
    assert function.problems == (f"{BASE:#x}: 'mov sp, r0' sets sp in a way the analysis does not model",)
