"""report/collection.py: a row per run or job, the trainer's figures joined with SLURM's, and the advice."""
import json
import time

import pytest

from airetrain.report.collection import jobs_table, table
from airetrain.report.render import to_markdown

from conftest import write_plan
from sacct_synthetic import synthetic


def test_five_hundred_synthetic_jobs_fold_into_one_row_each():
    text = synthetic(500)
    t0 = time.perf_counter()
    df = jobs_table(text=text)
    elapsed = time.perf_counter() - t0
    assert len(df) == 500 and df["requeues"].sum() == 50 and df["cpu_eff"].between(0.1, 0.9).all()
    print(f"500 synthetic jobs summarised in {elapsed * 1000:.0f} ms")


def test_stage_figures_and_the_advice_to_pack_a_slowly_staged_folder(tmp_path):
    for run_name, fmt in (("folder", "folder"), ("packed", "shards")):
        run_dir = tmp_path / run_name
        (run_dir / "benchmarks").mkdir(parents=True)
        write_plan(tmp_path, tmp_path / "roots", run_name, {"processes": 2})   # 2 cores and 4 GB on one node
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


def test_a_run_whose_accounting_is_unavailable_is_marked_and_keeps_its_own_figures(tmp_path):
    from airetrain.report.collection import run_row
    from conftest import finished_run

    finished_run(tmp_path / "results", tmp_path / "scratch", "r", {}, job_id="4242")
    (tmp_path / "results" / "r" / "benchmarks" / "promote.tsv").write_text(   # as Snakemake's benchmark writes it
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        "3.25\t0:00:03\t120\t300\t110\t112\t0\t1\t80\t2.6\n")
    row = run_row(tmp_path / "results" / "r", None, "sacct gave no answer within 60 s")
    assert row["job_state"] == "UNKNOWN" and row["status"] == (
        "accounting unavailable (sacct gave no answer within 60 s): the sacct figures are missing; run the report "
        "again once accounting answers")
    assert row["source"] == "benchmark" and row["elapsed_s"] == 3.25 and row["samples_per_s"] == 128.0


def test_a_runs_best_value_its_epoch_and_an_early_stop_are_in_its_row_and_the_table(tmp_path):
    import json

    from airetrain.report.collection import run_row
    from conftest import finished_run

    finished_run(tmp_path / "results", tmp_path / "scratch", "r", {}, job_id=None)
    path = tmp_path / "results" / "r" / "train.json"
    train = json.loads(path.read_text())
    train.update(eval_loss=0.52, best={"step": 44, "epoch": 1, "metric": "eval_loss", "value": 0.4871},
                 stopped_early={"step": 88, "epoch": 3, "best_step": 44, "best_value": 0.4871})
    path.write_text(json.dumps(train))
    (tmp_path / "results" / "r" / "benchmarks" / "promote.tsv").write_text("s\tcpu_time\tmax_rss\n3.25\t2.6\t120\n")
    row = run_row(tmp_path / "results" / "r", None)
    assert (row["best"], row["best_epoch"], row["stopped_early"]) == (0.4871, 2, 88)
    text = to_markdown(table(tmp_path / "results", ["r"]))
    assert "| best | best_epoch | stopped_early |" in text and "| 0.4871 | 2 | 88 |" in text


def test_a_job_that_packed_runs_shared_keeps_a_row_of_its_own_beside_each_runs_share(tmp_path):
    from airetrain.report.collection import pack_rows, run_row
    from airetrain.report.jobs import parse
    from test_report_jobs import PACK_SACCT   # a pack of three one-GPU runs, captured on the SLURM test cluster

    runs = ["p-seed0", "p-seed1", "p-seed2", "alone"]
    for run, step in zip(runs, ("329.1", "329.2", "329.3", None)):
        (tmp_path / run).mkdir()
        (tmp_path / run / "train.json").write_text(json.dumps({"slurm_job_id": "329", "slurm_step": step}
                                                              if step else {"slurm_job_id": "400"}))
    accounting = parse(PACK_SACCT)
    assert run_row(tmp_path / "p-seed1", accounting)["gpus"] == 1   # each run: its step's share
    (row,) = pack_rows(tmp_path, runs, accounting)   # the job whole, once; the run with a job of its own has none
    assert (row["run"], row["state"], row["job_id"], row["gpus"], row["cpus"], row["mem_alloc_mb"]) == \
        ("pack-p-seed0", "pack", "329", 3, 3, 6144)
    assert row["status"].startswith("shared by p-seed0, p-seed1, p-seed2")


def test_a_packed_scripts_share_is_its_step_named_after_it(tmp_path):
    """A script's train.json is written outside its step, so it names no step: the step's name (the run's, as
    the launch names it) finds its share."""
    from airetrain.report.collection import run_row
    from airetrain.report.jobs import parse
    from test_report_jobs import PACK_SACCT

    named = PACK_SACCT.replace("329.2|329.2|bash|", "329.2|329.2|mine-seed1|")
    (tmp_path / "mine-seed1").mkdir()
    (tmp_path / "mine-seed1" / "train.json").write_text(json.dumps({"slurm_job_id": "329"}))
    row = run_row(tmp_path / "mine-seed1", parse(named))
    assert (row["gpus"], row["cpus"], row["mem_alloc_mb"], row["elapsed_s"]) == (1, 1, 2048, 8)
    assert run_row(tmp_path / "mine-seed1", parse(PACK_SACCT))["gpus"] == 3   # no step of its name: the job
