"""The efficiency report: sacct rows folded per job as seff does, advice, the CSV/Markdown/HTML files.

tests/fixtures/sacct_jobs.txt is one sacct call's output for jobs of known behaviour, captured on
the SLURM test cluster with tests/slurm/jobs.py (tests/fixtures/README.md describes each job).
"""
import base64
import re
import time
from pathlib import Path

import pandas as pd
import pytest

from airetrain.report import sacct
from airetrain.report.advice import advise
from airetrain.report.render import to_markdown, write
from airetrain.report.sacct import parse, parse_seff, seconds, seff_disagreement
from airetrain.report.collection import jobs_table
from airetrain.units import size_mb as megabytes
from sacct_synthetic import synthetic

FIXTURES = Path(__file__).parents[1] / "fixtures"
CAPTURED = (FIXTURES / "sacct_jobs.txt").read_text()
IDS = dict(line.split("=") for line in (FIXTURES / "sacct_jobs.ids").read_text().split())


@pytest.mark.parametrize("text,value", [("00:00:35", 35), ("00:44.048", 44.048), ("1-02:03:04", 93784),
                                        ("12:00.5", 720.5), ("", 0), ("UNLIMITED", 0)])
def test_sacct_durations(text, value):
    assert seconds(text) == pytest.approx(value)


@pytest.mark.parametrize("text,mb", [("1232988K", 1204.09), ("4G", 4096), ("4000M", 4000), ("4000Mn", 4000),
                                     ("2000Mc", 2000), ("0", 0), ("", 0)])
def test_sacct_memory(text, mb):
    assert megabytes(text) == pytest.approx(mb, abs=0.01)


def rows_of(job_id: str) -> list[dict]:
    """The captured rows of one job, as dicts of sacct's fields."""
    return [dict(zip(sacct.FIELDS, line.split("|"))) for line in CAPTURED.splitlines()
            if line.split("|")[0].split(".")[0] == job_id]


def seff_by_hand(job_id: str) -> tuple[float, float]:
    """seff's formulas written out on the raw rows (contribs/seff/seff): CPU = sum of the steps'
    TotalCPU / (Elapsed x AllocCPUS); memory = max over steps of TRESUsageInTot mem / AllocTRES mem."""
    rows = rows_of(job_id)
    last = max(i for i, r in enumerate(rows) if "." not in r["JobID"])   # a requeued job's last run
    alloc, steps = rows[last], rows[last + 1:]
    cpu = sum(seconds(r["TotalCPU"]) for r in steps)
    used = max(megabytes(sacct.tres(r["TRESUsageInTot"]).get("mem", "0")) for r in steps)
    return cpu / (seconds(alloc["Elapsed"]) * int(alloc["AllocCPUS"])), \
        used / megabytes(sacct.tres(alloc["AllocTRES"])["mem"])


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
    fields = {f: "" for f in sacct.FIELDS}
    row = {**fields, "JobID": "7", "JobName": "old", "State": "COMPLETED", "Elapsed": "00:01:40",
           "AllocCPUS": "4", "NNodes": "2", "AllocTRES": "cpu=4,node=2"}
    step = {**fields, "JobID": "7.0", "TotalCPU": "00:02:00", "MaxRSS": "100M", "NTasks": "4"}
    for req, alloc in (("300Mc", 1200), ("500Mn", 1000)):   # per core x 4 cores; per node x 2 nodes
        text = "\n".join("|".join({**r, "ReqMem": req}[f] for f in sacct.FIELDS) for r in (row, step))
        job = parse(text)["7"]
        assert job.mem_alloc_mb == alloc and job.mem_used_mb == 400   # MaxRSS x tasks: no TRES usage
        assert job.cpu_eff == pytest.approx(120 / (100 * 4))


def test_a_running_job_gets_figures_so_far_and_says_so():
    fields = {f: "" for f in sacct.FIELDS}
    row = {**fields, "JobID": "9", "JobName": "live", "State": "RUNNING", "Elapsed": "00:10:00",
           "Timelimit": "01:00:00", "AllocCPUS": "8", "NNodes": "1", "AllocTRES": "cpu=8,mem=16G,node=1,gres/gpu=1"}
    job = parse("|".join(row[f] for f in sacct.FIELDS))["9"]
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


SEFF_OUTPUT = """Job ID: {id}
Cluster: lab
State: COMPLETED (exit code 0)
Cores per node: 2
CPU Utilized: 00:00:08
CPU Efficiency: {cpu:.2f}% of 00:00:20 core-walltime
Job Wall-clock time: 00:00:10
Memory Utilized: 1.00 MB
Memory Efficiency: {mem:.2f}% of 500.00 MB (500.00 MB/node)
"""


def test_seffs_printed_figures_are_parsed_and_disagreements_named():
    job = parse(CAPTURED)[IDS["burner"]]
    same = parse_seff(SEFF_OUTPUT.format(id=job.job_id, cpu=job.cpu_eff * 100, mem=job.mem_eff * 100))
    assert same.keys() == {"cpu_eff", "mem_eff"} and seff_disagreement(job, same) == ""
    off = parse_seff(SEFF_OUTPUT.format(id=job.job_id, cpu=job.cpu_eff * 100 + 5, mem=job.mem_eff * 100))
    assert seff_disagreement(job, off).startswith("cpu_eff seff")


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


