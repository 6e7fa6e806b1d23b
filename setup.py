"""Only the compiled part (the verification kernel); everything else is in
pyproject.toml.

The kernel's view of the Python/C boundary, csrc/abi.h, is written here from
harness/abi.py (run by path: the package is not installed yet)."""

import runpy
from pathlib import Path

from setuptools import Extension, setup

CSRC = Path(__file__).resolve().parent / "harness" / "verify" / "csrc"
header = runpy.run_path(str(CSRC.parents[1] / "abi.py"))["header"]()  # harness/abi.py
if not (CSRC / "abi.h").exists() or (CSRC / "abi.h").read_text() != header:
    (CSRC / "abi.h").write_text(header)

setup(ext_modules=[
    Extension(
        "harness.verify._kernel",
        [f"harness/verify/csrc/{name}.c" for name in (
            "module", "ranges", "rules", "sources", "memo", "epilogue",
            "trace", "trace_pcs", "trace_shadow", "trace_stop", "trace_hooks", "trace_log")],
        depends=[f"harness/verify/csrc/{name}.h" for name in ("kernel", "abi", "trace")],
        extra_compile_args=["-O2"],
    ),
])
