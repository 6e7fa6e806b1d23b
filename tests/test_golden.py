"""Every blob and listing `encode` and `dump` write for the committed ELFs is
the one recorded in tests/golden.json, byte for byte (tests/golden.py; its
`check --all` adds the main job's reports, verify-elf, merge and mutants)."""

from __future__ import annotations

import golden


def test_encode_and_dump_outputs_are_unchanged():
    found = golden.digests(everything=False)
    assert len(found) == 17 * len(golden.ELFS)  # 6 v2 encodes (summary, blob), 2 dumps, v1: 2 + 1
    assert golden.differences(found) == []
