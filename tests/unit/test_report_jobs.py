"""report/jobs.py: sacct's rows folded into one Job per id, as seff computes the figures.

tests/fixtures/sacct_jobs.txt is one sacct call's output for jobs of known behaviour, captured on
the SLURM test cluster with tests/slurm/jobs.py (tests/fixtures/README.md describes each job).
"""
import pytest

from airetrain.report.advice import advise
from airetrain.report.jobs import FIELDS, parse, seconds, tres
from airetrain.cluster.units import size_mb as megabytes

from sacct_captured import CAPTURED, IDS, rows_of


@pytest.mark.parametrize("text,value", [("00:00:35", 35), ("00:44.048", 44.048), ("1-02:03:04", 93784),
                                        ("12:00.5", 720.5), ("", 0), ("UNLIMITED", 0)])
def test_sacct_durations(text, value):
    assert seconds(text) == pytest.approx(value)


@pytest.mark.parametrize("text,mb", [("1232988K", 1204.09), ("4G", 4096), ("4000M", 4000), ("4000Mn", 4000),
                                     ("2000Mc", 2000), ("0", 0), ("", 0)])
def test_sacct_memory(text, mb):
    assert megabytes(text) == pytest.approx(mb, abs=0.01)


def seff_by_hand(job_id: str) -> tuple[float, float]:
    """seff's formulas written out on the raw rows (contribs/seff/seff): CPU = sum of the steps'
    TotalCPU / (Elapsed x AllocCPUS); memory = max over steps of TRESUsageInTot mem / AllocTRES mem."""
    rows = rows_of(job_id)
    last = max(i for i, r in enumerate(rows) if "." not in r["JobID"])   # a requeued job's last run
    alloc, steps = rows[last], rows[last + 1:]
    cpu = sum(seconds(r["TotalCPU"]) for r in steps)
    used = max(megabytes(tres(r["TRESUsageInTot"]).get("mem", "0")) for r in steps)
    return cpu / (seconds(alloc["Elapsed"]) * int(alloc["AllocCPUS"])), \
        used / megabytes(tres(alloc["AllocTRES"])["mem"])


def test_one_sacct_output_folds_into_every_job_with_a_clear_state():
    jobs = parse(CAPTURED, list(IDS.values()) + ["999999"])
    states = {name: jobs[job_id].state for name, job_id in IDS.items() if name != "array"}
    assert states == {"burner": "COMPLETED", "toucher": "COMPLETED", "multinode": "COMPLETED", "percpu": "COMPLETED",
                      "requeued": "COMPLETED", "cancelled": "CANCELLED", "timeout": "TIMEOUT", "oom": "OUT_OF_MEMORY"}
    assert jobs["999999"].state == "MISSING" and "not in accounting" in jobs["999999"].status
    assert jobs["999999"].cpu_eff is None
    array = [j for j in jobs if j.startswith(IDS["array"] + "_")]
    assert len(array) == 2 and all(jobs[j].state == "COMPLETED" for j in array)   # each task is a job
    requeued = jobs[IDS["requeued"]]
    assert requeued.runs == 2 and "requeued 1x" in requeued.status
    assert requeued.elapsed_all_runs_s > requeued.elapsed_s
    assert "cancelled" in jobs[IDS["cancelled"]].status and jobs[IDS["timeout"]].time_eff >= 1.0


def test_known_efficiencies_come_out():
    jobs = parse(CAPTURED)
    burner, toucher = jobs[IDS["burner"]], jobs[IDS["toucher"]]
    assert 0.3 < burner.cpu_eff < 0.55          # one busy core of two
    assert 0.45 < toucher.mem_eff < 0.62        # 500 MB held of 1000 MB
    percpu = jobs[IDS["percpu"]]
    assert percpu.mem_alloc_mb == 600 and 0.45 < percpu.mem_eff < 0.62   # 300 MB of 2 x 300 MB
    multinode = jobs[IDS["multinode"]]
    assert multinode.nodes == 2
    # seff sums the tasks' peaks: both nodes' 200 MB, not the largest task alone
    assert multinode.mem_used_mb > 1.8 * multinode.max_task_rss_mb > 350


