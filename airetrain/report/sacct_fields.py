"""The fields the query asks sacct for, in the order it prints them: query.py asks, jobs.py folds.

A module of its own so that the call starts before the fold's code is imported."""

FIELDS = ["JobID", "JobIDRaw", "JobName", "State", "ExitCode", "Start", "Elapsed", "Timelimit", "TotalCPU",
          "AllocCPUS", "ReqMem", "NNodes", "NTasks", "MaxRSS", "AllocTRES", "TRESUsageInTot", "TRESUsageInMax"]
