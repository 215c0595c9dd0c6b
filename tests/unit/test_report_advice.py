"""report/advice.py: what to ask for next time, each tip with the numbers behind it."""
from airetrain.report.advice import advise


def test_advice_carries_the_numbers_behind_it():
    """Any SLURM job (no plan): the job's own figures with right-sizing's headrooms (airetrain.sizing)."""
    tips = advise({"job_state": "COMPLETED", "cpu_eff": 0.2, "cpus": 24, "data_wait_frac": 0.02,
                   "mem_eff": 0.1, "mem_used_mb": 20_000, "mem_alloc_mb": 200_000, "time_eff": 0.25,
                   "elapsed_s": 3600, "timelimit_s": 14_400})
    text = " | ".join(tips)
    assert "CPU efficiency 20% of 24 cores (about 4.8 busy): ask for 6 cores (--cpus-per-task=6 on one node" in text
    assert "--mem=25G would do (peak x 1.25)" in text   # 20000 MB x 1.25 = 24.4 GB
    assert "--time=01:18:00 (x 1.3)" in text        # 60 min x 1.3, in sbatch's syntax
    short = " | ".join(advise({"job_state": "COMPLETED", "cpu_eff": 0.1, "cpus": 4, "time_eff": 0.01,
                               "elapsed_s": 50, "timelimit_s": 6000}))
    assert "ask for 1 core (--cpus-per-task=1" in short and "--time=00:02:00" in short   # not "~1 cores", "1 min"
    data_bound = " | ".join(advise({"job_state": "COMPLETED", "cpu_eff": 0.3, "cpus": 8, "data_wait_frac": 0.45,
                                    "gpu_util": 0.3, "world_size": 1}))
    assert "raise data.workers" in data_bound and "more GPUs would not help: 45%" in data_bound
    assert "GPU busy 30%" in data_bound
    fsdp = advise({"strategy": "fsdp", "memory_estimate": {"ddp_per_gpu_gb": 10.0}, "gpu_type": "l40s"})
    assert fsdp and "strategy: ddp" in fsdp[0]
    assert advise({"job_state": "OUT_OF_MEMORY", "mem_alloc_mb": 100})[0].startswith("ran out of memory")
    assert advise({"job_state": "COMPLETED", "cpu_eff": 0.9, "cpus": 4, "mem_eff": 0.8, "time_eff": 0.7}) == []


def test_the_advice_quotes_the_request_the_next_plan_makes(tmp_path):
    """A pipeline run that used little of its request: the advice names resources: measured and quotes,
    key by key, what the next plan with it asks for once the report has recorded this job."""
    from airetrain.rundir.history import record
    from airetrain.plan.planner import plan_all
    from airetrain.report.collection import next_request

    from conftest import ENV, finished_run

    results, scratch = tmp_path / "results", tmp_path / "scratch"
    asked = {"processes": 2, "cpus_per_rank": 4, "time_min": {"stage": 10, "train": 60, "promote": 10},
             "train": {"epochs": 10}}
    finished_run(results, scratch, "a", asked, "4242")
    (results / "a" / "benchmarks" / "train.tsv").write_text("s\th:m:s\tmax_rss\n140.0\t0:02:20\t900\n")
    row = {"run": "a", "world_size": 2, "job_state": "COMPLETED", "source": "sacct", "cpus": 8, "cpu_eff": 0.2,
           "mem_used_mb": 900.0, "mem_alloc_mb": 4096.0, "mem_eff": 0.22, "elapsed_s": 240.0,
           "timelimit_s": 4800.0, "time_eff": 0.05, "stage_s": 30.0}
    text = " | ".join(advise({**row, "next_request": next_request(results / "a", plan_all(
        {"roots": {"scratch": str(scratch)}, "runs": {"a": asked}}, env=ENV)["a"], row)}))

    record(results, [row])   # what the report rule does after the advice
    nxt = plan_all({"roots": {"scratch": str(scratch)}, "runs": {"a": {**asked, "resources": "measured"}}},
                   env=ENV)["a"]
    sized = nxt.right_sized
    assert f"ask for cpus_per_rank: {nxt.cpus_per_rank} ({sized['cpus_per_rank']['how']})" in text
    assert f"ask for mem_gb_per_node: {nxt.mem_gb_per_node:g} ({sized['mem_gb_per_node']['how']})" in text
    t = nxt.time_min
    assert f"ask for time_min: {{stage: {t.stage}, train: {t.train}, promote: {t.promote}}} " \
           f"({sized['time_min']['how']})" in text
    assert nxt.cpus_per_rank != 4 and nxt.mem_gb_per_node != 4 and t.total != 80   # each differs from the request
    assert "set resources: measured in runs.a (or in defaults): the next plan then asks for these" in text
    assert "its requests were already right-sized" in advise({**row, "learned_from": "job 1 of a"})[-1]


def test_a_job_without_a_memory_figure_is_told_so_never_given_a_size():
    from airetrain.report.collection import job_row
    from airetrain.report.jobs import FIELDS, parse

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


def test_the_memory_tips_use_the_jobs_own_gpu_and_none_where_it_is_not_known():
    """12 GB at peak: under 30 % of an L40S's 48 GB and of an A100's 80 GB; a type the table lacks gets no tip,
    and an FSDP run whose DDP estimate fits the GPU is told so only where the GPU's memory is known."""
    def tips(gpu_type, estimate=30.0):
        return " | ".join(advise({"gpu_mem_peak_mb": 12 * 1024, "gpu_type": gpu_type, "strategy": "fsdp",
                                  "memory_estimate": {"ddp_per_gpu_gb": estimate}}))

    assert "GPU memory peak 12.0 GB of 48 GB (l40s)" in tips("l40s") and "strategy: ddp" in tips("l40s")
    assert "of 80 GB (NVIDIA A100-SXM4-80GB)" in tips("NVIDIA A100-SXM4-80GB")
    assert "strategy: ddp" not in tips("l40s", estimate=45.0)   # 45 GB is over 0.8 x 48: FSDP was right
    assert tips("some_new_gpu") == "" and tips(None) == ""
