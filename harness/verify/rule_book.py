"""Rules by what names them: every rule the kernels of a process were given,
each made once.

A table's row names its rule (harness.unwind.rule_map.RuleMap.key_of_row:
the row's value and the pure function that makes the rule), so rows named
alike in any table, unwinder or program share one rule, made and packed
once in a process: the v2 tables of a program share most of their runs, a
program repeats its frames' CFI rows, and the next program most of them.
The kernel (csrc/sources.c) is given, for every row of a table, the number
of its rule in the book and the book's packed rules, and asks Python to
make only those not made yet (StopKernel._provide_book).

A rule with a scan is packed with the number its Verifier gave the scan's
return addresses: such a rule is its kernel's own, numbered apart, never
shared, and forgotten by the book once its kernel's run is over (the kernel
keeps it): it holds every return address of its program.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable

from harness.unwind.rule import Chain, Rule, Scan
from harness.unwind.rule_map import NO_ROW, RuleMap, itself

UNMADE = Ellipsis  # a packed rule not made yet (None: the kernel defers there)


class RuleBook:
    """Rules by number: `keys` what names each, `rules` the rule (once
    made), `packed` its kernel form (bytes; None: defer; UNMADE)."""

    at_most = 1 << 18  # rules a book holds before a process starts another (`current`)

    def __init__(self) -> None:
        self.numbers: dict[Callable, dict[Hashable, int]] = {}  # make -> value -> number (a table's rows share make)
        self.keys: list[Hashable] = []
        self.rules: list[Rule | None] = []
        self.packed: list = []
        self.plans: dict[bytes, bytes | None] = {}
        """Epilogues planned in C (csrc/epilogue.c): each rule packed, by the plan's steps as the
        kernel writes them (a rule is a pure function of its steps). Not numbered: such a rule never
        fails, so nothing words it by its number."""

    def __len__(self) -> int:
        return len(self.keys)

    def number(self, key: Hashable, shared: bool = True) -> int:
        """The number of the rule `key` names (a new one unless `shared`)."""
        make, value = key
        numbers = self.numbers.get(make)
        if numbers is None:
            numbers = self.numbers[make] = {}
        number = numbers.get(value) if shared else None
        if number is None:
            number = len(self.keys)
            self.keys.append(key)
            self.rules.append(None)
            self.packed.append(UNMADE)
            if shared:
                numbers[value] = number
        return number

    def numbers_of(self, rule_map: RuleMap, numbered: dict[int, tuple] | None = None,
                   own: list[int] | None = None) -> array:
        """The number of each row's rule, by row + 1 (NO_ROW first); rows of
        values already numbered (`numbered`: by the values' id, beside the
        values, which it keeps from being freed and their id reused) are not
        named again. Numbers of a kernel's own rules are added to `own`."""
        values = rule_map.values
        held_values, numbers = (None, None) if numbered is None else numbered.get(id(values), (None, None))
        if held_values is not values:
            numbers = self._numbers_of_rows(rule_map, own)
            if numbered is not None:
                numbered[id(values)] = values, numbers
        return array("q", [self.number_of(rule_map.key_of_row(NO_ROW), own)]) + numbers

    def _numbers_of_rows(self, rule_map: RuleMap, own: list[int] | None) -> array:
        """The number of each row's rule: a table has hundreds of rows, most
        named before (in this table or another), found without a call each
        (and without a key each: by value, among its make's)."""
        make, values = rule_map.rule_of_value, rule_map.values
        if make is itself:  # a rule itself names it: a scan's is its kernel's own
            return array("q", [self.number_of(key, own) for key in rule_map.keys_of_rows()])
        known = self.numbers.get(make, {})
        found = array("q", [known.get(value, -1) for value in values])
        for row in [row for row, number in enumerate(found) if number < 0]:
            found[row] = self.number((make, values[row]))
        return found

    def number_of(self, key: tuple, own: list[int] | None = None) -> int:
        """The number of the rule (make, value) names: shared, but for a
        rule itself that scans (its kernel's own: added to `own`)."""
        make, value = key
        if make is itself and names_sites(value):
            number = self.number(key, shared=False)
            if own is not None:
                own.append(number)
            return number
        return self.number(key)

    def forget(self, numbers: list[int]) -> None:
        """Let rules `numbers` go (a kernel's own, after its run): they are
        never named again, and the book would keep them as long as the process."""
        for number in numbers:
            self.keys[number] = self.rules[number] = self.packed[number] = None

    def make(self, number: int, pack: Callable[[Rule], bytes | None]) -> tuple[int, bytes | None]:
        """Make rule `number` from what names it and pack it (once)."""
        if self.packed[number] is UNMADE:
            make, value = self.keys[number]
            rule = self.rules[number] = make(value)
            self.packed[number] = None if rule is None else pack(rule)
        return number, self.packed[number]


def names_sites(rule: Rule | None) -> bool:
    """Does the rule (or a chain's method) scan, with its Verifier's return addresses?"""
    kind = type(rule)
    return (kind is Scan and rule.sites is not None) or (kind is Chain and any(
        type(alternative) is Scan and alternative.sites is not None for alternative in rule.alternatives))


_current = RuleBook()


def current() -> RuleBook:
    """The process's book; a new one once it holds RuleBook.at_most rules (a
    kernel keeps the book it began with)."""
    global _current
    if len(_current) >= RuleBook.at_most:
        _current = RuleBook()
    return _current