@pytest.mark.parametrize("name", ["burner", "toucher", "multinode", "percpu", "requeued", "cancelled", "timeout"])
def test_cpu_and_memory_match_seffs_formulas_to_a_tenth_of_a_point(name):
    job = parse(CAPTURED)[IDS[name]]
    cpu, mem = seff_by_hand(IDS[name])
    assert abs(job.cpu_eff - cpu) * 100 < 0.1
    assert abs(job.mem_eff - mem) * 100 < 0.1


def test_old_records_without_allocated_memory_fall_back_to_the_request():
    fields = {f: "" for f in FIELDS}
    row = {**fields, "JobID": "7", "JobName": "old", "State": "COMPLETED", "Elapsed": "00:01:40",
           "AllocCPUS": "4", "NNodes": "2", "AllocTRES": "cpu=4,node=2"}
    step = {**fields, "JobID": "7.0", "TotalCPU": "00:02:00", "MaxRSS": "100M", "NTasks": "4"}
    for req, alloc in (("300Mc", 1200), ("500Mn", 1000)):   # per core x 4 cores; per node x 2 nodes
        text = "\n".join("|".join({**r, "ReqMem": req}[f] for f in FIELDS) for r in (row, step))
        job = parse(text)["7"]
        assert job.mem_alloc_mb == alloc and job.mem_used_mb == 400   # MaxRSS x tasks: no TRES usage
        assert job.cpu_eff == pytest.approx(120 / (100 * 4))


def test_a_running_job_gets_figures_so_far_and_says_so():
    fields = {f: "" for f in FIELDS}
    row = {**fields, "JobID": "9", "JobName": "live", "State": "RUNNING", "Elapsed": "00:10:00",
           "Timelimit": "01:00:00", "AllocCPUS": "8", "NNodes": "1", "AllocTRES": "cpu=8,mem=16G,node=1,gres/gpu=1"}
    job = parse("|".join(row[f] for f in FIELDS))["9"]
    assert job.status == "running: figures so far" and job.time_eff == pytest.approx(1 / 6)
    assert job.gpu_hours == pytest.approx(10 / 60) and job.cpu_eff == 0.0
    assert advise({"job_state": "RUNNING", **job.figures()}) == []   # no advice from a job half done


# sacct a moment after a job started on the test cluster: the batch step runs, the job's own record
# does not know yet (PENDING, named "allocation", no time limit, ReqMem "16?")
JUST_STARTED = """159|159|allocation|PENDING|0:0|2026-11-29T21:00:40|00:00:01||00:00:00|0|16?|0|||||
159.batch|159.batch|batch|RUNNING|0:0|2026-11-29T21:00:40|00:00:01||00:00:00|1||1|1||cpu=1,mem=200M,node=1||
"""


def test_a_job_whose_start_accounting_has_not_recorded_yet_is_running_without_figures():
    job = parse(JUST_STARTED, ["159"])["159"]
    assert job.state == "RUNNING" and job.status == "just started: accounting has no figures yet"
    assert job.cpu_eff is None and job.time_eff is None and advise({"job_state": "RUNNING", **job.figures()}) == []


def test_an_array_task_asked_for_by_its_raw_id_is_that_task_once():
    from airetrain.report.collection import jobs_rows
    from airetrain.report.jobs import lookup

    task = rows_of(f"{IDS['array']}_1")[0]
    raw = task["JobIDRaw"]
    assert raw != IDS["array"]   # the captured task ran with an id of its own (SLURM_JOB_ID)
    jobs = parse(CAPTURED, [raw])
    assert raw not in jobs and lookup(jobs, raw).job_id == task["JobID"]   # found, and not made MISSING
    assert lookup(jobs, raw).state == "COMPLETED"
    rows, _ = jobs_rows([raw], text="\n".join(line for line in CAPTURED.splitlines()
                                              if line.split("|")[1].partition(".")[0] == raw))
    assert [(r["job_id"], r["job_state"]) for r in rows] == [(task["JobID"], "COMPLETED")]


