"""ARM Linux programs verified as processes, on the operating-system
emulation (harness.linux) and the verifier (harness.verify): the modules a
run loads, each with its tables and unwinders, and the first run that finds
them (`modules`); a process verified, `verify-elf PROGRAM` without --entry
(`verify`); the Linux corpus in the main job (`corpus`)."""
