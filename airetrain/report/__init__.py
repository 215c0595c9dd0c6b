"""The efficiency report, after reportseff: query, fold per job, collect, render; imports no torch.

    sacct    ONE sacct call for all jobs (the query), folded into one Job per id as seff computes it
    table    the collection: a row per run or job, joined with the trainer's figures, with advice
    advice   what to ask for next time, with the numbers behind it
    plots    efficiency, throughput against GPUs, loss curves
    render   efficiency.csv, efficiency.md and the self-contained efficiency.html
"""
