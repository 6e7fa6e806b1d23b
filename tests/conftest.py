"""Hypothesis profiles: the default (100 examples a property) for CI, and
`fuzz` for `make fuzz` (pytest --hypothesis-profile=fuzz); the `compiled`
fixture."""

import pytest
from hypothesis import settings

settings.register_profile("fuzz", max_examples=5_000, deadline=None)


@pytest.fixture(params=[True, False], ids=["compiled-hook", "python-hook"])
def compiled(request) -> bool:
    """Both per-instruction hooks of harness.verify: the compiled tracer and
    the Python reference it mirrors."""
    return request.param
