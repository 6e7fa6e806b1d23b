"""Stack scanning and the profiler's chain (harness.formats.call_sites,
harness.unwind.scan): which words count as return addresses, the blob and
its reader's checks, the scan's step and the frames it invents, and the
chain's order of methods."""

from __future__ import annotations

import struct

import pytest

from generators.corpus import generate_program
from harness import abi
from harness.errors import CorruptTable, UnwindFailure
from harness.formats.call_sites import CallSites, dump_call_sites, encode_call_sites, return_addresses
from harness.unwind import call_site_addresses
from harness.unwind.frame import Stack, make_frame
from harness.unwind.framepointer import FramePointerUnwinder
from harness.unwind.registry import build_unwinders
from harness.unwind.rule import LEAF, ReturnAddresses, Rule, RuleRange
from harness.unwind.scan import ChainUnwinder, ScanUnwinder
from harness.unwind.walk import Unwinder
from harness.verify import kernel
from harness.verify.groundtruth import ShadowFrame, packed
from harness.verify.kernel import pack_rule
from harness.verify.stops import Verify, verify_program

BASE = 0x1000


def code_reader(code: bytes, base: int = BASE):
    return lambda address, size: code[address - base:address - base + size]


def test_return_addresses_follow_each_call_form():
    code = bytes.fromhex(
        "00bf"  # 0x1000 nop
        "00f0 02f8"  # 0x1002 bl: returns to 0x1006 (Thumb: 0x1007)
        "9847"  # 0x1006 blx r3: returns to 0x1008
        "00f0 02e8"  # 0x1008 blx (immediate, to ARM): returns to 0x100c
        "00f0 0290"  # 0x100c b.w (not a call)
        "7047"  # 0x1010 bx lr
    )
    assert return_addresses(code_reader(code), [(BASE, BASE + len(code))]) == [0x1007, 0x1009, 0x100D]


def test_arm_calls_count_on_word_boundaries_only():
    arm = struct.pack("<3I", 0xE1A00000, 0xEB000004, 0xE12FFF33)  # nop; bl; blx r3
    assert return_addresses(code_reader(arm), [], [(BASE, BASE + 12)]) == [0x1008, 0x100C]


def test_blob_by_hand_and_the_readers_checks():
    blob = encode_call_sites([0x1007, 0x1009, 0x1007], BASE)
    assert blob == bytes.fromhex("02000000" "07000000" "09000000")  # count, then offsets ascending, once each
    sites = CallSites.from_blob(blob)
    assert sites.holds(7) and sites.holds(9) and not sites.holds(8)
    assert dump_call_sites(sites, BASE).splitlines()[1:] == ["return addresses: 2", "  0x1007", "  0x1009"]
    with pytest.raises(CorruptTable, match="2 addresses take 12 bytes; the blob has 8"):
        CallSites.from_blob(blob[:8])
    with pytest.raises(CorruptTable, match="0x7 does not ascend"):
        CallSites.from_blob(struct.pack("<3I", 2, 9, 7))


def scanner() -> ScanUnwinder:
    return ScanUnwinder([0x2001, 0x3001])


def test_the_first_return_address_up_the_stack_is_the_caller():
    stack = Stack(0x7000, struct.pack("<4I", 0x1234, 0x2001, 0x3001, 0))
    caller = scanner().step(make_frame(pc=0x1100, sp=0x7000, r4=0x44), stack, True)
    assert (caller.pc, caller.sp, caller.r[4]) == (0x2000, 0x7008, 0x44)  # just above the word; r4 as it was


def test_a_stale_return_address_is_taken_for_a_frame():
    """A leaf keeps its return address in lr: the scan finds the word its
    caller's caller left, and skips the caller (an invented chain)."""
    stack = Stack(0x7000, struct.pack("<4I", 0, 0, 0x3001, 0))
    caller = scanner().step(make_frame(pc=0x1100, sp=0x7000, lr=0x2001), stack, True)
    assert caller.pc == 0x3000  # not 0x2000, where lr says the leaf returns


