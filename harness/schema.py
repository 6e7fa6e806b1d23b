"""Checks of JSON read from files: types, ranges and closed objects, each
failure an InputError naming the JSON path of the field (`records[3].stops:
-2 is not a count (an integer >= 0)`). A check is a function of the value
and its path; the combinators below build checks of whole documents.

Counts are integers from 0 to 2**53: floats, Infinity, NaN and booleans are
not (`type(value) is int`), and no count of a real run comes near the top."""

from __future__ import annotations

import json
import math
import re
from typing import Callable, NoReturn, Sequence

from harness.errors import InputError

MOST = 2**53

Check = Callable[[object, str], None]  # (value, its JSON path) -> None, or InputError


def show(value) -> str:
    """`value` for a message: short, whatever it is."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    if isinstance(value, str):
        return json.dumps(value[:40])[:-1] + ('..."' if len(value) > 40 else '"')
    text = json.dumps(value)  # null, true, numbers (Infinity, NaN)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


def at(where: str, key: int | str) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    if key.isidentifier() and key.isascii():
        return f"{where}.{key}" if where else key
    return f"{where}[{show(key)}]"


def fail(where: str, text: str) -> NoReturn:
    raise InputError(f"{where}: {text}" if where else text)


def bad(where: str, value, what: str) -> NoReturn:
    fail(where, f"{show(value)} is not {what}")


def integer(low: int, high: int, what: str, limit: str = "2**53") -> Check:
    def check(value, where: str) -> None:
        if type(value) is not int or value < low:  # type(): a bool is not an integer here
            bad(where, value, what)
        if value > high:
            fail(where, f"{show(value)} is too large (more than {limit})")
    return check


COUNT = integer(0, MOST, "a count (an integer >= 0)")
POSITIVE = integer(1, MOST, "a positive integer")
WORD = integer(0, 2**32 - 1, "a 32-bit value (an integer >= 0)", "2**32 - 1")
SEED = integer(-math.inf, math.inf, "an integer")  # any seed the command line takes


def string(value, where: str) -> None:
    if not isinstance(value, str):
        bad(where, value, "a string")


def hex_address(value, where: str) -> None:
    if not (isinstance(value, str) and re.fullmatch(r"0x[0-9a-f]{1,8}", value)):
        bad(where, value, "an address (0x and hex digits)")


def number(low: float, high: float, what: str) -> Check:
    def check(value, where: str) -> None:  # NaN fails every comparison; no bool; an int may be huge
        if type(value) not in (int, float) or not low <= value <= high:
            bad(where, value, what)
    return check


def one_of(choices: Sequence, what: str | None = None) -> Check:
    def check(value, where: str) -> None:
        if not any(type(value) is type(c) and value == c for c in choices):
            bad(where, value, what or " or ".join(show(c) for c in choices))
    return check


def optional(check: Check) -> Check:
    def optional(value, where: str) -> None:
        if value is not None:
            check(value, where)
    return optional


def list_of(item: Check, most: int = MOST) -> Check:
    def check(value, where: str) -> None:
        if not isinstance(value, list):
            bad(where, value, "a list")
        if len(value) > most:
            fail(where, f"{len(value)} items, more than the {most} it may have")
        for n, element in enumerate(value):
            item(element, at(where, n))
    return check


def row(what: str, *items: Check) -> Check:
    """A list of fixed length, one check per item."""
    def check(value, where: str) -> None:
        if not isinstance(value, list) or len(value) != len(items):
            bad(where, value, what)
        for n, (element, item) in enumerate(zip(value, items)):
            item(element, at(where, n))
    return check


def map_of(key: Check, value: Check) -> Check:
    """An object whose keys are names of one kind (checked by `key`)."""
    def check(data, where: str) -> None:
        if not isinstance(data, dict):
            bad(where, data, "an object")
        for name, element in data.items():
            key(name, at(where, name))
            value(element, at(where, name))
    return check


def object_of(fields: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with exactly the keys of `fields`, and any of `optional`."""
    def check(data, where: str) -> None:
        if not isinstance(data, dict):
            bad(where, data, "an object")
        for name, field in fields.items():
            if name not in data:
                fail(where, f"the key {show(name)} is missing")
            field(data[name], at(where, name))
        for name in data:
            if name in (optional or {}):
                optional[name](data[name], at(where, name))
            elif name not in fields:
                fail(where, f"unknown key {show(name)}")
    return check


ANY: Check = lambda value, where: None  # a value checked later
BOOLEAN = one_of([True, False], "true or false")
