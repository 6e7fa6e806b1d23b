"""unwind-harness: Chrome Unwind Info v2 for ARM32 Thumb-2, measured by emulation."""

__version__ = "0.1.0"
