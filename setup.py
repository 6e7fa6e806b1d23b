"""Only the compiled parts (the verification kernel, the frame analysis);
everything else is in pyproject.toml.

The kernel's view of the Python/C boundary, csrc/abi.h, is written here from
harness/abi.py (run by path: the package is not installed yet). The frame
analysis includes the headers of the capstone package it is built with (a
build requirement) and loads that package's library when it runs."""

import importlib.util
import runpy
from pathlib import Path

from setuptools import Extension, setup

CSRC = Path(__file__).resolve().parent / "harness" / "verify" / "csrc"
header = runpy.run_path(str(CSRC.parents[1] / "abi.py"))["header"]()  # harness/abi.py
if not (CSRC / "abi.h").exists() or (CSRC / "abi.h").read_text() != header:
    (CSRC / "abi.h").write_text(header)

THUMB = CSRC.parents[1] / "thumb" / "csrc"
capstone = importlib.util.find_spec("capstone")
CAPSTONE_HEADERS = Path(capstone.origin).parent / "include" if capstone and capstone.origin else None

setup(ext_modules=[
    Extension(
        "harness.verify._kernel",
        [f"harness/verify/csrc/{name}.c" for name in (
            "module", "ranges", "rules", "sources", "memo", "epilogue",
            "trace", "trace_pcs", "trace_shadow", "trace_stop", "trace_hooks", "trace_log")],
        depends=[f"harness/verify/csrc/{name}.h" for name in ("kernel", "abi", "trace")],
        extra_compile_args=["-O2"],
    ),
    *([Extension(
        "harness.thumb._analysis",
        [f"harness/thumb/csrc/{name}.c" for name in ("module", "decode", "effects", "paths", "tables", "explore")],
        depends=[f"harness/thumb/csrc/{name}.h" for name in ("analysis", "paths")],
        include_dirs=[str(CAPSTONE_HEADERS)],
        extra_compile_args=["-O2"],
        libraries=["dl"],
    )] if CAPSTONE_HEADERS and (CAPSTONE_HEADERS / "capstone" / "capstone.h").exists() else []),
])