# Rows as `sacct --parsable2 --noheader --duplicates` prints them (FIELDS' order), in the formats
# sacct has used across SLURM versions.
FORMATS = {
    "old per-node memory": ("11|11|a|COMPLETED|0:0|2026-01-01T00:00:00|00:10:00|01:00:00|00:20:00|4|4000Mn|2|||"
                            "cpu=4,node=2||", {"mem_alloc_mb": 8000, "timelimit_s": 3600}),
    "old per-core memory": ("12|12|b|COMPLETED|0:0|2026-01-01T00:00:00|00:10:00|01:00:00|00:20:00|4|2Gc|1|||"
                            "cpu=4,node=1||", {"mem_alloc_mb": 8192}),
    "no time limit": ("13|13|c|COMPLETED|0:0|2026-01-01T00:00:00|00:10:00|UNLIMITED|00:20:00|4|4G|1|||"
                      "cpu=4,mem=4G,node=1||", {"timelimit_s": None, "time_eff": None}),
    "the partition's limit": ("14|14|d|COMPLETED|0:0|2026-01-01T00:00:00|00:10:00|Partition_Limit|00:20:00|4|4G|"
                              "1|||cpu=4,mem=4G,node=1||", {"timelimit_s": None}),
    "days": ("15|15|e|TIMEOUT|0:0|2026-01-01T00:00:00|3-04:05:06|3-04:00:00|6-00:00:00|2|4G|1|||"
             "cpu=2,mem=4G,node=1||", {"elapsed_s": 273906, "timelimit_s": 273600, "state": "TIMEOUT"}),
    "a pending array": ("16_[4-9]|16|f|PENDING|0:0|Unknown|00:00:00|00:10:00|00:00:00|1|1G|1|||"
                        "billing=1,cpu=1,mem=1G,node=1||", {"job_id": "16_[4-9]", "state": "PENDING"}),
    "cancelled by a user": ("17|17|g|CANCELLED by 1000|0:15|2026-01-01T00:00:00|00:01:00|00:10:00|00:00:30|1|1G|"
                            "1|||cpu=1,mem=1G,node=1||", {"state": "CANCELLED", "status": "cancelled"}),
}


@pytest.mark.parametrize("name", FORMATS)
def test_sacct_formats_across_versions(name):
    line, expected = FORMATS[name]
    assert len(line.split("|")) == len(FIELDS), "the row must have every field"
    jobs = parse(line)
    job = next(iter(jobs.values()))
    figures = {**job.figures(), "job_id": job.job_id}
    assert {key: figures[key] for key in expected} == expected


def test_steps_without_a_job_row_are_kept_and_raise_nothing():
    step = "18.batch|18.batch|batch|COMPLETED|0:0|2026-01-01T00:00:00|00:05:00||00:04:00|2||1|1|500M|cpu=2,mem=1G|" \
           "cpu=00:04:00,mem=500M|mem=500M"
    job = parse(step, ["18"])["18"]
    # no allocation row: nothing is known of what was asked for, so no efficiency is claimed
    assert job.state == "MISSING" and job.cpu_eff is None and job.mem_eff is None
    assert job.step_ids == ["18.batch"] and job.total_cpu_s == 240


# A 2-node job whose second node died (tests/slurm/test_slurm_node_fail.py), requeued by SLURM and run
# to its end: its rows as sacct printed them on the test cluster (the steps' TRES usage cut short)
NODE_FAILED = """\
7|7|92015395|NODE_FAIL|0:0|2026-12-02T21:39:53|00:00:34|00:20:00|00:22.600|6|12G|2|||billing=6,cpu=6,gres/gpu=6,mem=12G,node=2||
7.batch|7.batch|batch|CANCELLED|0:15|2026-12-02T21:39:53|00:00:35||00:00.005|3||1|1|297132K|cpu=3,mem=6G,node=1|mem=297132K|mem=297132K
7.1|7.1|bash|FAILED|1:0|2026-12-02T21:39:58|00:00:34||00:22.101|6||2|2|1258968K|cpu=6,mem=12G,node=2|mem=1258968K|mem=1258968K
7|7|92015395|COMPLETED|0:0|2026-12-02T21:40:43|00:00:31|00:20:00|00:46.134|6|12G|2|||billing=6,cpu=6,gres/gpu=6,mem=12G,node=2||
7.batch|7.batch|batch|COMPLETED|0:0|2026-12-02T21:40:43|00:00:31||00:08.413|3||1|1|485232K|cpu=3,mem=6G,node=1|mem=485232K|mem=485232K
7.1|7.1|bash|COMPLETED|0:0|2026-12-02T21:40:48|00:00:21||00:37.253|6||2|2|1251028K|cpu=6,mem=12G,node=2|mem=2491284K|mem=1251028K
"""


