"""The shape of the code: small modules and functions, a layered import
graph without cycles (the emulation below the operating system and the
verifier, each layer below those it feeds, the bench in one package), and
the boundaries the ground-truth rule needs (generators import nothing under
test; one module per foreign engine, Unicorn past its public API in one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "generators")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every Python module of the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module `name` imports (at any depth of its code), as dotted names."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _internal(name: str) -> set[str]:
    """The package modules `name` imports (a package import counts as its __init__)."""
    return {module for module in _imports(name) if module in MODULES and module != name}


def _closure(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for module in _internal(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    return seen


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_small(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_functions_are_small(name):
    tree = ast.parse(MODULES[name].read_text())
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{name}: {', '.join(long)}"


# What a run is told travels as named records (harness.verify.stops.Verify,
# abi.TraceSettings, abi.SlowStop, the jobs' parts, frame_analysis.ProgramFacts),
# not as long lists of positions.
MAX_PARAMETERS = 8


def _parameters(node) -> int:
    arguments = node.args
    names = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    count = len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)
    return count - (bool(names) and names[0].arg in ("self", "cls"))


@pytest.mark.parametrize("name", [m for m in MODULES if m.startswith("harness")])
def test_functions_take_few_parameters(name):
    many = [f"{node.name} ({_parameters(node)})" for node in ast.walk(ast.parse(MODULES[name].read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) > MAX_PARAMETERS]
    assert not many, f"{name}: {', '.join(many)} take more than {MAX_PARAMETERS} parameters: pass a record"


def test_import_graph_has_no_cycle():
    cyclic = sorted(name for name in MODULES if name in _closure(name))
    assert not cyclic, f"modules that import themselves through others: {cyclic}"


def _within(module: str, *packages: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _layer(prefix: str) -> list[str]:
    return [name for name in MODULES if _within(name, prefix)]


@pytest.mark.parametrize("name", _layer("harness.formats"))
def test_formats_know_nothing_of_unwinding(name):
    """A format module reads and writes bytes; it never reaches up into the
    unwinders, the verifier or the reports built on it."""
    above = {m for m in _closure(name) if m.startswith(("harness.unwind", "harness.verify", "harness.report"))}
    assert not above, f"{name} imports {sorted(above)}"


@pytest.mark.parametrize("name", _layer("harness.emulation"))
def test_emulation_is_below_every_layer(name):
    """The emulation runs the engine below both the verifier and the
    operating system: it reads the C boundary (harness.abi) and the
    errors, and nothing of the layers built on it."""
    allowed = {m for m in _closure(name) if m in ("harness", "harness.abi", "harness.errors")
               or _within(m, "harness.emulation")}
    assert _closure(name) == allowed, f"{name} imports {sorted(_closure(name) - allowed)}"


# What runs the tool (commands, the main job, the bench, the corpus checks):
# no layer below reaches it.
RUNNERS = ("harness.cli", "harness.commands", "harness.table_commands", "harness.runner", "harness.shards",
           "harness.linux_verify", "harness.bench", "harness.mutants", "harness.compare_rows", "harness.compare_corpus",
           "harness.synth_fuzz", "harness.synth_fuzz_judge", "harness.synth_fuzz_report", "harness.stripped")
# The layers as the data flows (docs/architecture.md): each imports nothing
# of those named here. Instructions, then unwinders over the tables; the
# operating system over the emulation; the verifier over the emulation and
# the unwinders, handed a process's system without knowing harness.linux;
# the reports over the verifier's results.
ABOVE = {
    "harness.thumb": ("harness.formats", "harness.unwind", "harness.emulation", "harness.linux", "harness.verify",
                      "harness.report", *RUNNERS),
    "harness.unwind": ("harness.emulation", "harness.linux", "harness.verify", "harness.report", *RUNNERS),
    "harness.linux": ("harness.thumb", "harness.unwind", "harness.verify", "harness.report", "harness.classify",
                      "harness.program", *RUNNERS),
    "harness.verify": ("harness.linux", "harness.report", *RUNNERS),
    "harness.report": ("harness.emulation", "harness.linux", *RUNNERS),
}


@pytest.mark.parametrize("name, above", [pytest.param(name, above, id=name)
                                         for layer, above in ABOVE.items() for name in _layer(layer)])
def test_each_layer_imports_nothing_above_it(name, above):
    reached = sorted(m for m in _internal(name) if _within(m, *above))
    assert not reached, f"{name} imports {reached}"


# Not bench code: it renders the bench's JSON into docs/bench.md, as
# report.figures renders the README's tables, and measures nothing.
BENCH_REPORT = "harness.report.bench_doc"


def test_the_bench_has_one_home():
    """The bench's code is harness.bench's alone, and only the `bench`
    command (harness.commands) reaches it: nothing the tool runs otherwise
    depends on a measurement."""
    strays = [name for name in MODULES if "bench" in name.rpartition(".")[2]
              and not _within(name, "harness.bench") and name != BENCH_REPORT]
    users = sorted(name for name in MODULES if not _within(name, "harness.bench")
                   and any(_within(m, "harness.bench") for m in _internal(name)))
    assert not strays and users == ["harness.commands"], (strays, users)


def test_the_c_boundary_imports_only_the_standard_library():
    """setup.py runs harness/abi.py by path, before the package is installed."""
    assert not {m for m in _imports("harness.abi") if _within(m, "harness", "generators")}


@pytest.mark.parametrize("name", _layer("generators"))
def test_generators_import_nothing_under_test(name):
    """Ground truth must not come from the code it judges: the generators
    write their own CFI rows and EHABI tables, and never touch a table
    format, an unwinder or the verifier (ARCHITECTURE.md, "Ground truth")."""
    under_test = {m for m in _closure(name)
                  if m.startswith(("harness.formats", "harness.unwind", "harness.verify", "harness.thumb"))}
    assert not under_test, f"{name} imports {sorted(under_test)}"


@pytest.mark.parametrize("engine, homes", [
    # The corpus build's own check runs each ELF in Unicorn by itself, so
    # that the checksums it records owe nothing to the harness. The harness's
    # emulator runs the engines its engine pool makes, and keeps between runs;
    # a process's system calls act on the engine through process_machine, and
    # its hooks (system calls, faults, timers) are process_run's.
    # What goes past Unicorn's public API is binding's alone (test below).
    ("unicorn", ["generators.compiled.check", "harness.emulation.binding", "harness.emulation.emulator",
                 "harness.emulation.engine_pool", "harness.emulation.process_machine",
                 "harness.emulation.process_run"]),
    ("capstone", ["harness.thumb.disasm"]),
    ("keystone", ["generators.assembler"]),
])
def test_one_module_per_engine(engine, homes):
    users = sorted(name for name in MODULES if any(m == engine or m.startswith(engine + ".") for m in _imports(name)))
    assert users == homes


# The binding's internals the emulation needs where no public API serves
# (harness.emulation.binding says why for each).
UNICORN_INTERNALS = {"_uch", "_callbacks", "uclib"}


def test_unicorn_is_used_through_its_public_api_but_in_binding():
    """Only harness.emulation.binding imports the binding's internal module
    or touches Uc's private members."""
    users = set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        private = any(isinstance(node, ast.Attribute) and node.attr in UNICORN_INTERNALS
                      or isinstance(node, ast.Name) and node.id in UNICORN_INTERNALS for node in ast.walk(tree))
        if private or any(_within(m, "unicorn.unicorn_py3") for m in _imports(name)):
            users.add(name)
    assert users == {"harness.emulation.binding"}, sorted(users)
