"""Test functions: a plan (what the function does), its Thumb-2 instructions
(with each instruction's role and frame effect), and a Python model of the
value it returns, so a program's result proves it executed correctly.

Semantics of every generated function f(a) (a in r0, depth in r1 for
recursive ones), all arithmetic modulo 2**32:
    acc = a + K
    recursive:  if depth != 0: acc += f(acc, depth - 1)
    each call:  acc += callee(acc)          (bl, or blx through a register)
    result = acc + the constants it wrote into its other callee-saved registers
             (+ depth for recursive ones) + both halves of every d register it set
    conditional return (IT):  if result & 2: return result
    early return:             if result & 1: return result + 1
    tail call:                return tail(result)
Leaf functions compute a + K (+ the constants of the registers they push).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from generators import frame_model as fx

MASK = 0xFFFFFFFF
ACC_CANDIDATES = (4, 5, 6, 8, 9, 10, 11)  # callee-saved registers an accumulator may live in


@dataclass(frozen=True)
class Call:
    callee: str
    through_pointer: bool = False  # movw/movt r3 + blx r3 instead of bl
    depth: int | None = None  # r1 for recursive callees


@dataclass(frozen=True)
class Plan:
    """What one generated function does. Families choose these fields."""

    name: str
    family: str
    saved: tuple[int, ...] = ()  # callee-saved core registers pushed (r4-r11)
    saves_lr: bool = True
    varargs: bool = False  # push {r0-r3} before the frame
    frame_pointer: bool = False  # add r7, sp, #k (r7 must be in `saved`)
    vfp: int = 0  # vpush {d8-d(8+vfp-1)}
    locals: int = 0  # bytes of fixed stack adjustment
    alloca: bool = False  # sub sp, sp, rN in the body (needs the frame pointer)
    calls: tuple[Call, ...] = ()
    recursive: bool = False  # calls itself with depth - 1 until depth is 0
    return_form: str = "pop_pc"  # pop_pc | pop_lr_bx | ldr_pc | bx_lr
    conditional_return: bool = False  # it ne; popne {..., pc} (or bxne lr in a leaf)
    early_return: bool = False  # bne to a second copy of the epilogue
    tail_call: str | None = None  # b.w to this function after the teardown
    restore_by_ldr: bool = False  # restore with ldr rX, [sp], #4 one register at a time
    code_filler: int = 0  # bytes of never-executed code inside (functions over 128 KiB)
    straddle: bool = False  # lay out across a 128 KiB page boundary
    constants: tuple[int, ...] = (0x1234,)  # K, then one per extra register / d half

    @property
    def leaf(self) -> bool:
        return not self.calls and not self.recursive and self.tail_call is None

    @property
    def accumulator(self) -> int:
        return next(r for r in self.saved if r in ACC_CANDIDATES)

    @property
    def depth_register(self) -> int | None:
        if not self.recursive:
            return None
        return [r for r in self.saved if r in ACC_CANDIDATES][1]

    @property
    def constant_registers(self) -> tuple[int, ...]:
        """Callee-saved registers the body fills with known constants."""
        if self.leaf:
            return tuple(self.saved)
        busy = {self.accumulator, self.depth_register, fx.FP if self.frame_pointer else None}
        return tuple(r for r in self.saved if r not in busy)

    @property
    def fp_offset(self) -> int:
        """add r7, sp, #k makes r7 point at its own save slot."""
        return 4 * sorted(self.saved).index(fx.FP)

    @property
    def epilogues(self) -> int:
        return 1 + self.conditional_return + self.early_return


@dataclass(frozen=True)
class Insn:
    """One line of a function. `text` may need the address map (calls)."""

    text: str | Callable[[dict[str, int]], str]
    role: str = "body"  # prologue | body | teardown | return | cond_return | label | filler
    effect: Callable[[fx.FrameState], fx.FrameState] | None = None
    filler: int = 0  # bytes of never-executed code (role "filler"); splits assembly

    def source(self, addresses: dict[str, int]) -> str:
        return self.text(addresses) if callable(self.text) else self.text


def _regs(regs) -> str:
    return ", ".join(f"r{r}" if r < 13 else {13: "sp", 14: "lr", 15: "pc"}[r] for r in sorted(regs))


def _set_constant(reg: int, value: int) -> list[Insn]:
    lines = [Insn(f"movw r{reg}, #{value & 0xFFFF:#x}")]
    if value >> 16:
        lines.append(Insn(f"movt r{reg}, #{value >> 16:#x}"))
    return lines