def test_no_return_address_in_the_window_is_no_info():
    stack = Stack(0x7000, bytes(4 * 80) + struct.pack("<I", 0x2001))
    with pytest.raises(UnwindFailure, match="no return address in the 64 words from sp 0x7000 up") as failure:
        scanner().step(make_frame(pc=0x1100, sp=0x7000), stack, True)
    assert failure.value.kind == "no_info"
    scanner_told = scanner()
    scanner_told.entered_from(0x9001)
    assert 0x9001 in scanner_told.return_addresses


class Fixed(Unwinder):
    """A method that always gives `pc`, or fails."""

    def __init__(self, name: str, pc: int | None, rule: Rule | None = None):
        self.name, self.pc, self.rule = name, pc, rule

    def step(self, frame, stack, innermost):
        if self.pc is None:
            raise UnwindFailure("no_info", f"{self.name} has nothing")
        return make_frame(pc=self.pc, sp=frame.sp + 8)

    def rule_at(self, pc, innermost):
        return RuleRange(self.rule, pc - 4, pc + 4)


def test_the_chain_tries_each_method_where_the_one_before_fails():
    frame, stack = make_frame(pc=0x1100, sp=0x7000), Stack(0x7000, bytes(64))
    assert ChainUnwinder([Fixed("a", None), Fixed("b", 0x2000), Fixed("c", 0x3000)]).step(frame, stack, True).pc == 0x2000
    with pytest.raises(UnwindFailure, match="a: a has nothing; b: b has nothing"):
        ChainUnwinder([Fixed("a", None), Fixed("b", None)]).step(frame, stack, True)


def test_the_chains_rule_holds_each_methods_rule_in_turn():
    failing = Rule(failure=("no_info", "none"))
    guarded = Rule(base=7, guard_failure=lambda *_: ("bad_read", "x"))
    chain = ChainUnwinder([Fixed("a", None, failing), Fixed("b", 0x2000, guarded), Fixed("c", 0x3000, LEAF)])
    assert chain.rule_at(0x1100, True).rule.alternatives == (failing, guarded, LEAF)  # the kernel goes on past both
    ends = ChainUnwinder([Fixed("a", None, failing), Fixed("b", None, None), Fixed("c", 0x3000, LEAF)])
    assert ends.rule_at(0x1100, True).rule.alternatives == (failing, None)  # no rule: the kernel defers there
    assert ChainUnwinder([Fixed("a", None, failing)]).rule_at(0x1100, True).rule is None


def test_a_chain_rule_packs_its_alternatives_after_its_header():
    sites = ReturnAddresses([0x3001, 0x2001])
    scan = Rule(scan_window=256, scan_sites=sites, guard_failure=lambda *_: ("no_info", "x"))
    packed_rule = pack_rule(Rule(alternatives=(LEAF, scan, None)), lambda table: 5 if table is sites else -1)
    words = struct.unpack(f"<{len(packed_rule) // 4}i", packed_rule)
    header = 12  # abi.RULE_HEADER's fields
    assert words[:header] == (abi.CHAIN, 13, -1, 0, 0, 0, 3, 0, 0, 0, 0, 0)  # three alternatives
    assert words[header] == 4 * header and words[header + 1] == abi.PC_FROM_LR  # LEAF: a header alone
    scan_at = 2 * header + 1
    assert words[scan_at] == 4 * header  # the scan: a header naming site table 5 and its window
    assert words[scan_at + 1:scan_at + 1 + header] == (abi.SCAN | abi.GUARD_FAILS, 13, 5, 0, 0, 256, 0, 0, 0, 0, 0, 0)
    assert words[scan_at + 1 + header:] == (0,)  # None: nothing, and the kernel defers there
    assert pack_rule(scan) is None  # a scan needs the Verifier's table of its sites


