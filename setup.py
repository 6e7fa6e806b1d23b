"""Only the compiled verification kernel; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "harness._kernel",
    ["harness/csrc/module.c", "harness/csrc/rules.c", "harness/csrc/trace.c"],
    depends=["harness/csrc/kernel.h"],
    extra_compile_args=["-O2"],
)])
