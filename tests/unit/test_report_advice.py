"""report/advice.py: what to ask for next time, each tip with the numbers behind it."""
from airetrain.report.advice import advise


def test_advice_carries_the_numbers_behind_it():
    tips = advise({"job_state": "COMPLETED", "cpu_eff": 0.2, "cpus": 24, "world_size": 3, "data_wait_frac": 0.02,
                   "mem_eff": 0.1, "mem_used_mb": 20_000, "mem_alloc_mb": 200_000, "time_eff": 0.25,
                   "elapsed_s": 3600, "timelimit_s": 14_400})
    text = " | ".join(tips)
    assert "CPU efficiency 20% of 24 cores" in text and "cpus_per_rank: 2" in text   # 4.8 busy -> 6 cores
    assert "ask for 6 cores (--cpus-per-task=6 on one node" in text
    assert "--mem=24G" in text and "mem_gb_per_rank: 8" in text   # 20000 MB x 1.2, over 3 ranks
    assert "--time=01:30:00" in text        # 60 min x 1.5, in sbatch's syntax
    short = " | ".join(advise({"job_state": "COMPLETED", "cpu_eff": 0.1, "cpus": 4, "time_eff": 0.01,
                               "elapsed_s": 50, "timelimit_s": 6000}))
    assert "ask for 1 core (--cpus-per-task=1" in short and "--time=00:02:00" in short   # not "~1 cores", "1 min"
    data_bound = " | ".join(advise({"job_state": "COMPLETED", "cpu_eff": 0.3, "cpus": 8, "data_wait_frac": 0.45,
                                    "gpu_util": 0.3, "world_size": 1}))
    assert "raise data.workers" in data_bound and "more GPUs would not help: 45%" in data_bound
    assert "GPU busy 30%" in data_bound
    fsdp = advise({"strategy": "fsdp", "memory_estimate": {"ddp_per_gpu_gb": 10.0}})
    assert fsdp and "strategy: ddp" in fsdp[0]
    assert advise({"job_state": "OUT_OF_MEMORY", "mem_alloc_mb": 100})[0].startswith("ran out of memory")
    assert advise({"job_state": "COMPLETED", "cpu_eff": 0.9, "cpus": 4, "mem_eff": 0.8, "time_eff": 0.7}) == []


def test_the_advice_names_the_config_line_that_applies_it():
    from airetrain.report.advice import advise

    row = {"run": "a", "world_size": 2, "job_state": "COMPLETED", "mem_eff": 0.1, "mem_used_mb": 100.0,
           "mem_alloc_mb": 1000.0, "time_eff": 0.1, "elapsed_s": 60.0, "timelimit_s": 600.0}
    tips = advise(row)
    assert "(time_min: stage, train and promote add up to it)" in tips[1]
    assert tips[-1].startswith("to ask for what this run used, set resources: measured in runs.a (or in defaults)")
    assert advise({**row, "learned_from": "job 1 of a"})[-1].startswith("its requests were already right-sized")
    assert not any("resources: measured" in tip for tip in advise({**row, "world_size": None}))   # any SLURM job
    assert advise({**row, "mem_eff": 0.9, "time_eff": 0.9}) == []   # nothing to change, nothing to apply


def test_a_job_without_a_memory_figure_is_told_so_never_given_a_size():
    from airetrain.report.collection import job_row
    from airetrain.report.fold import FIELDS, parse

    fields = {f: "" for f in FIELDS}
    row = {**fields, "JobID": "5", "JobIDRaw": "5", "JobName": "quiet", "State": "COMPLETED", "Elapsed": "00:10:00",
           "Timelimit": "01:00:00", "AllocCPUS": "4", "NNodes": "1", "AllocTRES": "cpu=4,mem=16G,node=1"}
    step = {**fields, "JobID": "5.batch", "JobIDRaw": "5.batch", "State": "COMPLETED", "TotalCPU": "00:05:00",
            "MaxRSS": "0", "NTasks": "1", "TRESUsageInTot": "cpu=00:05:00", "TRESUsageInMax": ""}
    job = parse("\n".join("|".join(r[f] for f in FIELDS) for r in (row, step)))["5"]
    assert job.mem_alloc_mb == 16384 and job.mem_eff is None and job.figures()["mem_used_mb"] is None
    tips = " | ".join(advise({**job_row(job), "run": "quiet"}))
    assert "no memory figure" in tips and "--mem=" not in tips, tips
    assert "ask for 1 core" in tips   # the figures it has still give their advice
