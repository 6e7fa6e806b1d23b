"""Verification by emulation: Unicorn (`emulator`), the shadow call stack
(`groundtruth`), the compiled kernel (`kernel`, `csrc/`, and `abi`, the
boundary declared once), walks compared with the shadow stack (`walks`),
failure records (`failures`) and the per-stop loop (`stops`)."""
