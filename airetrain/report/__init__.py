"""The reports, after reportseff: query, fold per job, collect, render; imports no torch.

The efficiency report:
    query           ONE sacct call for all jobs, started before its answer is needed
    sacct_fields    the fields it asks sacct for
    jobs            its rows folded into one Job per id, as seff computes the figures
    seff            seff's own figures where a site installs it, as a cross-check
    collection      a row per run or job, joined with the trainer's figures, with advice
    energy          each job's energy and CO2e: measured by SLURM, else Green Algorithms' estimate
    advice          what to ask for next time, with the numbers behind it
    plots           efficiency, throughput against GPUs, loss curves
    render          efficiency.csv, efficiency.md and the self-contained efficiency.html
The results table:
    results         a row per run and per group of seeds: mean, sd and 95 % CI of each metric
    results_render  results.csv, results.md, results.html and each metric's curves
    compare         `airetrain compare`: the keys that differ between runs, their figures side by side
And:
    status          `airetrain status`: where every run is, from one squeue and one sacct call
"""
