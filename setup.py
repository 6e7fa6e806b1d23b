"""Only the compiled verification kernel; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "harness.verify._kernel",
    ["harness/verify/csrc/module.c", "harness/verify/csrc/rules.c", "harness/verify/csrc/trace.c"],
    depends=["harness/verify/csrc/kernel.h"],
    extra_compile_args=["-O2"],
)])
