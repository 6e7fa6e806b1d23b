"""`unwind-harness bench`: speed and size figures (`suite`: every figure,
and the table the command prints), one module per figure: the cost of
verifying against emulation alone (`overhead`), an unwinder step
(`step_cost`), the v2 encoder and reader at Chrome's scale (`scale`), table
sizes (`table_sizes`), a long program sampled (`sampled`).

Nothing is imported here: the figures measured in a fresh process (the
encoder's peak memory) import their own module and no other.
"""