def _stack_change(amount: int, grow: bool, role: str) -> list[Insn]:
    """sub/add sp in the form compilers use for its size."""
    op = "sub" if grow else "add"
    effect = fx.sub_sp(amount) if grow else fx.add_sp(amount)
    if amount <= 508:
        return [Insn(f"{op} sp, #{amount}", role, effect)]
    if amount <= 4095:
        return [Insn(f"{op}w sp, sp, #{amount}", role, effect)]
    setup = "prologue" if grow else "body"  # loading ip is not yet a teardown
    return [
        Insn(f"movw r12, #{amount & 0xFFFF:#x}", setup),
        Insn(f"movt r12, #{amount >> 16:#x}", setup),
        Insn(f"{op} sp, sp, r12", role, effect),
    ]


def prologue(plan: Plan) -> list[Insn]:
    lines: list[Insn] = []
    if plan.varargs:
        lines.append(Insn("push {r0, r1, r2, r3}", "prologue", fx.sub_sp(16)))
    if plan.return_form == "ldr_pc":
        lines.append(Insn("str lr, [sp, #-4]!", "prologue", fx.push((14,))))
        if plan.saved:
            lines.append(Insn(f"push {{{_regs(plan.saved)}}}", "prologue", fx.push(plan.saved)))
    else:
        pushed = plan.saved + ((14,) if plan.saves_lr else ())
        if pushed:
            lines.append(Insn(f"push {{{_regs(pushed)}}}", "prologue", fx.push(pushed)))
    if plan.frame_pointer:
        k = plan.fp_offset
        text = f"add r7, sp, #{k}" if k else "mov r7, sp"
        lines.append(Insn(text, "prologue", fx.set_frame_pointer(k)))
    if plan.vfp:
        lines.append(Insn(f"vpush {{d8-d{7 + plan.vfp}}}", "prologue", fx.vpush(8, plan.vfp)))
    if plan.locals:
        lines += _stack_change(plan.locals, True, "prologue")
    return lines


def epilogue(plan: Plan) -> list[Insn]:
    lines: list[Insn] = []
    if plan.frame_pointer and (plan.alloca or plan.locals):
        # With a frame pointer, compilers restore sp through it.
        below = plan.fp_offset + 8 * plan.vfp
        text = f"sub sp, r7, #{below}" if below else "mov sp, r7"
        lines.append(Insn(text, "teardown", fx.sp_from_frame_pointer(below)))
    elif plan.locals:
        lines += _stack_change(plan.locals, False, "teardown")
    if plan.vfp:
        lines.append(Insn(f"vpop {{d8-d{7 + plan.vfp}}}", "teardown", fx.vpop(8, plan.vfp)))
    form = plan.return_form
    if form == "ldr_pc":
        if plan.saved:
            lines.append(Insn(f"pop {{{_regs(plan.saved)}}}", "teardown", fx.pop(plan.saved)))
        lines.append(Insn("ldr pc, [sp], #4", "return", fx.pop((14,))))
        return lines
    if form == "pop_pc" and plan.tail_call is None and not plan.varargs:
        lines.append(Insn(f"pop {{{_regs(plan.saved + (15,))}}}", "return", fx.pop(plan.saved + (14,))))
        return lines
    pushed = plan.saved + ((14,) if plan.saves_lr else ())
    if pushed and plan.restore_by_ldr:
        lines += [Insn(f"ldr {_regs((reg,))}, [sp], #4", "teardown", fx.pop((reg,))) for reg in sorted(pushed)]
    elif pushed:
        lines.append(Insn(f"pop {{{_regs(pushed)}}}", "teardown", fx.pop(pushed)))
    if plan.varargs:
        lines.append(Insn("add sp, #16", "teardown", fx.add_sp(16)))
    if plan.tail_call is not None:
        target = plan.tail_call
        lines.append(Insn(lambda a, t=target: f"b.w {a[t]:#x}", "return"))
    else:
        lines.append(Insn("bx lr", "return"))
    return lines


def _call(call: Call, acc: int) -> list[Insn]:
    lines = [Insn(f"mov r0, r{acc}")]
    if call.depth is not None:
        lines.append(Insn(f"movs r1, #{call.depth}"))
    if call.through_pointer:
        callee = call.callee
        lines += [
            Insn(lambda a, c=callee: f"movw r3, #{(a[c] | 1) & 0xFFFF:#x}"),
            Insn(lambda a, c=callee: f"movt r3, #{a[c] >> 16:#x}"),
            Insn("blx r3"),
        ]
    else:
        lines.append(Insn(lambda a, c=call.callee: f"bl {a[c]:#x}"))
    lines.append(Insn(f"add r{acc}, r0"))
    return lines


def _checksum_tail(plan: Plan) -> list[Insn]:
    """result in r0 from the registers the body filled; then the returns."""
    lines: list[Insn] = []
    for reg in plan.constant_registers:
        lines.append(Insn(f"add r0, r{reg}"))
    if plan.depth_register is not None:
        lines.append(Insn(f"add r0, r{plan.depth_register}"))
    for d in range(8, 8 + plan.vfp):
        lines += [Insn(f"vmov r2, r3, d{d}"), Insn("add r0, r2"), Insn("add r0, r3")]
    return lines


