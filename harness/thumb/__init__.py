"""What the harness knows of Thumb-2 instructions: facts read off the
encoding bits (`encoding`, each naming its C twin), capstone's decoding
(`disasm`), and what teardown instructions do to a frame (`epilogue`)."""
