"""Verification by emulation: the shadow call stack (`groundtruth`), the
compiled kernel (`kernel`, `csrc/`; its boundary is harness.abi), walks
compared with the shadow stack (`walks`), failure records (`failures`),
which stops a run verifies (`sampling`) and the per-stop loop (`stops`),
over a run of harness.emulation."""