def body(plan: Plan) -> list[Insn]:
    constants = iter(plan.constants)
    k = next(constants)
    lines: list[Insn] = []
    if plan.leaf:
        for reg in plan.constant_registers:
            lines += _set_constant(reg, next(constants))
        lines += _set_constant(1, k) + [Insn("add r0, r1")]
        if plan.locals:
            lines.append(Insn("str r0, [sp]"))
        return lines + _checksum_tail(plan)
    acc = plan.accumulator
    lines.append(Insn(f"mov r{acc}, r0"))
    if plan.depth_register is not None:
        lines.append(Insn(f"mov r{plan.depth_register}, r1"))
    lines += _set_constant(1, k) + [Insn(f"add r{acc}, r1")]
    for reg in plan.constant_registers:
        lines += _set_constant(reg, next(constants))
    for d in range(8, 8 + plan.vfp):
        lines += _set_constant(2, next(constants)) + _set_constant(3, next(constants))
        lines.append(Insn(f"vmov d{d}, r2, r3"))
    if plan.alloca:
        lines += [
            Insn(f"and r3, r{acc}, #0x38"),
            Insn("add r3, #8"),
            Insn("sub sp, sp, r3", effect=fx.dynamic_alloc),
            Insn(f"str r{acc}, [sp]"),
        ]
    elif plan.locals:
        lines.append(Insn(f"str r{acc}, [sp]"))
    if plan.code_filler:
        # Hop over never-executed code so the function spans pages; the middle
        # stop lands in a page where no function starts. Chunk k of a function
        # (after its k-th filler) is at address "name#k".
        half = plan.code_filler // 2
        lines += [Insn(lambda a, n=plan.name: f"b.w {a[n + '#1']:#x}"), Insn("", "filler", filler=half),
                  Insn(f"add r{acc}, #1"), Insn(lambda a, n=plan.name: f"b.w {a[n + '#2']:#x}"),
                  Insn("", "filler", filler=plan.code_filler - half)]
    if plan.recursive:
        dreg = plan.depth_register
        lines += [
            Insn(f"cmp r{dreg}, #0"),
            Insn("beq .Lbase"),
            Insn(f"mov r0, r{acc}"),
            Insn(f"subs r1, r{dreg}, #1"),
            Insn(lambda a, n=plan.name: f"bl {a[n]:#x}"),
            Insn(f"add r{acc}, r0"),
            Insn(".Lbase:", "label"),
        ]
    for call in plan.calls:
        lines += _call(call, acc)
    lines.append(Insn(f"mov r0, r{acc}"))
    return lines + _checksum_tail(plan)


def instructions(plan: Plan) -> list[Insn]:
    lines = prologue(plan) + body(plan)
    if plan.conditional_return:
        lines += [Insn("tst r0, #2"), Insn("it ne")]
        if plan.leaf and not plan.saved:
            lines.append(Insn("bxne lr", "cond_return"))
        else:
            lines.append(Insn(f"popne {{{_regs(plan.saved + (15,))}}}", "cond_return"))
    if plan.early_return:
        lines += [Insn("tst r0, #1"), Insn("bne .Learly")]
    lines += epilogue(plan)
    if plan.early_return:
        lines += [Insn(".Learly:", "label"), Insn("adds r0, #1")] + epilogue(plan)
    return lines


def evaluate(plan: Plan, a: int, depth: int, call: Callable[[str, int, int], int]) -> int:
    """The value `plan`'s code returns for r0 = a, r1 = depth."""
    constants = iter(plan.constants)
    acc = (a + next(constants)) & MASK
    result_extra = 0
    if plan.leaf:
        result_extra = sum(next(constants) for _ in plan.constant_registers)
        result = (acc + result_extra) & MASK
    else:
        extra = [next(constants) for _ in plan.constant_registers]
        halves = [next(constants) for _ in range(2 * plan.vfp)]
        if plan.code_filler:
            acc = (acc + 1) & MASK  # the add on the hop through the middle page
        if plan.recursive and depth != 0:
            acc = (acc + call(plan.name, acc, depth - 1)) & MASK
        for c in plan.calls:
            acc = (acc + call(c.callee, acc, c.depth or 0)) & MASK
        result = acc + sum(extra) + sum(halves)
        if plan.recursive:
            result += depth
        result &= MASK
    if plan.conditional_return and result & 2:
        return result
    if plan.early_return and result & 1:
        result = (result + 1) & MASK
    if plan.tail_call is not None:
        return call(plan.tail_call, result, 0)
    return result
