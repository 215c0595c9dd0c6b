"""Planning, at parse time and in the plan step: config, sweep, the plan of each run and its refusals.

    config       load, validate and resolve the config; evaluation runs and init_from edges
    sweep        sweep grids and seeds expanded into named runs; groups of seeds
    planner      one run, all runs, a workflow's parse (a tuned run's trials when looked up): the Plan record
    search       a tuned run's search refused before anything is submitted
    layout       GPUs to nodes and ranks, the batch to accumulation, cores and memory
    refusals     what is refused before anything is submitted, and warnings
    strategy     strategy: auto decided from the memory estimate
    request      the SLURM request and torchrun's arguments
    rightsize    resources: measured (airetrain/sizing.py computes the requests)
    forecast     when each layout would start and finish
    packing      which runs share one allocation (pack)
    overview     the plan of every run as one table
    step_commands  the `airetrain` command each rule runs
    interpreter  which Python the rules run
    sbatch       `airetrain sbatch`: a stand-alone batch script for a run

Imports no torch (a test checks): every `snakemake -n` and every job's parse runs it.
"""