def test_a_job_requeued_after_a_node_failure_says_so_and_shows_its_last_run():
    job = parse(NODE_FAILED)["7"]
    assert job.runs == 2 and job.earlier_states == ["NODE_FAIL"]
    assert job.status == "completed; requeued 1x after NODE_FAIL"
    assert job.elapsed_s == 31 and job.elapsed_all_runs_s == 65 and job.gpu_hours == 6 * 65 / 3600
    assert job.mem_used_mb == 2491284 / 1024   # the last run's steps only


def test_a_job_requeued_by_hand_or_by_its_own_stop_has_no_cause_to_name():
    rows = NODE_FAILED.replace("|NODE_FAIL|", "|REQUEUED|", 1)
    assert parse(rows)["7"].status == "completed; requeued 1x"


# a pack of three one-GPU runs on the SLURM test cluster (pack: auto): the batch step, the node check's
# step (.0) and each run's own step, captured with `sacct --parsable2 --noheader --duplicates`
PACK_SACCT = """\
329|329|ca9a7cab-0a09-4390-905b-824c8c96bf74|COMPLETED|0:0|2026-12-05T23:20:54|00:00:24|00:20:00|00:20.653|3|6G|1|||billing=3,cpu=3,gres/gpu:l40s=3,gres/gpu=3,mem=6G,node=1||
329.batch|329.batch|batch|COMPLETED|0:0|2026-12-05T23:20:54|00:00:24||00:08.451|3||1|1|603616K|cpu=3,gres/gpu:l40s=3,gres/gpu=3,mem=6G,node=1|cpu=00:00:05,energy=0,fs/disk=195450953,mem=603616K,pages=0,vmem=3397796K|cpu=00:00:05,energy=0,fs/disk=195450953,mem=603616K,pages=0,vmem=3397796K
329.0|329.0|python|COMPLETED|0:0|2026-12-05T23:20:59|00:00:01||00:00.183|1||1|1|2992K|cpu=1,gres/gpu:l40s=3,gres/gpu=3,mem=6G,node=1|cpu=00:00:00,energy=0,fs/disk=0,mem=2992K,pages=0,vmem=143028K|cpu=00:00:00,energy=0,fs/disk=0,mem=2992K,pages=0,vmem=143028K
329.1|329.1|bash|COMPLETED|0:0|2026-12-05T23:21:01|00:00:08||00:03.966|1||1|1|539380K|cpu=1,gres/gpu:l40s=1,gres/gpu=1,mem=2G,node=1|cpu=00:00:02,energy=0,fs/disk=78084947,mem=539380K,pages=0,vmem=2057396K|cpu=00:00:02,energy=0,fs/disk=78084947,mem=539380K,pages=0,vmem=2057396K
329.2|329.2|bash|COMPLETED|0:0|2026-12-05T23:21:01|00:00:08||00:04.039|1||1|1|537416K|cpu=1,gres/gpu:l40s=1,gres/gpu=1,mem=2G,node=1|cpu=00:00:03,energy=0,fs/disk=81747490,mem=537416K,pages=0,vmem=2055364K|cpu=00:00:03,energy=0,fs/disk=81747490,mem=537416K,pages=0,vmem=2055364K
329.3|329.3|bash|COMPLETED|0:0|2026-12-05T23:21:01|00:00:08||00:04.012|1||1|1|538768K|cpu=1,gres/gpu:l40s=1,gres/gpu=1,mem=2G,node=1|cpu=00:00:03,energy=0,fs/disk=81815124,mem=538768K,pages=0,vmem=2057396K|cpu=00:00:03,energy=0,fs/disk=81815124,mem=538768K,pages=0,vmem=2057396K
"""


def test_each_step_is_also_a_job_of_its_own_a_packed_runs_share():
    job = parse(PACK_SACCT)["329"]
    assert (job.gpus, job.cpus, job.mem_alloc_mb) == (3, 3, 6144)
    run = job.steps["329.2"]
    assert (run.gpus, run.cpus, run.mem_alloc_mb, run.elapsed_s, run.state) == (1, 1, 2048, 8, "COMPLETED")
    assert run.cpu_eff == pytest.approx(4.039 / 8)
    assert run.mem_used_mb == pytest.approx(537416 / 1024) and run.mem_eff == pytest.approx(537416 / 1024 / 2048)
    assert run.timelimit_s == 1200 and run.gpu_type == "l40s"
