"""Planning, at parse time and in the plan step: config, sweep, the plan of each run and its refusals.

Imports no torch (a test checks): every `snakemake -n` and every job's parse runs it.
"""