def test_report_files_csv_markdown_and_html_with_its_plots(tmp_path):
    df = jobs_table(list(IDS.values()), text=CAPTURED)
    paths = write(df, tmp_path)
    assert set(paths) >= {"csv", "md", "html", "efficiency_png", "throughput_png", "loss_png"}
    page = paths["html"].read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    for data in images:
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG") and len(raw) > 5000   # real images, not placeholders
    assert "OUT_OF_MEMORY" in page and "ran out of memory" in page
    md = to_markdown(df)
    assert "| run |" in md and "Advice:" in md and "`time_eff`" in md
    assert paths["csv"].read_text().splitlines()[0].startswith("run,state,job_id,job_state")


def test_five_hundred_synthetic_jobs_fold_into_one_row_each():
    text = synthetic(500)
    t0 = time.perf_counter()
    df = jobs_table(text=text)
    elapsed = time.perf_counter() - t0
    assert len(df) == 500 and df["requeues"].sum() == 50 and df["cpu_eff"].between(0.1, 0.9).all()
    print(f"500 synthetic jobs summarised in {elapsed * 1000:.0f} ms")


def test_stage_figures_and_the_advice_to_pack_a_slowly_staged_folder(tmp_path):
    from airetrain.report.collection import table

    for run_name, fmt in (("folder", "folder"), ("packed", "shards")):
        run_dir = tmp_path / run_name
        (run_dir / "benchmarks").mkdir(parents=True)
        (run_dir / "plan.json").write_text('{"cpus_per_node": 2, "nodes": 1, "mem_gb_per_node": 4}')
        (run_dir / "stage.json").write_text(
            f'{{"files": 1281167, "bytes": 150000000000, "seconds": 540.0, "mode": "copied", "format": "{fmt}", '
            f'"source": "/scratch/u/imagenet"}}')
        for step, wall in (("stage", 540.0), ("train", 5400.0), ("promote", 60.0)):
            (run_dir / "benchmarks" / f"{step}.tsv").write_text(f"s\tcpu_time\tmax_rss\n{wall}\t1.0\t100\n")
    df = table(tmp_path, ["folder", "packed"]).set_index("run")
    assert df.loc["folder", "stage_files"] == 1281167 and df.loc["folder", "stage_mb"] == 150000.0
    assert df.loc["folder", "stage_s"] == 540.0 and df.loc["folder", "stage_frac"] == pytest.approx(0.0900, abs=1e-4)
    assert "staging 1,281,167 files took 540 s, 9% of the job: pack this dataset into shards and stage those: " \
           "airetrain pack /scratch/u/imagenet /scratch/u/imagenet-shards" in df.loc["folder", "advice"]
    assert "pack" not in df.loc["packed", "advice"]   # already shards
    assert "stage_format" not in df.columns and "| stage_s | stage_frac |" in to_markdown(df.reset_index())


def test_the_page_shows_percentages_human_units_and_colours_as_reportseff_does():
    from airetrain.report.render import cell_class, cell_text

    assert cell_text("cpu_eff", 0.3479) == "34.8 %" and cell_text("mem_used_mb", 2.458e5) == "240.04 GB"
    assert cell_text("mem_used_mb", 411.6) == "412 MB" and cell_text("elapsed_s", 3725) == "01:02:05"
    assert cell_text("samples_per_s", 12345.6) == "12,346" and cell_text("cpus", 24.0) == "24"
    assert cell_text("eval_loss", 0.123456) == "0.1235" and cell_text("gpu_util", float("nan")) == ""
    assert [cell_class("cpu_eff", v) for v in (0.9, 0.5, 0.1)] == ["good", "fair", "poor"]
    assert [cell_class("time_eff", v) for v in (0.95, 0.5, 0.1)] == ["poor", "good", "fair"]
    assert cell_class("data_wait_frac", 0.4) == "poor" and cell_class("run", 0.1) == ""


def test_cpu_and_gpu_runs_are_plotted_apart():
    from airetrain.report.plots import throughput_plot

    df = pd.DataFrame({"run": ["cpu2", "g3", "g6"], "world_size": [2, 3, 6], "samples_per_s": [100.0, 900.0, 1700.0],
                       "device": ["cpu", "cuda", "cuda"]})
    axes = throughput_plot(df).axes
    assert [a.get_xlabel() for a in axes] == ["GPUs", "CPU processes"]
    assert [len(a.collections[0].get_offsets()) for a in axes] == [2, 1]   # g3, g6 | cpu2
    (only_cpu,) = throughput_plot(df[df["device"] == "cpu"]).axes
    assert only_cpu.get_xlabel() == "CPU processes"


def test_ten_slurm_jobs_page_fits_1280_px_in_chromium(tmp_path):
    from browser import measure, screenshot

    df = jobs_table(list(IDS.values()), text=CAPTURED)
    page = write(df, tmp_path)["html"]
    seen = measure(page, tmp_path)
    assert seen["rows"] == len(df) == 10 and seen["table_right"] <= 1280 and seen["page_width"] <= 1280, seen
    assert seen["images"] == seen["loaded"] == 3
    assert screenshot(page, tmp_path / "page.png").stat().st_size > 50_000