STACK = 0x7000_0000


def kernel_walk(unwinder, frame, words: list[int], expected: list[tuple[int, int]]):
    """The kernel's answer for one walk over a stack of `words` at STACK, and
    the Python walk's first difference, and the method counts the kernel kept."""
    from harness.verify.walks import first_difference

    data = struct.pack(f"<{len(words)}I", *words) + bytes(256)
    shadow = [ShadowFrame(pc, sp, tuple(frame.r[4:12]), None) for pc, sp in expected]
    stop_kernel = kernel.StopKernel([unwinder], bytearray(data), STACK, STACK + len(data))
    found = stop_kernel.check(list(frame.r), frame.pc, 0, None, frame.sp,
                              b"".join(packed(f) for f in reversed(shadow)), 0)
    python = first_difference(unwinder, frame, Stack(STACK, data), shadow)
    return (found[0][1] if found else None), python, stop_kernel.chain_frames()


@pytest.mark.skipif(not kernel.AVAILABLE, reason="the compiled kernel is not built")
def test_the_kernel_goes_down_the_chain_where_a_guard_or_the_caller_check_fails():
    chain = ChainUnwinder([FramePointerUnwinder(), ScanUnwinder([0x2001, 0x3001])])
    # The innermost frame: r7 is no record, so frame pointers guess a leaf
    # (pc = lr); at its caller r7 is misaligned, a failed guard: the scan.
    leaf = make_frame(pc=0x1100, sp=STACK, lr=0x2001, r7=STACK + 2)
    answer, python, methods = kernel_walk(chain, leaf, [0x1234, 0x3001], [(0x2000, STACK), (0x3000, STACK + 8)])
    assert answer is None and python is None  # matched, without deferring to Python
    assert methods == {("chain", "framepointer", True): 1, ("chain", "scan", True): 1}  # (chain, method, right)
    # lr is the pc itself: check_caller rejects the leaf guess, the scan answers.
    looping = make_frame(pc=0x1100, sp=STACK, lr=0x1101, r7=STACK + 2)
    answer, python, methods = kernel_walk(chain, looping, [0x1234, 0x3001], [(0x2000, STACK + 8)])
    assert isinstance(answer, abi.Mismatch) and answer.got == 0x3000
    assert python[:2] == (0, "wrong_pc") and "pc 0x3000, expected 0x2000" in python[3]
    assert methods == {("chain", "scan", False): 1}  # one frame from the scan, wrong
    # Nothing in the window either: every method failed, and Python words it.
    answer, python, methods = kernel_walk(chain, looping, [0] * 70, [(0x2000, STACK + 8)])
    assert answer is kernel.DEFER and methods == {}
    assert python[1] == "no_info"  # the last method's kind, and every method's reason
    assert python[3].startswith("framepointer: caller sp") and "; scan: no return address in the 64" in python[3]


def test_generated_programs_scan_and_chain():
    """The chain fails only where v2 does (it takes v2's answer first, and
    checks pc and sp only); scanning alone invents frames, in prologues
    above all, where the return address is still in lr."""
    program = generate_program(0, 0)
    assert len(call_site_addresses(program)) > 10
    result = verify_program(program, build_unwinders(program, ["scan", "chain", "v2"]))
    failed = {name: {f.stop for f in result.failures if f.unwinder == name} for name in ("scan", "chain", "v2")}
    assert result.self_check_ok
    assert failed["chain"] <= failed["v2"] and len(failed["v2"]) < len(failed["scan"])
    assert any(f.position == "prologue" for f in result.failures if f.unwinder == "scan")


