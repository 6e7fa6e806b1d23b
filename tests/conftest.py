"""Hypothesis profiles: the default (100 examples a property) for CI, and
`fuzz` for `make fuzz` (pytest --hypothesis-profile=fuzz)."""

from hypothesis import settings

settings.register_profile("fuzz", max_examples=5_000, deadline=None)
