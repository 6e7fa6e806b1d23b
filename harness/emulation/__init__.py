"""Emulation: Unicorn runs a program, below both the verifier
(harness.verify) and the operating system (harness.linux), knowing neither.

`emulator` runs the engine (`engine_pool` makes engines and keeps them
between bare-metal runs; `process_run` holds a process's hooks: system
calls, thread switches, faults, deadlines), `process_machine` is the engine
as a process's system calls act on it, `machine` what the system-call layer
may do to a machine, `placement` where the stack and the return sentinel
go, `livestack` the paused stack as unwinders read it, `guards` a run's
limits, the checks of its clock and memory, and the fault that ends it;
`binding` is where the emulation goes past Unicorn's public API, and why.
These are the only harness modules that import Unicorn.
"""