def test_in_a_process_the_other_methods_take_the_system_libraries(monkeypatch):
    """LUL's count over a Linux process (every 1000th stop of a C++ program
    of the CI slice), as the report gives it: the libraries ship no CFI, so
    EXIDX gives most frames there and the scan and frame pointers the rest;
    v2's frames (the program's own) are all right, frame pointers' mostly
    not. The kernel walks the chain itself: few walks defer to Python."""
    from functools import partial

    from harness.linux_verify.corpus import linux_entries, linux_run
    from harness.linux_verify.verify import verify_process
    from harness.report.summary import methods_json
    from harness.runner import LINUX_LIMITS
    from harness.verify.verification import Verification

    deferred = []
    real = Verification.walk
    monkeypatch.setattr(Verification, "walk", lambda self, number, pc, indices, *rest:
                        (deferred.extend(indices), real(self, number, pc, indices, *rest))[1])
    entry = next(e for e in linux_entries("slice") if e["name"] == "cxxexc-gcc-O2-fp")
    result = verify_process(linux_run(entry), ["chain"], partial(build_unwinders, names=["chain"]),
                            how=Verify(every=1000, limits=LINUX_LIMITS))
    methods = methods_json(result.methods)["chain"]
    assert list(methods) == ["v2", "exidx", "framepointer", "scan"]  # in the chain's order
    assert methods["v2"]["frames"] == methods["v2"]["right"] > 0
    assert methods["exidx"]["frames"] > methods["v2"]["frames"]
    assert methods["framepointer"]["right"] < methods["framepointer"]["frames"] / 2
    assert all(0 < m["right"] <= m["frames"] for m in methods.values())
    assert result.stops > 3000 and len(deferred) < result.stops / 20


def test_a_chain_refusing_in_a_library_is_counted_by_the_kernel_as_by_step(monkeypatch):
    """Where every method of the chain fails, the last with no_info, in a
    library (ld.so's startup: no v2, EXIDX or call-site table there), the
    walk is a stop, counted and never logged: the kernel answers it itself
    (it deferred every one to the chain's own step before), with the
    counts, failures and per-method frames of the Python hook's run."""
    from functools import partial

    from test_linux_process import build, sysroot

    from harness.linux.process import LinuxRun
    from harness.linux_verify.verify import verify_process
    from harness.verify.verification import Verification

    deferred = []
    real = Verification.walk
    monkeypatch.setattr(Verification, "walk", lambda self, number, pc, indices, *rest:
                        (deferred.extend(indices), real(self, number, pc, indices, *rest))[1])
    run = LinuxRun(build("calls.c", "-Wl,-z,now"), (), sysroot())
    chain = partial(build_unwinders, names=["chain"])
    compiled = verify_process(run, ["chain"], chain, how=Verify(every=3, compiled=True))
    assert not deferred
    in_python = verify_process(run, ["chain"], chain, how=Verify(every=3, compiled=False))
    stopped = sum(n for (_, _, _, kind), n in compiled.counts.items() if kind == "stopped:ld.so")
    assert compiled.fault is None and stopped > 1000
    assert (compiled.counts, compiled.failures, compiled.methods) == \
        (in_python.counts, in_python.failures, in_python.methods)


def test_return_addresses_are_those_after_every_halfword_that_starts_a_call():
    """return_addresses finds its candidates by regular expression; its
    answer is the definition's, halfword by halfword with call_length, on
    code dense in the bytes calls are made of."""
    import random

    from harness.thumb.encoding import call_length

    def definition(code: bytes, start: int) -> list[int]:
        return sorted({start + at + call_length(code[at:at + 4]) + 1 for at in range(0, len(code) - 1, 2)
                       if call_length(code[at:at + 4])})
    rng = random.Random(3)
    for _ in range(5_000):
        code = bytes(rng.choice((rng.randrange(256), 0x47, 0xF0 + rng.randrange(8), 0xC0 + rng.randrange(64)))
                     for _ in range(rng.randrange(24)))
        assert return_addresses(lambda address, size: code[address - 0x1000:][:size],
                                [(0x1000, 0x1000 + len(code))]) == definition(code, 0x1000), code.hex()
