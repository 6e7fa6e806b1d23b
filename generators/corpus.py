"""Seeded families of test functions, and the default corpus built from them.

Each family draws a Plan with randomised variants (register sets, sizes,
orders). A program is a call DAG seven levels deep, three functions wide: the entry
at level 0 calls every level-1 function; the i-th function of each level
calls the i-th of the next (so every function runs) and sometimes one from
deeper down; leaves sit at the bottom.
Every family appears in every program.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Callable

from generators.functions import ACC_CANDIDATES, Call, Plan
from generators.layout import build_program
from harness.program import Program

DEFAULT_SEED = 0
DEFAULT_PROGRAMS = 40
LEVELS = 7  # entry at 0, leaves at 7: chains are at least 7 calls deep
WIDTH = 3  # functions per level

Family = Callable[[random.Random, str, list[str]], Plan]


def _some_saved(rng: random.Random, with_fp: bool = False, at_least: int = 1) -> tuple[int, ...]:
    """A callee-saved register set of a random shape."""
    shape = rng.choice(["contiguous", "discontiguous", "all"])
    if shape == "contiguous":
        regs = set(range(4, 4 + rng.randint(at_least, 8)))
    elif shape == "all":
        regs = set(range(4, 12))
    else:
        regs = set(rng.sample(ACC_CANDIDATES, rng.randint(at_least, 4)))
    regs.discard(7)
    while len([r for r in regs if r in ACC_CANDIDATES]) < at_least:
        regs.add(rng.choice(ACC_CANDIDATES))
    if with_fp:
        regs.add(7)
    elif rng.random() < 0.3:
        regs.add(7)  # r7 as a plain callee-saved register
    return tuple(sorted(regs))


def _calls(rng: random.Random, callees: list[str], pointer: bool = False) -> tuple[Call, ...]:
    first = callees[0]  # always one call into the next level
    calls = [Call(first, through_pointer=pointer)]
    if len(callees) > 1 and rng.random() < 0.35:
        calls.append(Call(rng.choice(callees[1:])))
    return tuple(calls)


def _non_leaf(rng, name, callees, family, **fields) -> Plan:
    saved = fields.pop("saved", None) or _some_saved(rng, fields.get("frame_pointer", False),
                                                     2 if fields.get("recursive") else 1)
    calls = fields.pop("calls", None)
    if calls is None:
        calls = _calls(rng, callees)
    return Plan(name=name, family=family, saved=saved, calls=calls, **fields)


# ------------------------------------------------------------------ families


def leaf(rng, name, callees):
    return Plan(name, "leaf", saves_lr=False, return_form="bx_lr",
                conditional_return=rng.random() < 0.5)


def leaf_push(rng, name, callees):
    saved = tuple(sorted(rng.sample(range(4, 12), rng.randint(1, 4))))
    return Plan(name, "leaf_push", saved=saved, saves_lr=False, return_form="bx_lr",
                locals=rng.choice([0, 0, 8, 16]))


def push_pop(rng, name, callees):
    return _non_leaf(rng, name, callees, "push_pop", return_form="pop_pc")


def frame_pointer(rng, name, callees):
    return _non_leaf(rng, name, callees, "frame_pointer", frame_pointer=True,
                     locals=rng.choice([0, 8, 24]),
                     return_form=rng.choice(["pop_pc", "pop_lr_bx"]))


def stack_small(rng, name, callees):
    return _non_leaf(rng, name, callees, "stack_small", locals=8 * rng.randint(1, 63))


def stack_1k(rng, name, callees):
    return _non_leaf(rng, name, callees, "stack_1k", locals=8 * rng.randint(130, 510))


def stack_64k(rng, name, callees):
    return _non_leaf(rng, name, callees, "stack_64k", locals=8 * rng.randint(8200, 30000))


def stack_1m(rng, name, callees):
    return _non_leaf(rng, name, callees, "stack_1m", locals=8 * rng.randint(131100, 150000))


def alloca(rng, name, callees):
    return _non_leaf(rng, name, callees, "alloca", frame_pointer=True, alloca=True,
                     locals=rng.choice([0, 16]), vfp=rng.choice([0, 0, 2]),
                     return_form=rng.choice(["pop_pc", "pop_lr_bx"]))


def vfp(rng, name, callees):
    return _non_leaf(rng, name, callees, "vfp", vfp=rng.randint(1, 8), locals=rng.choice([0, 16]),
                     frame_pointer=rng.random() < 0.3)


def varargs(rng, name, callees):
    return _non_leaf(rng, name, callees, "varargs", varargs=True, return_form="pop_lr_bx",
                     locals=rng.choice([0, 8]))


def multi_epilogue(rng, name, callees):
    simple = rng.random() < 0.6  # a bare push frame allows popne {..., pc}
    return _non_leaf(rng, name, callees, "multi_epilogue", early_return=True,
                     conditional_return=simple, locals=0 if simple else 16,
                     return_form="pop_pc" if simple else rng.choice(["pop_pc", "pop_lr_bx", "ldr_pc"]))


def return_forms(rng, name, callees):
    form = rng.choice(["ldr_pc", "pop_lr_bx", "ldr_restores"])
    return _non_leaf(rng, name, callees, "return_forms", locals=rng.choice([0, 8]),
                     return_form="pop_lr_bx" if form == "ldr_restores" else form,
                     restore_by_ldr=form == "ldr_restores")


def tail_call(rng, name, callees):
    calls = _calls(rng, callees)
    return _non_leaf(rng, name, callees, "tail_call", return_form="pop_lr_bx",
                     calls=calls, tail_call=rng.choice(callees), locals=rng.choice([0, 8]))


def huge_code(rng, name, callees):
    return _non_leaf(rng, name, callees, "huge_code", code_filler=2 * 130 * 1024)


def straddle(rng, name, callees):
    return replace(push_pop(rng, name, callees), family="straddle", straddle=True,
                   locals=rng.choice([0, 16]))


def recursion(rng, name, callees):
    return _non_leaf(rng, name, callees, "recursion", recursive=True, locals=rng.choice([0, 8]))


def pointer_call(rng, name, callees):
    return _non_leaf(rng, name, callees, "pointer_call", calls=_calls(rng, callees, pointer=True))


LEAF_FAMILIES: dict[str, Family] = {"leaf": leaf, "leaf_push": leaf_push}
NON_LEAF_FAMILIES: dict[str, Family] = {
    f.__name__: f
    for f in (push_pop, frame_pointer, stack_small, stack_1k, stack_64k, stack_1m, alloca, vfp,
              varargs, multi_epilogue, return_forms, tail_call, huge_code, straddle, recursion,
              pointer_call)
}
ONCE_PER_PROGRAM = {"huge_code", "stack_1m"}  # keep text and stack sizes bounded


def _with_constants(rng: random.Random, plan: Plan) -> Plan:
    count = 1 + len(plan.constant_registers) + 2 * plan.vfp
    return replace(plan, constants=tuple(rng.getrandbits(32) for _ in range(count)))


def _with_depths(plan: Plan, recursive: set[str], rng: random.Random) -> Plan:
    calls = tuple(replace(c, depth=rng.randint(2, 5)) if c.callee in recursive else c for c in plan.calls)
    return replace(plan, calls=calls)


def program_plans(rng: random.Random) -> tuple[list[Plan], str]:
    """Plans of one program and the name of its entry."""
    families = list(NON_LEAF_FAMILIES)
    rng.shuffle(families)
    once = set()
    levels: list[list[Plan]] = [[] for _ in range(LEVELS + 1)]
    for index in range(WIDTH):
        family = rng.choice(list(LEAF_FAMILIES))
        levels[LEVELS].append(LEAF_FAMILIES[family](rng, f"L{LEVELS}_{index}_{family}", []))
    slot = 0
    for level in range(LEVELS - 1, 0, -1):
        below = [p.name for p in levels[level + 1]]
        deeper = [p.name for lv in levels[level + 2 :] for p in lv]
        for index in range(WIDTH):
            family = families[slot % len(families)]
            slot += 1
            if family in once:
                family = "push_pop"
            if family in ONCE_PER_PROGRAM:
                once.add(family)
            callees = [below[index]] + deeper  # so every function of the level below runs
            if family in ("tail_call", "pointer_call"):
                callees = [c for c in callees if not _is_recursive(levels, c)] or [callees[0]]
            plan = NON_LEAF_FAMILIES[family](rng, f"L{level}_{index}_{family}", callees)
            levels[level].append(plan)
    top = [p.name for p in levels[1]]
    entry = Plan("main", "entry", saved=(4, 5, 6), calls=tuple(Call(name) for name in top))
    levels[0].append(entry)
    plans = [p for level in levels for p in level]
    recursive = {p.name for p in plans if p.recursive}
    plans = [_with_constants(rng, _with_depths(p, recursive, rng)) for p in plans]
    rng.shuffle(plans)  # calls go both forwards and backwards in memory
    return plans, "main"


def _is_recursive(levels: list[list[Plan]], name: str) -> bool:
    return any(p.name == name and p.recursive for level in levels for p in level)


def generate_program(seed: int, index: int) -> Program:
    rng = random.Random(f"unwind-harness:{seed}:{index}")
    plans, entry = program_plans(rng)
    return build_program(f"generated-{seed}-{index}", plans, entry, arg=rng.getrandbits(32))


def default_corpus(seed: int = DEFAULT_SEED, programs: int = DEFAULT_PROGRAMS) -> list[Program]:
    return [generate_program(seed, index) for index in range(programs)]
