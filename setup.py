"""Only the compiled verification kernel; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("harness._kernel", ["harness/_kernel.c"], extra_compile_args=["-O2"])])
