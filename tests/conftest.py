"""Hypothesis profiles: the default (100 examples a property) for CI, and
`fuzz` for `make fuzz` (pytest --hypothesis-profile=fuzz); the `compiled`
fixture; `roots` and `kernel`, a process's system calls on a plain machine
(tests/linux_calls.py)."""

import pytest
from hypothesis import settings
from linux_calls import made_kernel, made_roots

settings.register_profile("fuzz", max_examples=5_000, deadline=None)


@pytest.fixture(params=[True, False], ids=["compiled-hook", "python-hook"])
def compiled(request) -> bool:
    """Both per-instruction hooks of harness.verify: the compiled tracer and
    the Python reference it mirrors."""
    return request.param


@pytest.fixture
def roots(tmp_path):
    """A sysroot, a working directory and a folder outside both."""
    return made_roots(tmp_path)


@pytest.fixture
def kernel(roots):
    """A process over a PageMachine, confined to `roots`."""
    return made_kernel(roots)
