"""A researcher's own script, first-class, in a project from `airetrain init --script train.py`: the
train.py it writes trains as written on the local profile; three seeds reach it as three seeds and the
results table groups them; a search over its params is a plain Optuna study's, trial by trial, and a
promoted trial's next rung resumes from the checkpoint its last rung ended with."""
import csv
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from airetrain.rundir import metrics_log
from conftest import BIN, plain_study, read_json, run

pytestmark = pytest.mark.e2e
TUNE = {"space": {"params.lr": {"loguniform": [1.0e-3, 3.0e-1]}}, "trials": 6, "metric": "eval_loss",
        "sampler": {"tpe": {"seed": 1, "n_startup_trials": 3}},   # 3 trials at random, then TPE's model proposes
        "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 3}}, "parallel": 1}


def snakemake(project: Path, *configs: str) -> None:
    files = ["--configfile", *configs] if configs else []
    env = {k: v for k, v in os.environ.items() if k not in ("SCRATCH", "TMPDIR", "TMP_SHARED")}
    run([str(BIN / "snakemake"), "--profile", "profiles/local", *files], cwd=project, timeout=1200,
        env={**env, "PATH": f"{BIN}:{env['PATH']}"}, exact_env=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """init, then Snakemake with the local profile: nothing edited."""
    work = tmp_path_factory.mktemp("script-project")
    run([str(BIN / "airetrain"), "init", "proj", "--script", "train.py"], cwd=work)
    project = work / "proj"
    snakemake(project)
    return project


def weights(project: Path, run_name: str) -> dict:
    """The model of a run's last durable checkpoint, as the script saved it."""
    folder = project / ".airetrain/scratch/airetrain" / run_name / "checkpoints"
    newest = max(folder.glob("step-*.pt"))
    return torch.load(newest, weights_only=True)["model"]


def test_the_script_init_writes_trains_as_written(project):
    from airetrain.project import SCRIPT_TEMPLATE

    assert (project / "train.py").read_text() == SCRIPT_TEMPLATE.read_text()
    train = read_json(project / "results/first/train.json")
    assert train["strategy"] == "script" and train["steps"] == 5 * 2048 // 64   # 5 epochs of 32 steps
    assert train["sessions"] == [{"slurm_job_id": None, "step": 0, "checkpoint": None, "started_over": False}]
    evaluations = [json.loads(line) for line in open(project / "results/first/metrics.jsonl") if "eval_loss" in line]
    assert [e["epoch"] for e in evaluations] == [1, 2, 3, 4, 5]
    assert evaluations[-1]["eval_loss"] < evaluations[0]["eval_loss"]
    assert read_json(project / "results/first/checkpoint.json")["verified"]


@pytest.fixture(scope="module")
def seeded(project):
    (project / "config/seeds.yaml").write_text(yaml.safe_dump({"runs": {"seeded": {"seeds": [0, 1, 2]}}}))
    snakemake(project, "config/config.yaml", "config/seeds.yaml")
    return project


def test_three_seeds_reach_the_script_as_three_seeds_and_the_results_table_groups_them(seeded):
    runs = [f"seeded-seed{s}" for s in range(3)]
    trained = [weights(seeded, name) for name in runs]
    for a in range(3):   # each seed its own initialisation and data order: three different models
        for b in range(a + 1, 3):
            assert not torch.equal(trained[a]["0.weight"], trained[b]["0.weight"])
    first = weights(seeded, "first")   # seed 0 (train.seed's default) and the same params: the same bits
    assert all(torch.equal(first[k], trained[0][k]) for k in first)
    rows = list(csv.DictReader(open(seeded / "results/report/results.csv")))
    group = next(r for r in rows if r["group"] == "seeded")
    assert group["n_finished"] == "3" and float(group["eval_loss_sd"]) > 0, group   # mean ± sd of three


@pytest.fixture(scope="module")
def searched(project):
    (project / "config/search.yaml").write_text(yaml.safe_dump(
        {"runs": {"tuned": {"train": {"epochs": 3}, "tune": TUNE}}}, sort_keys=False))
    snakemake(project, "config/config.yaml", "config/search.yaml")
    return project


def curves(project: Path, trial: str) -> dict[int, float]:
    """{epochs trained: eval_loss} from every rung the trial trained, as the script logged them."""
    out = {}
    for rung in sorted(project.glob(f"results/{trial}-e*")):
        out.update({line["epoch"]: line["eval_loss"] for line in map(json.loads, open(rung / "metrics.jsonl"))
                    if "eval_loss" in line})
    return out


def test_a_search_over_a_scripts_params_is_a_plain_optuna_studys_trial_by_trial(searched):
    import optuna

    rows = list(csv.DictReader(open(searched / "results/tuned/tune.csv")))
    reported = {float(r["params.lr"]): curves(searched, r["run"]) for r in rows}
    study = plain_study(lambda trial: trial.suggest_float("params.lr", 1e-3, 3e-1, log=True), reported, 6, 3,
                        optuna.samplers.TPESampler(seed=1, n_startup_trials=3), 3)
    assert [t.params["params.lr"] for t in study.trials] == list(reported)
    assert [t.state.name for t in study.trials] == [r["state"].split(" ")[0].upper() for r in rows]
    assert [max(t.intermediate_values) for t in study.trials] == [int(r["epochs"]) for r in rows]
    assert {"PRUNED", "COMPLETE"} <= {t.state.name for t in study.trials}
    best = min((r for r in rows if r["state"] == "complete"), key=lambda r: float(r["value"]))
    assert study.best_trial.number == int(best["trial"])


def test_a_promoted_trials_next_rung_resumes_from_its_last_checkpoint_and_retrains_nothing(searched):
    promoted = [r for r in csv.DictReader(open(searched / "results/tuned/tune.csv")) if r["epochs"] == "3"]
    assert promoted
    for row in promoted:
        first, then = searched / f"results/{row['run']}-e1", searched / f"results/{row['run']}-e3"
        ended = read_json(first / "train.json")["steps"]
        resumed = read_json(then / "train.json")["sessions"][-1]
        assert resumed["step"] == ended == 32 and not resumed["started_over"]
        recorded = read_json(first / "checkpoint.json")["files"][Path(resumed["checkpoint"]).name]
        assert hashlib.sha256(Path(resumed["checkpoint"]).read_bytes()).hexdigest() == recorded
        lines = metrics_log.parse((then / "metrics.jsonl").read_text())   # the trial's history, this rung's last
        begun = max(i for i, line in enumerate(lines) if metrics_log.BEGIN in line)
        assert lines[begun][metrics_log.BEGIN] == ended
        steps = [line["step"] for line in lines[begun + 1:]]
        assert min(steps) > ended and max(steps) == 3 * 32   # no step of the first rung trained again
