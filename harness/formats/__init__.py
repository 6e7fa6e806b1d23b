"""Byte formats, read and written: ELF, ULEB128, EHABI instructions, DWARF
CFI, `.ARM.exidx`/`.ARM.extab`, Chrome's v1 and v2 tables. Nothing here
knows of unwinding or verification (tests/test_structure.py checks it)."""
